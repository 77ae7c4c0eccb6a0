"""The text a column's value travels as, one rule for both ways a value reaches a document.

A trigger logs a value as text; query-back reads the current value. If the two took different
routes to text (the database's cast in the trigger, the driver's Python value in query-back),
one value could publish two spellings, and a later `<remove-value>` would name a value the
consumer never got. So query-back reads each column through the same SQL expression the
triggers log it with, under the same session settings, and both texts then go through
`values.encode_logged`; a binary value the database is slow to spell as base64 or cannot
(`Dialect.read_value_sql`) is read as its bytes and spelled here the way the trigger spells it.
"""
from __future__ import annotations

from publisher.dialects import dialect_of
from publisher.model.values import ValueType, encode_current, encode_logged


def value_text_sql(dialect: str, ref: str, value_type: ValueType, sql_type: str = "") -> str:
    """SQL for the text of the value `ref` (an already quoted column reference), as the
    dialect's triggers log it (`Dialect.value_text_sql`); `sql_type` is the type's name."""
    return dialect_of(dialect).value_text_sql(ref, value_type is ValueType.OCTET, sql_type)


def read_value_sql(dialect: str, ref: str, value_type: ValueType, sql_type: str = "") -> str:
    """SQL a read selects a value column with (`Dialect.read_value_sql`): its text as logged, or
    the value itself where the database's text is slow to make; `encode_read` makes either the
    same published text."""
    return dialect_of(dialect).read_value_sql(ref, value_type is ValueType.OCTET, sql_type)


def encode_read(value_type: ValueType, value: object) -> str | None:
    """Published text of a value read through `read_value_sql`: text as a trigger would have
    logged it, or a binary value's bytes (where `read_value_sql` reads them so)."""
    if value is None or isinstance(value, str):
        return encode_logged(value_type, value)
    return encode_current(value_type, value)
