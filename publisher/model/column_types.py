"""What the publisher reads of a column's SQL type: how its key values are spelled (`KeyKind`),
its name, its length and precision, and whether query-back can bind its values as an array."""
from __future__ import annotations

from typing import Any

from sqlalchemy import types as sqltypes

from publisher.dialects import dialect_of
from publisher.model.keys import KeyKind


def key_kind_of(sql_type: sqltypes.TypeEngine[Any], dialect: str) -> KeyKind:
    """The key kind of a column type. Where a column stores what it is given, its triggers and its
    rows read back spell a value alike: only integers are spelled by kind there
    (`Dialect.keys_spelled_by_type`)."""
    if isinstance(sql_type, sqltypes.TypeDecorator):
        sql_type = sql_type.impl_instance
    if isinstance(sql_type, sqltypes.Integer):
        return KeyKind.INTEGER
    if not dialect_of(dialect).keys_spelled_by_type():
        return KeyKind.TEXT
    for types, kind in _KEY_KINDS:
        if isinstance(sql_type, types):
            if kind is KeyKind.TIMESTAMP and getattr(sql_type, "timezone", False):
                return KeyKind.TIMESTAMP_TZ
            return kind
    return KeyKind.TEXT


_KEY_KINDS: tuple[tuple[type | tuple[type, ...], KeyKind], ...] = (
    (sqltypes.Boolean, KeyKind.BOOLEAN),
    (sqltypes.DateTime, KeyKind.TIMESTAMP),
    (sqltypes.Date, KeyKind.DATE),
    (sqltypes.Uuid, KeyKind.UUID),
    (sqltypes.Float, KeyKind.FLOAT),
    (sqltypes.Numeric, KeyKind.NUMERIC),
    (sqltypes._Binary, KeyKind.BINARY),
    ((sqltypes.CHAR, sqltypes.NCHAR), KeyKind.FIXED_CHAR),
)
"""First match wins."""


IN_ARRAYS = (sqltypes.Integer, sqltypes.String, sqltypes.Numeric, sqltypes.DateTime, sqltypes.Date, sqltypes.Uuid,
              sqltypes.Boolean)


def type_name(sql_type: object) -> str:
    """The type as SQLAlchemy names it, or its class's name where the dialect cannot render it."""
    try:
        return str(sql_type)
    except Exception:  # noqa: BLE001 - a type some dialect cannot render still gets a name
        return type(sql_type).__name__.upper()


def int_attribute(sql_type: object, name: str) -> int | None:
    value = getattr(sql_type, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def textless_column(dialect: str, table: str, column: str, sql_type: str) -> str | None:
    """Why a column cannot be published, where its values have no text to log or to read back:
    `Dialect.textless_type`; None where they have."""
    kind = dialect_of(dialect).textless_type(sql_type)
    if kind is None:
        return None
    return (f"table {table!r}: column {column!r} is of {kind} type, whose values have no text to publish; "
            "publish it through a view or a generated column")
