"""Parse, format and canonicalise ``table_key`` strings of the event log table.

A table_key names the changed row, e.g. ``pkey1=value1+pkey2=value2``; the
grammar lives in ``grammar/table_key.lark``. Triggers may write the same row's
key in different spellings (``idu= 1``, ``IDU=1``), so keys are canonicalised
against the table's primary key before rows are grouped or looked up.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import functools
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
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
    "KeySyntaxError",
    "bound_value",
    "canonical_key",
    "canonical_key_of",
    "canonical_value",
    "format_key",
    "key_values",
    "parse_key",
    "writable_key_column",
]

_GRAMMAR_NAME = "table_key.lark"
_SPECIAL = re.compile(r"[,;'+\"=\\<>]")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INTEGER_RANGE = range(-(2**63), 2**63)
"""What an integer key column of any supported database can hold."""
_SHOWN_CHARS = 100


def _shown(value: object) -> str:
    """A key or value in a message, cut short so a huge table_key does not flood it."""
    return shown(value, _SHOWN_CHARS)


class KeySyntaxError(ValueError):
    """A table_key that does not follow the grammar, with the offending offset."""

    text: str
    position: int
    reason: str

    def __init__(self, text: object, position: int, reason: str) -> None:
        shown = _shown(text)
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


def _reason(text: str, position: int, expected: set[str]) -> str:
    """Say why the parser stopped at ``position``, given the terminals it would have taken."""
    at_end = position >= len(text)
    char = "" if at_end else text[position]
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


def _integer(value: str) -> int:
    digits = value.strip()
    number: int | None = None
    try:
        if _INTEGER.fullmatch(digits):
            number = int(digits)
    except ValueError:
        pass
    if number is None:
        raise ValueError("an integer")
    if number not in _INTEGER_RANGE:
        raise ValueError("a 64-bit integer")
    return number


_BOOLEANS = {"true": "true", "t": "true", "yes": "true", "y": "true", "on": "true", "1": "true",
             "false": "false", "f": "false", "no": "false", "n": "false", "off": "false", "0": "false"}


def _boolean(value: str) -> str:
    try:
        return _BOOLEANS[value.strip().lower()]
    except KeyError:
        raise ValueError("a boolean (true/false)") from None


def _date(value: str) -> str:
    try:
        return dt.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise ValueError("a date (YYYY-MM-DD)") from None


def _time_text(moment: dt.datetime) -> str:
    """The database's own ISO spelling: seconds, then a fraction only when there is one."""
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if moment.year < 1000:
        text = f"{moment.year:04d}" + text[text.index("-"):]
    if moment.microsecond:
        text += "." + f"{moment.microsecond:06d}".rstrip("0")
    return text


def _timestamp(value: str) -> str:
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError("a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff])") from None
    if moment.tzinfo is not None:
        raise ValueError("a timestamp without time zone")
    return _time_text(moment)


def _timestamp_tz(value: str) -> str:
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError("a timestamp with time zone (YYYY-MM-DD HH:MM:SS[.ffffff]+HH[:MM])") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    try:
        return _time_text(moment.astimezone(dt.UTC)) + "+00"
    except OverflowError:
        raise ValueError("a timestamp with time zone within years 1..9999") from None


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise ValueError("a uuid") from None


def _numeric(value: str) -> str:
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        raise ValueError("a number") from None
    if not number.is_finite():
        return "NaN" if number.is_nan() else ("-Infinity" if number < 0 else "Infinity")
    if number == 0:
        return "0"
    text = format(number, "f")  # every digit: normalize() would round to the context's 28
    return text.rstrip("0").rstrip(".") if "." in text else text


def _float(value: str) -> str:
    try:
        number = float(value.strip())
    except ValueError:
        raise ValueError("a floating-point number") from None
    return repr(number + 0.0)  # -0.0 + 0.0 is 0.0: the database compares the two equal


def _binary(value: str) -> str:
    compact = "".join(value.split())
    try:
        binascii.a2b_base64(compact, strict_mode=True)
    except (binascii.Error, ValueError):
        raise ValueError("binary as base64") from None
    return compact


_CANONICAL: dict[KeyKind, Callable[[str], int | str]] = {
    KeyKind.INTEGER: _integer,
    KeyKind.TEXT: str,
    KeyKind.FIXED_CHAR: lambda value: value.rstrip(" "),
    KeyKind.BOOLEAN: _boolean,
    KeyKind.DATE: _date,
    KeyKind.TIMESTAMP: _timestamp,
    KeyKind.TIMESTAMP_TZ: _timestamp_tz,
    KeyKind.UUID: _uuid,
    KeyKind.NUMERIC: _numeric,
    KeyKind.FLOAT: _float,
    KeyKind.BINARY: _binary,
}


def canonical_value(kind: KeyKind, value: str) -> int | str:
    """One key value spelled canonically for its column's kind (an int for INTEGER).

    Raises ValueError naming what the kind needs when the value is not of the kind."""
    return _CANONICAL[kind](value)


def bound_value(kind: KeyKind, value: int | str) -> int | str | bytes:
    """A canonical key value as the database compares it: binary keys as bytes."""
    if kind is KeyKind.BINARY and isinstance(value, str):
        return base64.b64decode(value)
    return value


