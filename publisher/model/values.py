"""Column value types and the text each value is published as.

Both paths that produce a ``<value>`` go through here: values the triggers wrote into the
event log (``encode_logged``) and values read back from the table (``encode_current``), so
one column publishes the same text whichever path it took.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from numbers import Integral
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import types as sqltypes

from publisher.dialects import UnknownDialectError, dialect_of


class ValueType(str, enum.Enum):
    """The ``type`` attribute of an XDS ``<value>``."""

    OCTET = "octet"
    INT = "int"
    STATE = "state"
    TIME = "time"
    STRING = "string"
    DN = "dn"
    """A reference to another published object (`association-ref`); never a column's own type."""


COLUMN_VALUE_TYPES = tuple(t for t in ValueType if t is not ValueType.DN)
"""The types a column's values are published as; a reference is published as dn instead."""


def _boolean_of_its_database(sql_type: sqltypes.TypeEngine[Any]) -> bool:
    """A type of one database's own (`sqlalchemy.dialects.<name>`) that holds booleans there
    (`Dialect.boolean_type`: a BOOLEAN made a TINYINT(1), say)."""
    module = type(sql_type).__module__.split(".")
    if module[:2] != ["sqlalchemy", "dialects"] or len(module) < 3:
        return False
    try:
        return dialect_of(module[2]).boolean_type(sql_type)
    except UnknownDialectError:
        return False


class BadValueError(ValueError):
    """A value that cannot be published as its column's type; permanent for its event."""


def value_type_of(sql_type: sqltypes.TypeEngine[Any]) -> ValueType:
    """Map a (possibly reflected, dialect-specific) SQLAlchemy type to its XDS value type."""
    if isinstance(sql_type, sqltypes.TypeDecorator):
        sql_type = sql_type.impl_instance
    if isinstance(sql_type, sqltypes._Binary):
        return ValueType.OCTET
    if isinstance(sql_type, sqltypes.Boolean) or _boolean_of_its_database(sql_type):
        return ValueType.STATE
    if isinstance(sql_type, sqltypes.Integer):
        return ValueType.INT
    if isinstance(sql_type, (sqltypes.DateTime, sqltypes.Date)):
        return ValueType.TIME
    return ValueType.STRING


_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?"
    r" ?(?:Z|([+-])(\d{2})(?::?(\d{2})(?::?(\d{2}))?)?)?)?",
    re.ASCII | re.IGNORECASE,
)
_STATES = {
    "true": "true",
    "t": "true",
    "yes": "true",
    "1": "true",
    "false": "false",
    "f": "false",
    "no": "false",
    "0": "false",
}
_BASE64_WHITESPACE = str.maketrans("", "", " \t\r\n")
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_AWARE = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_ONE_SECOND = dt.timedelta(seconds=1)
_SHOWN_CHARS = 40


