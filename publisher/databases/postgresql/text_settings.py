"""The session settings a PostgreSQL capture function needs for a table, and what puts them on.

A value's text depends on some settings (DateStyle for a timestamp, TimeZone for a timestamptz,
extra_float_digits for a float, ...): the triggers must log the text query-back reads, which
runs under `TEXT_SETTINGS`, whatever the changing session uses. A function's own SET clauses
would do it, but PostgreSQL then saves and restores the settings on every call, which costs a
row trigger about a tenth of its time. So the functions check instead, per call, whether the
session's settings already give the table's values the same text (the usual case: DateStyle
`ISO, MDY` writes what `ISO, YMD` does), and only where not set `TEXT_SETTINGS` for the rest of
the call, as SET LOCAL, and put the session's values back before returning. A statement that
fails undoes them as it undoes its transaction's or savepoint's other changes. A table whose
columns' texts depend on no setting (integers, text, booleans, binary, numeric) checks nothing.
"""
from __future__ import annotations

from sqlalchemy import types as sqltypes

from publisher.capture.base import literal
from publisher.capture.tables import Column, Table
from publisher.databases.postgresql.dialect import TEXT_SETTINGS

SAME_TEXT = {
    "datestyle": "current_setting('datestyle') LIKE 'ISO,%'",
    "timezone": "current_setting('timezone') IN ('UTC', 'Etc/UTC')",
}
"""Where a setting other than TEXT_SETTINGS' own gives the same texts: the ISO style writes dates
the same whatever the field order, and a zone of offset 0 by another name writes `+00`."""
SETTINGS_VARIABLE = "_publisher_settings"
"""The function's variable that keeps the session's values while TEXT_SETTINGS are on."""


def text_settings(table: Table) -> tuple[tuple[str, str], ...]:
    """The TEXT_SETTINGS that the text of some column of the table depends on."""
    needed = set().union(*(_depends_on(c) for c in (*table.key, *table.values)))
    return tuple((name, value) for name, value in TEXT_SETTINGS if name in needed)


def _depends_on(column: Column) -> set[str]:
    """The settings a column's text depends on: all of them for a type not known here."""
    sql_type = column.sql_type
    if isinstance(sql_type, sqltypes.TypeDecorator):
        sql_type = sql_type.impl_instance
    if isinstance(sql_type, sqltypes.Float):
        return {"extra_float_digits"}
    if isinstance(sql_type, (sqltypes.DateTime, sqltypes.Time)):
        return {"datestyle", "timezone"} if sql_type.timezone else {"datestyle"}
    if isinstance(sql_type, sqltypes.Date):
        return {"datestyle"}
    plain = (sqltypes.Integer, sqltypes.String, sqltypes.Boolean, sqltypes._Binary, sqltypes.Numeric, sqltypes.Uuid)
    if isinstance(sql_type, plain):
        return set()
    return {name for name, _ in TEXT_SETTINGS}


def same_text_sql(settings: tuple[tuple[str, str], ...]) -> str:
    """Whether the session's settings already give the values the texts TEXT_SETTINGS would."""
    return " AND ".join(SAME_TEXT.get(name, f"current_setting({literal(name)}) = {literal(value)}")
                        for name, value in settings)


def current_sql(settings: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"current_setting({literal(name)})" for name, _ in settings)


def set_sql(settings: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"set_config({literal(name)}, {literal(value)}, true)" for name, value in settings)


def restore_sql(settings: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"set_config({literal(name)}, {SETTINGS_VARIABLE}[{place}], true)"
                     for place, (name, _) in enumerate(settings, 1))