def _typed_values(text: str, key_columns: Sequence[tuple[str, KeyKind]]) -> list[int | str]:
    """Match the parts to ``key_columns`` and convert each value by its column's kind."""
    parts = parse_key(text)
    expected = ", ".join(repr(name) for name, _ in key_columns)
    index = {name.casefold(): i for i, (name, _) in enumerate(key_columns)}
    found: dict[int, str] = {}
    for part in parts:
        i = index.get(part.column.casefold())
        if i is None:
            raise KeyColumnError(
                f"table_key {_shown(text)}: unknown key column {_shown(part.column)}, expected {expected}"
            )
        if i in found:
            raise KeyColumnError(
                f"table_key {_shown(text)}: key column {key_columns[i][0]!r} is given twice"
            )
        found[i] = part.value
    values: list[int | str] = []
    for i, (name, kind) in enumerate(key_columns):
        if i not in found:
            raise KeyColumnError(
                f"table_key {_shown(text)}: key column {name!r} is missing, expected {expected}"
            )
        value = found[i]
        try:
            values.append(canonical_value(kind, value))
        except ValueError as exc:
            raise KeyColumnError(
                f"table_key {_shown(text)}: column {name!r} needs {exc}, got {_shown(value)}"
            ) from None
    return values


CANONICAL_CACHE = 1 << 17


def canonical_key(text: str, key_columns: Sequence[tuple[str, KeyKind]]) -> str:
    """Spell a table_key one way per row, so differently written keys of a row compare equal.

    Columns take the spelling and order of ``key_columns``; each value is spelled as
    `canonical_value` spells it for its column's kind (TEXT values are kept as they are).
    """
    if not isinstance(text, str):
        raise KeySyntaxError(text, 0, f"expected a str, got {type(text).__name__}")
    columns = tuple(key_columns)
    if _spelled_canonically(columns).fullmatch(text):
        return text
    return _canonical(text, columns)


_CANONICAL_VALUE = {KeyKind.INTEGER: "(?:0|-?[1-9][0-9]{0,17})", KeyKind.TEXT: "[A-Za-z0-9_.@-]+"}
"""Values of a kind that are spelled canonically (a subset: 18 digits at most always fit in
64 bits, and such text needs no quoting and holds no space)."""


@functools.lru_cache(maxsize=256)
def _spelled_canonically(key_columns: tuple[tuple[str, KeyKind], ...]) -> re.Pattern[str]:
    """What matches a table_key that canonical_key would give back unchanged: each key column in
    order, spelled as the catalog spells it, with a value `_CANONICAL_VALUE` accepts. Most keys
    a trigger logs look like this, and need no parse; a key column of another kind, or one whose
    name a table_key cannot carry, matches nothing."""
    parts = []
    for name, kind in key_columns:
        value = _CANONICAL_VALUE.get(kind)
        if value is None or not writable_key_column(name):
            return _NOTHING
        parts.append(re.escape(name) + "=" + value)
    return re.compile(r"\+".join(parts)) if parts else _NOTHING


_NOTHING = re.compile(r"(?!)")


@functools.lru_cache(maxsize=CANONICAL_CACHE)
def _canonical(text: str, key_columns: tuple[tuple[str, KeyKind], ...]) -> str:
    """Cached core of canonical_key: a backlog names the same rows many times, and a Lark
    parse costs 20-40 µs. The cache's size, not the backlog's, bounds its memory (~50 MB)."""
    values = _typed(text, key_columns)
    return format_key(
        KeyPart(name, str(value)) for (name, _), value in zip(key_columns, values, strict=True)
    )


def key_values(text: str, key_columns: Sequence[tuple[str, KeyKind]]) -> tuple[int | str, ...]:
    """Return the key's canonical values in ``key_columns`` order (ints for INTEGER columns)."""
    if not isinstance(text, str):
        raise KeySyntaxError(text, 0, f"expected a str, got {type(text).__name__}")
    columns = tuple(key_columns)
    if _spelled_canonically(columns).fullmatch(text):
        return tuple(int(value) if kind is KeyKind.INTEGER else value
                     for (_, kind), (_, value) in zip(columns, (p.split("=", 1) for p in text.split("+")), strict=True))
    return _typed(text, columns)


def canonical_key_of(values: Sequence[str], key_columns: Sequence[tuple[str, KeyKind]]) -> str:
    """The canonical key of a row from its key columns' values as text (in `key_columns` order),
    as `canonical_key` spells the key its trigger logs. Raises ValueError as `canonical_value`
    and `format_key` do."""
    columns = tuple(key_columns)
    written = "+".join(f"{name}={value}" for (name, _), value in zip(columns, values, strict=True))
    if _spelled_canonically(columns).fullmatch(written):
        return written
    return format_key(
        KeyPart(name, str(canonical_value(kind, value))) for (name, kind), value in zip(columns, values, strict=True)
    )


@functools.lru_cache(maxsize=1 << 14)
def _typed(text: str, key_columns: tuple[tuple[str, KeyKind], ...]) -> tuple[int | str, ...]:
    return tuple(_typed_values(text, key_columns))