def shown(value: object, limit: int = _SHOWN_CHARS) -> str:
    """repr of a value, cut short so a large value does not flood an error message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} chars)"


def xml_problem(text: str) -> str | None:
    """Why XML 1.0 cannot carry ``text`` (lxml would refuse it), or None when it can."""
    bad = _XML_INVALID.search(text)
    if bad is None:
        return None
    return f"contains U+{ord(bad.group()):04X} at offset {bad.start()}, which XML 1.0 cannot carry"


def _xml_safe(text: str) -> str:
    problem = xml_problem(text)
    if problem is not None:
        raise BadValueError(problem)
    return text


def _decimal(digits: str, text: str, what: str) -> int:
    """int() of an ASCII integer; Python refuses more than a few thousand digits."""
    try:
        return int(digits)
    except ValueError:
        raise BadValueError(f"{shown(text)} is not {what} ({len(digits)} digits is too many)") from None


def _logged_octet(text: str) -> str:
    """Validate base64; line breaks are dropped because database encoders wrap long output."""
    compact = text.translate(_BASE64_WHITESPACE)
    try:
        binascii.a2b_base64(compact, strict_mode=True)
    except (binascii.Error, ValueError):
        raise BadValueError(f"{shown(text)} is not valid base64") from None
    return compact


def _logged_int(text: str) -> str:
    stripped = text.strip()
    if _INTEGER.fullmatch(stripped) is None:
        raise BadValueError(f"{shown(text)} is not an integer")
    return str(_decimal(stripped, text, "an integer"))


def _logged_state(text: str) -> str:
    state = _STATES.get(text.strip().lower())
    if state is None:
        raise BadValueError(f"{shown(text)} is not a boolean (true/false/1/0)")
    return state


def _logged_time(text: str) -> str:
    stripped = text.strip()
    if _INTEGER.fullmatch(stripped) is not None:
        return str(_decimal(stripped, text, "a date-time"))
    match = _DATE_TIME.fullmatch(stripped)
    if match is None:
        raise BadValueError(f"{shown(text)} is not a date-time")
    year, month, day, hour, minute, second, sign, off_h, off_m, off_s = match.groups()
    hours, minutes, seconds = int(hour or 0), int(minute or 0), int(second or 0)
    try:
        days = dt.date(int(year), int(month), int(day)).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise BadValueError(f"{shown(text)} is not a date-time") from None
    if hours > 23 or minutes > 59 or seconds > 59:
        raise BadValueError(f"{shown(text)} is not a date-time")
    offset = 0
    if sign is not None:
        off_hours, off_minutes, off_seconds = int(off_h), int(off_m or 0), int(off_s or 0)
        if off_hours > 23 or off_minutes > 59 or off_seconds > 59:
            raise BadValueError(f"{shown(text)} is not a date-time")
        offset = off_hours * 3600 + off_minutes * 60 + off_seconds
    seconds += days * 86400 + hours * 3600 + minutes * 60
    return str(seconds - offset if sign == "+" else seconds + offset)


def _logged_string(text: str) -> str:
    return _xml_safe(text)


_LOGGED: dict[ValueType, Callable[[str], str]] = {
    ValueType.OCTET: _logged_octet,
    ValueType.INT: _logged_int,
    ValueType.STATE: _logged_state,
    ValueType.TIME: _logged_time,
    ValueType.STRING: _logged_string,
}


def encode_logged(value_type: ValueType, text: str | None) -> str | None:
    """Published text of a value as a trigger logged it (binary already base64)."""
    if text is None:
        return None
    return _LOGGED[value_type](text)


_DECIMAL_AS_PUBLISHED = r"\A(?:0|-?[1-9][0-9]{0,17})\z"
_UNCHANGED_LOGGED = {
    ValueType.INT: (_DECIMAL_AS_PUBLISHED, True),
    ValueType.TIME: (_DECIMAL_AS_PUBLISHED, True),
    ValueType.STATE: (r"\A(?:true|false)\z", True),
    ValueType.OCTET: (r"\A(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\z", True),
    ValueType.STRING: (r"[^\t\n\r\x{20}-\x{D7FF}\x{E000}-\x{FFFD}\x{10000}-\x{10FFFF}]", False),
}
"""Per type, a pattern (RE2) and whether a match means `encode_logged` gives the text back
unchanged (else a match means it may not): plain decimals of at most 18 digits, canonical
states, unwrapped padded base64, text XML can carry. A subset: what it does not vouch for is
encoded one value at a time."""


XML_REFUSED_BYTES = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xEF])
"""The bytes that begin, in UTF-8, a character XML 1.0 cannot carry (a string column holds no
lone surrogate): the control characters, and 0xEF, the first byte of U+FFFE and U+FFFF (and
of other characters, which a search then tells apart)."""
_NOT_REFUSED = bytes(sorted(set(range(256)) - set(XML_REFUSED_BYTES)))
_OFFSETS = {pa.string(): np.int32, pa.binary(): np.int32, pa.large_string(): np.int64, pa.large_binary(): np.int64}


def column_bytes(texts: pa.Array, dropped: bytes) -> bytes | None:
    """The bytes of a string or binary column's data but those in `dropped`, from one pass over
    it (None: a column of another type)."""
    width = _OFFSETS.get(texts.type)
    if width is None:
        return None
    if not len(texts) or texts.buffers()[2] is None:
        return b""
    offsets = np.frombuffer(texts.buffers()[1], width)
    start, end = int(offsets[texts.offset]), int(offsets[texts.offset + len(texts)])
    return memoryview(texts.buffers()[2])[start:end].tobytes().translate(None, dropped)


def logged_unchanged(value_types: pa.Array, texts: pa.Array) -> pa.Array:
    """For each logged text (NULL included), whether `encode_logged` of its value type gives
    it back as it is: the many values a batch logs checked as columns, not one by one."""
    unchanged = pc.is_null(texts).to_numpy(zero_copy_only=False).copy()
    for value_type in pc.unique(value_types).to_pylist():
        if value_type is None:
            continue
        rows = np.flatnonzero(pc.fill_null(pc.equal(value_types, value_type), False).to_numpy(zero_copy_only=False))
        # each text is searched by its own type's pattern alone
        accepted = pc.fill_null(_accepted(ValueType(value_type), texts.take(pa.array(rows))), False)
        unchanged[rows] |= accepted.to_numpy(zero_copy_only=False)
    return pa.array(unchanged)


def logged_unchanged_as(value_type: ValueType, texts: pa.Array) -> pa.Array:
    """`logged_unchanged` of texts of one value type (a column's)."""
    return pc.or_(pc.is_null(texts), pc.fill_null(_accepted(value_type, texts), False))


def _accepted(value_type: ValueType, texts: pa.Array) -> pa.Array:
    pattern, vouches = _UNCHANGED_LOGGED[value_type]
    if value_type is ValueType.STRING and column_bytes(texts, _NOT_REFUSED) == b"":
        return pc.is_valid(texts)  # no byte begins a character XML cannot carry: nothing to search
    matched = pc.match_substring_regex(texts, pattern)
    return matched if vouches else pc.invert(matched)


def _current_octet(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, str):
        return base64.b64encode(value.encode("utf-8")).decode("ascii")
    raise BadValueError(f"{shown(value)} is not binary")


def _current_int(value: object) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _logged_int(value)
    if isinstance(value, (Decimal, float)) and math.isfinite(value) and value == int(value):
        return str(int(value))
    if isinstance(value, Integral):
        return str(int(value))
    raise BadValueError(f"{shown(value)} is not an integer")


def _current_state(value: object) -> str:
    if value is True or value == 1:
        return "true"
    if value is False or value == 0:
        return "false"
    if isinstance(value, str):
        return _logged_state(value)
    raise BadValueError(f"{shown(value)} is not a boolean (true/false/1/0)")


def _current_time(value: object) -> str:
    if isinstance(value, dt.datetime):
        epoch = _EPOCH_NAIVE if value.tzinfo is None else _EPOCH_AWARE
        return str((value - epoch) // _ONE_SECOND)
    if isinstance(value, dt.date):
        return str((value.toordinal() - _EPOCH_ORDINAL) * 86400)
    if isinstance(value, str):
        return _logged_time(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (Decimal, float)) and math.isfinite(value):
        return str(math.floor(value))
    raise BadValueError(f"{shown(value)} is not a date-time")


def _current_string(value: object) -> str:
    if isinstance(value, str):
        return _xml_safe(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _current_octet(value)
    if isinstance(value, (dt.date, dt.time)):
        return _xml_safe(value.isoformat())
    if isinstance(value, (dict, list)):
        return _xml_safe(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return _xml_safe(str(value))


_CURRENT: dict[ValueType, Callable[[object], str]] = {
    ValueType.OCTET: _current_octet,
    ValueType.INT: _current_int,
    ValueType.STATE: _current_state,
    ValueType.TIME: _current_time,
    ValueType.STRING: _current_string,
}


def encode_current(value_type: ValueType, value: object) -> str | None:
    """Published text of a value SQLAlchemy read back from the table."""
    if value is None:
        return None
    return _CURRENT[value_type](value)


Typed = int | bool | dt.datetime | bytes | str


def typed_value(value_type: ValueType, text: str | None) -> Typed | None:
    """A published text as a typed value, for the formats that carry types (change tables,
    messages): int, bool, UTC datetime (from epoch seconds), bytes (from base64), or str."""
    return None if text is None else TYPED[value_type](text)


def _epoch_time(text: str) -> dt.datetime:
    return _EPOCH_AWARE + dt.timedelta(seconds=int(text))


TYPED: dict[ValueType, Callable[[str], Typed]] = {
    ValueType.INT: int,
    ValueType.STATE: "true".__eq__,
    ValueType.TIME: _epoch_time,
    ValueType.OCTET: base64.b64decode,
    ValueType.STRING: str,
}
"""`typed_value` of a text (not None) per value type, for a writer that looks it up once per column."""
