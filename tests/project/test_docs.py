"""The documentation site builds without a broken link, and its reference pages hold every command,
option and configuration key: walked here from the parser and the typed configuration themselves,
not from the generator that writes the pages."""
from __future__ import annotations

import argparse
import dataclasses
import html
import importlib.util
import os
import re
import subprocess
import sys
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest

from publisher.cli.parser import build_parser
from publisher.config import Config

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def sections(page: Path) -> dict[str, str]:
    """The page's text under each second-level heading, keyed by the heading's text."""
    text = page.read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for part in re.split(r"(?=<h2 )", text)[1:]:
        heading, _, body = part.partition("</h2>")
        found[html.unescape(re.sub(r"<[^>]+>", "", heading)).replace("¶", "").strip()] = html.unescape(body)
    return found


def test_the_site_builds_in_strict_mode_with_the_generated_reference(site):
    assert (site / "reference" / "cli" / "index.html").is_file()
    assert (site / "reference" / "configuration" / "index.html").is_file()
    assert "mermaid" in (site / "architecture" / "index.html").read_text(encoding="utf-8")


def test_every_command_and_option_of_the_parser_is_in_the_command_reference(site):
    page = sections(site / "reference" / "cli" / "index.html")
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(commands.choices) >= 14
    for name, sub in commands.choices.items():
        body = page.get(f"publisher {name}")
        assert body is not None, f"no section for publisher {name}"
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"<code>{flag}</code>" in body, f"publisher {name} {flag} is not documented"
            if not action.option_strings:
                assert f"<code>{action.metavar or action.dest}</code>" in body


def leaf_keys(cls: type, prefix: str = "") -> list[tuple[str, str]]:
    """(section, key) of every setting, a named table's entries under NAME."""
    keys: list[tuple[str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            keys += leaf_keys(hint, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        elif typing.get_origin(hint) is Mapping and dataclasses.is_dataclass(args[1]):
            keys += leaf_keys(args[1], f"{prefix}{f.name}.NAME.")
        else:
            keys.append((prefix.rstrip("."), f.name))
    return keys


def test_every_configuration_key_is_in_the_configuration_reference_with_its_variable(site):
    page = sections(site / "reference" / "configuration" / "index.html")
    keys = leaf_keys(Config)
    assert ("publisher", "query_limit") in keys and ("subscribers.NAME", "output") in keys
    for section, key in keys:
        body = page.get(f"[{section}]")
        assert body is not None, f"no section [{section}]"
        row = re.search(rf"<tr>\s*<td><code>{key}</code></td>(.*?)</tr>", body, re.DOTALL)
        assert row, f"{section}.{key} is not documented"
        if "NAME" not in section:
            variable = "PUBLISHER_" + f"{section}.{key}".replace(".", "_").upper()
            assert f"<code>{variable}</code>" in row.group(1)


def test_a_configuration_key_without_a_docstring_stops_the_build_naming_it():
    spec = importlib.util.spec_from_file_location("reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec and spec.loader
    hook = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = hook
    spec.loader.exec_module(hook)

    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        documented: int = 1
        """Said."""
        silent: int = 2

    with pytest.raises(ValueError, match="configuration key section.silent has no docstring"):
        list(hook.configuration_keys(Undocumented, "section."))


@pytest.mark.parametrize("unit", ["publisher.service", "publisher-poll.service"])
def test_the_systemd_units_run_commands_the_parser_accepts(unit):
    text = (ROOT / "examples" / "systemd" / unit).read_text(encoding="utf-8")
    (command,) = re.findall(r"^ExecStart=\S+/publisher (.+)$", text, re.MULTILINE)
    args = build_parser().parse_args(command.split())
    assert args.command in ("run", "poll") and args.config == "/etc/publisher/publisher.toml"


def test_the_readme_is_at_most_300_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines"
