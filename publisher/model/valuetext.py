"""The text a column's value travels as, one rule for both ways a value reaches a document.

A trigger logs a value as text; query-back reads the current value. If the two took different
routes to text (the database's cast in the trigger, the driver's Python value in query-back),
one value could publish two spellings, and a later `<remove-value>` would name a value the
consumer never got. So query-back reads each column through the same SQL expression the
triggers log it with, under the same session settings, and both texts then go through
`values.encode_logged`.
"""
from __future__ import annotations

from publisher.dialects import is_mysql
from publisher.model.values import ValueType, encode_current, encode_logged

TEXT_SETTINGS: tuple[tuple[str, str], ...] = (
    ("datestyle", "ISO, YMD"),
    ("intervalstyle", "postgres"),
    ("extra_float_digits", "1"),
    ("timezone", "UTC"),
)
"""PostgreSQL settings that change a value's text; the capture functions and query-back's
sessions both run with these, whatever the changing session set."""

MYSQL_TIME_ZONE = "+00:00"
"""The time_zone a MySQL/MariaDB TIMESTAMP is read in; the capture triggers set it around their
work and put the changing session's back, and query-back's sessions run with it."""


def value_text_sql(dialect: str, ref: str, value_type: ValueType, sql_type: str = "") -> str:
    """SQL for the text of the value `ref` (an already quoted column reference).

    PostgreSQL: binary as base64 without line breaks, everything else its `::text`.
    MySQL/MariaDB: binary as base64 without line breaks (TO_BASE64 breaks every 76 characters),
    everything else its cast to utf8mb4 text, whatever the changing session's character set;
    a single-precision FLOAT (`sql_type`, the type's name) by way of DOUBLE, whose text is
    exact: a FLOAT's own has six digits, names 0.100000001490116 '0.1', and finds no row.
    SQLite: `CAST(... AS TEXT)`, which is what storing into the event log's TEXT columns does;
    a binary value stays bytes (SQLite has no base64), and query-back encodes it in Python.
    """
    if dialect == "postgresql":
        if value_type is ValueType.OCTET:
            return f"translate(encode({ref}, 'base64'), E'\\n', '')"
        return f"{ref}::text"
    if is_mysql(dialect):
        if value_type is ValueType.OCTET:
            return f"REPLACE(TO_BASE64({ref}), CHAR(10 USING ascii), '')"
        if sql_type.upper().startswith("FLOAT"):
            ref = f"CAST({ref} AS DOUBLE)"
        return f"CAST({ref} AS CHAR CHARACTER SET utf8mb4)"
    if value_type is ValueType.OCTET:
        return ref
    return f"CAST({ref} AS TEXT)"


def settings_sql(dialect: str, local: bool) -> list[str]:
    """Statements that put a session (or, with `local`, a transaction) on TEXT_SETTINGS; a
    MySQL/MariaDB session on MYSQL_TIME_ZONE (which has no transaction scope)."""
    if is_mysql(dialect):
        return [f"SET time_zone = '{MYSQL_TIME_ZONE}'"]
    if dialect != "postgresql":
        return []
    scope = "SET LOCAL" if local else "SET"
    return [f"{scope} {name} = '{value}'" for name, value in TEXT_SETTINGS]


def function_settings_sql(dialect: str) -> str:
    """The SET clauses of a PostgreSQL capture function's definition."""
    if dialect != "postgresql":
        return ""
    return "\n".join(f"SET {name} = '{value}'" for name, value in TEXT_SETTINGS)


def encode_read(value_type: ValueType, value: object) -> str | None:
    """Published text of a value read through `value_text_sql`: text as a trigger would have
    logged it, or SQLite's raw binary."""
    if value is None or isinstance(value, str):
        return encode_logged(value_type, value)
    return encode_current(value_type, value)
