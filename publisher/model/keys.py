"""Parse, format and canonicalise ``table_key`` strings of the event log table.

A table_key names the changed row, e.g. ``pkey1=value1+pkey2=value2``; the
grammar lives in ``grammar/table_key.lark``. Triggers may write the same row's
key in different spellings (``idu= 1``, ``IDU=1``), so keys are canonicalised
against the table's primary key before rows are grouped or looked up.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)

from publisher.model.values import shown

__all__ = [
    "KeyColumnError",
    "KeyKind",
    "KeyPart",
    "NULL_KEY_VALUE",
    "KeySyntaxError",
    "format_key",
    "parse_key",
    "writable_key_column",
]


_GRAMMAR_NAME = "table_key.lark"


_SPECIAL = re.compile(r"[,;'+\"=\\<>]")


_SHOWN_CHARS = 100


def shown_key_text(value: object) -> str:
    """A key or value in a message, cut short so a huge table_key does not flood it."""
    return shown(value, _SHOWN_CHARS)


class KeySyntaxError(ValueError):
    """A table_key that does not follow the grammar, with the offending offset."""

    text: str
    position: int
    reason: str

    def __init__(self, text: object, position: int, reason: str) -> None:
        shown = shown_key_text(text)
        self.text = text if isinstance(text, str) else ""
        self.position = position
        self.reason = reason
        super().__init__(f"table_key {shown} at position {position}: {reason}")

    def __reduce__(self) -> tuple[type[KeySyntaxError], tuple[str, int, str]]:
        """Keep the exception picklable so it survives the trip back from Spark workers."""
        return (type(self), (self.text, self.position, self.reason))


class KeyColumnError(ValueError):
    """A well-formed table_key whose columns or values do not fit the table's primary key."""


@dataclass(frozen=True, slots=True)
class KeyPart:
    """One ``column=value`` pair of a table_key."""

    column: str
    value: str


class KeyKind(enum.Enum):
    """How a key column's values compare, which decides their canonical spelling.

    A trigger writes a key value as the database's text of it, and a row read back gives the
    driver's value; both are spelled canonically by kind so that one row is one object."""

    INTEGER = "integer"
    TEXT = "text"
    FIXED_CHAR = "fixed_char"
    """char(n): trailing spaces do not count (the database pads them and drops them as text)."""
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp"
    TIMESTAMP_TZ = "timestamp_tz"
    """An instant: spelled in UTC, whatever zone the changing session wrote it in."""
    UUID = "uuid"
    NUMERIC = "numeric"
    FLOAT = "float"
    BINARY = "binary"
    """base64 in the table_key, bytes in the table."""


class _ToParts(Transformer[Token, list[tuple[Token, str]]]):
    """Builds the parts while parsing, so no parse tree is kept (keys come by the million)."""

    def start(self, parts: list[tuple[Token, str]]) -> list[tuple[Token, str]]:
        return parts

    def part(self, children: list[Token]) -> tuple[Token, str]:
        name, value = children
        return name, value

    def bare(self, children: list[Token]) -> str:
        return str(children[0])

    def quoted(self, children: list[Token]) -> str:
        return "".join(t[1] if t.type == "ESCAPE" else str(t) for t in children)


def _grammar_path() -> Path:
    """Find the grammar in an installed wheel (``publisher/grammar``) or a source checkout."""
    here = Path(__file__).parent.parent
    candidates = (here / "grammar" / _GRAMMAR_NAME, here.parent / "grammar" / _GRAMMAR_NAME)
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"{_GRAMMAR_NAME} not found in {', '.join(map(str, candidates))}")


@functools.lru_cache(maxsize=None)
def _parser() -> Lark:
    """Build the parser once per process: Lark parsers cannot be pickled into Spark workers."""
    return Lark(
        _grammar_path().read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        transformer=_ToParts(),
    )


NULL_KEY_VALUE = "<NULL>"
"""What a trigger writes for a key column holding NULL (where a primary key may hold NULL:
`Dialect.keys_spelled_by_type`): a value no table_key can hold, so the application's statement succeeds
and the event is refused with the reason, rather than the trigger failing on a NULL table_key."""


