"""MkDocs hook: the command and configuration reference pages, generated at build time from the
CLI parser (`publisher/cli/parser.py`) and the typed configuration (`publisher/config/`), so that
neither is written twice by hand."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import textwrap
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from publisher.cli.parser import build_parser
from publisher.config import Config
from publisher.config.loading import ENV_PREFIX

CLI_PAGE = "reference/cli.md"
CONFIG_PAGE = "reference/configuration.md"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, text in ((CLI_PAGE, cli_page()), (CONFIG_PAGE, configuration_page())):
        files.append(File.generated(config, uri, content=text))
    return files


# --- commands ---------------------------------------------------------------------------------


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser, in the order `publisher --help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_page() -> str:
    parser = build_parser()
    lines = [
        "# Commands",
        "",
        "Generated from the command's own parser (`publisher/cli/parser.py`): what `publisher COMMAND --help`",
        "says, one section per command. Exit codes are on [their own page](exit-codes.md).",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
        _escape(parser.description or ""),
        "",
    ]
    if parser.epilog:
        lines += ["```text", parser.epilog.rstrip(), "```", ""]
    for name, sub in subcommands(parser).items():
        lines += _command_section(name, sub)
    return "\n".join(lines) + "\n"


def _command_section(name: str, sub: argparse.ArgumentParser) -> list[str]:
    usage = sub.format_usage().strip().removeprefix("usage: ")
    lines = [f"## publisher {name}", "", "```text", usage, "```", ""]
    description = sub.description or ""
    if isinstance(sub.formatter_class, type) and issubclass(sub.formatter_class, argparse.RawDescriptionHelpFormatter):
        lines += ["```text", description.rstrip(), "```", ""]
    else:
        lines += [_escape(" ".join(description.split())), ""]
    rows = [_option_row(action) for action in sub._actions if not isinstance(action, argparse._HelpAction)]
    if rows:
        lines += ["| option | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    if sub.epilog:
        lines += ["```text", sub.epilog.rstrip(), "```", ""]
    return lines


def _option_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        value = ""
    elif action.choices is not None and not isinstance(action.choices, range):
        value = " \\| ".join(f"`{choice}`" for choice in action.choices)
    else:
        value = f"`{action.metavar or action.dest.upper()}`"
    default = action.default
    shown = "" if default in (None, False, [], argparse.SUPPRESS) else f"`{default}`"
    help_text = (action.help or "").replace("%%", "%")
    if action.required and action.option_strings:
        help_text = f"required. {help_text}"
    return f"| {names} | {value} | {shown} | {_cell(help_text)} |"


# --- configuration ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key as the reference shows it."""

    dotted: str
    type: str
    default: str
    meaning: str
    environment: str | None


def configuration_keys(cls: type = Config, prefix: str = "") -> Iterator[Key | tuple[str, str]]:
    """Every key of the typed configuration, in declaration order; a named-entry table
    ([subscribers.NAME]) yields (its heading, its meaning) before its entries' keys."""
    hints = typing.get_type_hints(cls)
    meanings = field_docstrings(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        dotted = prefix + f.name
        entries = _entry_type(hint)
        if dataclasses.is_dataclass(hint):
            yield from configuration_keys(hint, dotted + ".")  # type: ignore[arg-type]
        elif entries is not None:
            yield (f"{dotted}.NAME", meanings.get(f.name) or _class_doc(entries))
            yield from configuration_keys(entries, f"{dotted}.NAME.")
        else:
            meaning = meanings.get(f.name, "")
            if not meaning:
                raise ValueError(f"configuration key {dotted} has no docstring to document it")
            in_entry = ".NAME." in dotted
            environment = None if in_entry else ENV_PREFIX + dotted.replace(".", "_").upper()
            yield Key(dotted, _type_name(hint), _default(f), meaning, environment)


def field_docstrings(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (a string right after its annotation)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for statement, following in zip(body, body[1:], strict=False):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            found[statement.target.id] = " ".join(following.value.value.split())
    return found


def _class_doc(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split())


def _entry_type(hint: Any) -> type | None:
    args = typing.get_args(hint)
    if typing.get_origin(hint) is Mapping and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return args[1]  # type: ignore[return-value]
    return None


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return " \\| ".join(f'`"{member.value}"`' for member in hint)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{arg}"`' for arg in args)
    if origin is tuple:
        return "list of strings"
    if origin is Mapping:
        return "table of lists of strings" if args and args[1] is not str else "table of strings"
    if origin is not None and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        return f"{_type_name(inner)} (optional)"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(hint, str(hint))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`[]`" if not value else "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    if isinstance(value, Mapping):
        return "`{}`"
    return f"`{value}`"


def configuration_page() -> str:
    lines = [
        "# Configuration",
        "",
        "Generated from the typed configuration (`publisher/config/`). One TOML file; every key outside",
        "the named tables can be overridden by its environment variable, and then by",
        "`--set section.key=value` on the command line. Unknown keys, wrong types and impossible",
        "combinations are refused at start (exit 2, naming the key); an unknown key is refused naming",
        "the closest known one (\"did you mean `publisher.query_limit`?\"), and a `PUBLISHER_` variable",
        "that nearly spells a key's is warned of, as it sets nothing. `examples/publisher.toml` holds",
        "every key with its default.",
        "",
    ]
    section = None
    for item in configuration_keys():
        if isinstance(item, tuple):
            section, meaning = item
            lines += ["", f"## `[{section}]`", "", _escape(meaning), "", *_table_head()]
            continue
        parent = item.dotted.rpartition(".")[0]
        if parent != section:
            section = parent
            lines += ["", f"## `[{section}]`", "", *_table_head()]
        environment = f"`{item.environment}`" if item.environment else ""
        name = item.dotted.rpartition(".")[2]
        lines.append(f"| `{name}` | {item.type} | {item.default} | {_cell(item.meaning)} | {environment} |")
    return "\n".join(lines) + "\n"


def _table_head() -> list[str]:
    return ["| key | type | default | meaning | environment variable |", "|---|---|---|---|---|"]


def _cell(text: str) -> str:
    return _escape(" ".join(text.split())).replace("|", "\\|")


def _escape(text: str) -> str:
    """Markdown would read <modify> as an HTML tag and drop it."""
    return text.replace("<", "&lt;").replace(">", "&gt;")
