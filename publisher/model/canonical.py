"""One spelling per key value and per table_key, by the key column's kind, so that the same row
written as `idu= 1`, `IDU=1` or read back from the table is one object."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import re
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.keys import (
    KeyColumnError,
    KeyKind,
    KeyPart,
    KeySyntaxError,
    format_key,
    parse_key,
    shown_key_text,
    writable_key_column,
)

_INTEGER = re.compile(r"[+-]?[0-9]+")
_INTEGER_RANGE = range(-(2**63), 2**63)
"""What an integer key column of any supported database can hold."""


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
                f"table_key {shown_key_text(text)}: unknown key column {shown_key_text(part.column)}, "
                f"expected {expected}"
            )
        if i in found:
            raise KeyColumnError(
                f"table_key {shown_key_text(text)}: key column {key_columns[i][0]!r} is given twice"
            )
        found[i] = part.value
    values: list[int | str] = []
    for i, (name, kind) in enumerate(key_columns):
        if i not in found:
            raise KeyColumnError(
                f"table_key {shown_key_text(text)}: key column {name!r} is missing, expected {expected}"
            )
        value = found[i]
        try:
            values.append(canonical_value(kind, value))
        except ValueError as exc:
            raise KeyColumnError(
                f"table_key {shown_key_text(text)}: column {name!r} needs {exc}, got {shown_key_text(value)}"
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
    pattern = canonical_spelling(key_columns)
    return _NOTHING if pattern is None else re.compile(pattern)


def canonical_spelling(key_columns: Sequence[tuple[str, KeyKind]]) -> str | None:
    """A pattern (Python's and RE2's syntax alike) of a table_key that canonical_key would give
    back unchanged: each key column in order, spelled as the catalog spells it, with a value
    `_CANONICAL_VALUE` accepts. Most keys a trigger logs look like this, and need no parse; None
    where a key column is of another kind, or has a name a table_key cannot carry."""
    parts = []
    for name, kind in key_columns:
        value = _CANONICAL_VALUE.get(kind)
        if value is None or not writable_key_column(name):
            return None
        parts.append(re.escape(name) + "=" + value)
    return r"\+".join(parts) if parts else None


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


def keys_values(texts: Sequence[str], key_columns: Sequence[tuple[str, KeyKind]]) -> list[tuple[int | str, ...]]:
    """`key_values` of many keys (a query-back's): of a one-column key, those spelled canonically
    are cut after their `=`, without a parse or a split each."""
    columns = tuple(key_columns)
    if len(columns) != 1:
        return [key_values(text, columns) for text in texts]
    (name, kind), = columns
    spelled = _spelled_canonically(columns).fullmatch
    start = len(name) + 1
    if kind is KeyKind.INTEGER:
        return [(int(text[start:]),) if isinstance(text, str) and spelled(text) else key_values(text, columns)
                for text in texts]
    return [(text[start:],) if isinstance(text, str) and spelled(text) else key_values(text, columns)
            for text in texts]


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


def canonical_key_column(
    values: Sequence[pa.Array], key_columns: Sequence[tuple[str, KeyKind]],
) -> tuple[pa.Array, dict[int, str]]:
    """`canonical_key_of` of each row of columns of key texts (`key_columns` order): a row whose
    every value is spelled canonically (`_CANONICAL_VALUE`, which holds no `+` or `=`, so the
    values match one by one as `_spelled_canonically` matches them joined) is joined as it is,
    the others are made canonical one by one. With the rows whose key cannot be, and why (their
    key null)."""
    columns = tuple(key_columns)
    count = len(values[0])
    good = pa.array(np.ones(count, np.bool_))
    pieces: list[Any] = []
    for index, ((name, kind), texts) in enumerate(zip(columns, values, strict=True)):
        pieces += ["+" if index else "", f"{name}=", texts]
        pattern = _CANONICAL_VALUE.get(kind)
        if pattern is None or not writable_key_column(name):
            good = pa.array(np.zeros(count, np.bool_))
        else:
            good = pc.and_(good, pc.fill_null(pc.match_substring_regex(texts, f"^(?:{pattern})$"), False))
    written = pc.binary_join_element_wise(*pieces, "")
    slow = np.flatnonzero(~np.asarray(good))
    if not len(slow):
        return written, {}
    indices = pa.array(slow)
    made: list[str | None] = []
    failures: dict[int, str] = {}
    rows = zip(*(v.take(indices).to_pylist() for v in values), strict=True)
    for row, texts in zip(slow.tolist(), rows, strict=True):
        try:
            made.append(canonical_key_of(texts, columns))
        except ValueError as exc:
            made.append(None)
            failures[row] = str(exc)
    return pc.replace_with_mask(written, pc.invert(good), pa.array(made, pa.string())), failures


def canonical_value_column(texts: pa.Array, kind: KeyKind) -> pa.Array:
    """`canonical_value` of each text of one key column, as text: what a table_key spells it as.
    A row's key then reads the same whatever the database's text of it (a decimal's scale after
    an ALTER, a timestamp's precision). A NULL, or a text not of the kind, stays as it is, for
    `canonical_key_column` to refuse with its reason."""
    pattern = _CANONICAL_VALUE.get(kind)
    if pattern is None:
        good = pc.is_null(texts)
    else:
        good = pc.fill_null(pc.match_substring_regex(texts, f"^(?:{pattern})$"), True)
    slow = np.flatnonzero(~np.asarray(good))
    if not len(slow):
        return texts
    made: list[str] = []
    for value in texts.take(pa.array(slow)).to_pylist():
        try:
            made.append(str(canonical_value(kind, value)))
        except ValueError:
            made.append(value)
    return pc.replace_with_mask(texts, pc.invert(good), pa.array(made, texts.type))


@functools.lru_cache(maxsize=1 << 14)
def _typed(text: str, key_columns: tuple[tuple[str, KeyKind], ...]) -> tuple[int | str, ...]:
    return tuple(_typed_values(text, key_columns))