def _reason(text: str, position: int, expected: set[str]) -> str:
    """Say why the parser stopped at ``position``, given the terminals it would have taken."""
    at_end = position >= len(text)
    char = "" if at_end else text[position]
    if "_QUOTE" in expected and text.startswith(NULL_KEY_VALUE, position):
        return "the key column is NULL in this row, so no object has its key (it cannot be published)"
    if "ESCAPE" in expected:
        if at_end or position + 1 >= len(text):
            return "unterminated quoted value: missing closing '\"'"
        return (
            f"invalid escape {text[position:position + 2]!r} in quoted value"
            " (only \\\" and \\\\ are allowed)"
        )
    if "_QUOTE" in expected:
        if at_end or char == "+":
            return "expected a value after '='"
        return f"unexpected character {char!r} (write the value in double quotes)"
    if "_EQ" in expected:
        if at_end:
            return "expected '=' after the column name"
        return f"unexpected character {char!r}, expected '=' after the column name"
    if "CHARS" in expected:
        if at_end or char in "=+":
            return "expected a column name"
        return f"unexpected character {char!r}, expected a column name"
    if position > 0 and text[position - 1] == '"':
        return f"unexpected character {char!r} after the closing quote, expected '+' or the end"
    return f"unexpected character {char!r} (write the value in double quotes)"


def _syntax_error(text: str, error: UnexpectedInput) -> KeySyntaxError:
    """Translate a Lark error into a KeySyntaxError, so callers never see Lark types."""
    position: int | None = None
    expected: set[str] = set()
    if isinstance(error, UnexpectedCharacters):
        position, expected = error.pos_in_stream, set(error.allowed or ())
    elif isinstance(error, (UnexpectedToken, UnexpectedEOF)):
        expected = set(error.expected)
        if isinstance(error, UnexpectedToken) and error.token.type != "$END":
            position = error.token.start_pos
    if position is None:
        position = len(text)
    return KeySyntaxError(text, position, _reason(text, position, expected))


_PLAIN_KEY = re.compile(r"[^,;'+\"=\\<>]+=[^,;'+\"=\\<>]+(?:\+[^,;'+\"=\\<>]+=[^,;'+\"=\\<>]+)*")
"""A table_key without quoted values: what the grammar reads as `column=value` parts split at
"+", with no character of special meaning anywhere (canonical keys mostly look like this)."""


@functools.lru_cache(maxsize=1 << 12)
def _parse(text: str) -> tuple[KeyPart, ...]:
    """Core of parse_key; the caches that matter for a backlog are canonical_key's and key_values'.

    A plain key is split directly (a Lark parse costs 20-40 µs, a split about 1 µs); the
    grammar reads it the same way, and anything else, errors included, goes through Lark."""
    if _PLAIN_KEY.fullmatch(text):
        parts = [KeyPart(column.strip(), value) for column, value in (p.split("=") for p in text.split("+"))]
        columns = [part.column for part in parts]
        if all(columns) and len(set(columns)) == len(columns):
            return tuple(parts)
    return _parse_with_grammar(text)


def _parse_with_grammar(text: str) -> tuple[KeyPart, ...]:
    try:
        raw_parts: list[tuple[Token, str]] = _parser().parse(text)  # type: ignore[assignment]
    except UnexpectedInput as error:
        raise _syntax_error(text, error) from None
    except LarkError as error:
        raise KeySyntaxError(text, 0, str(error)) from None
    parts: list[KeyPart] = []
    seen: set[str] = set()
    for token, value in raw_parts:
        column = token.strip()
        position = (token.start_pos or 0) + len(token) - len(token.lstrip())
        if not column:
            raise KeySyntaxError(text, position, "expected a column name")
        if column in seen:
            raise KeySyntaxError(text, position, f"column {column!r} appears twice")
        seen.add(column)
        parts.append(KeyPart(column, value))
    return tuple(parts)


def parse_key(text: str) -> tuple[KeyPart, ...]:
    """Split a table_key into its parts, decoding quoted values."""
    if not isinstance(text, str):
        raise KeySyntaxError(text, 0, f"expected a str, got {type(text).__name__}")
    return _parse(text)


def _format_value(value: str) -> str:
    if value and not _SPECIAL.search(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def writable_key_column(name: str) -> bool:
    """Whether a table_key can name the column: no character of special meaning, no padding."""
    return bool(name) and name == name.strip() and not _SPECIAL.search(name)


def format_key(parts: Iterable[KeyPart]) -> str:
    """Write parts as a canonical table_key, quoting a value only when it needs it.

    Raises ValueError for parts that no table_key can express, so that
    ``parse_key(format_key(parts))`` always gives the parts back.
    """
    written: list[str] = []
    seen: set[str] = set()
    for part in parts:
        column = part.column
        if not writable_key_column(column):
            raise ValueError(f"column name {column!r} cannot be written in a table_key")
        if column in seen:
            raise ValueError(f"column {column!r} appears twice")
        seen.add(column)
        written.append(f"{column}={_format_value(part.value)}")
    if not written:
        raise ValueError("a table_key needs at least one part")
    return "+".join(written)
