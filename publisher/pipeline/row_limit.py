"""`publisher.max_row_bytes`: a row whose text is longer is rejected unread. The database
measures each row (without reading its values out), and of a row over the limit only values up
to KEPT_BYTES are read, for its reject line."""
from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    case,
    null,
)

from publisher.config import EVENT_LOG_COLUMNS
from publisher.dialects import dialect_of
from publisher.pipeline.event_log import role_columns
from publisher.pipeline.window import CycleWindow

KEPT_BYTES = 1024
"""Of a row over the limit, the values up to this long are still read, for its reject line."""


_SIZED_ROLES = EVENT_LOG_COLUMNS[4:]


def row_bytes(window: CycleWindow, table: Table, dialect: str) -> ColumnElement[Any]:
    """A row's text (perpetrator to new_value) in bytes, as the database measures it."""
    c = role_columns(table, window.columns)
    octets = dialect_of(dialect).octets
    total: ColumnElement[Any] = octets(c[_SIZED_ROLES[0]])
    for role in _SIZED_ROLES[1:]:
        total = total + octets(c[role])
    return total


def within_limit(
    window: CycleWindow, table: Table, role: str, value: ColumnElement[Any], size: ColumnElement[Any], dialect: str
) -> Any:
    """`value` (the role's column as read), or NULL for a long value of a row over the limit
    (`size`: its `row_bytes`): such a row is rejected, and is never read whole just for that."""
    if role not in _SIZED_ROLES:
        return value
    column = role_columns(table, window.columns)[role]
    # the value's own length first: the row's is then summed only for the rare long value
    long_value = dialect_of(dialect).octets(column) > KEPT_BYTES
    oversized = and_(long_value, size > window.max_row_bytes)
    return case((oversized, null()), else_=value)


def oversized_reason(size: int, limit: int) -> str:
    return (f"row of {size} bytes is over publisher.max_row_bytes ({limit}); "
            f"its values over {KEPT_BYTES} bytes were not read")
