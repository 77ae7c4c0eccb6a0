"""The subscribers' state tables, which `install` creates beside the event log, and the
expression that reads an event's transaction (the install indexes it; check-outs select by it).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    DateTime,
    MetaData,
    String,
    Table,
    Text,
    and_,
    case,
    cast,
    func,
    literal_column,
    null,
)

from publisher.dialects import dialect_of, families
from publisher.errors import MissingStateError

SUBSCRIBER_TABLE_SUFFIX = "_subscriber"
CHECKIN_TABLE_SUFFIX = "_checkin"
TRANSACTION_DIGITS = 18
"""A transaction_id of at most this many digits is read as a 64-bit transaction id, where check-outs
go by transaction (`visibility.Visibility`)."""


def subscriber_table(event_log: str, schema: str | None, metadata: MetaData | None = None) -> Table:
    """A row per subscriber: seed 002's RDB$SUBSCRIBERS, with the check-out under way."""
    return Table(
        f"{event_log}{SUBSCRIBER_TABLE_SUFFIX}", metadata or MetaData(),
        Column("subscriber_name", String(255), primary_key=True),
        Column("subscription_name", String(255), nullable=False),
        Column("destination", String(1024), nullable=False),
        Column("check_out_record_id", BigInteger, nullable=False),
        Column("check_out_snapshot", Text),
        Column("check_out_transaction_id", BigInteger),
        Column("check_out_oldest_transaction_id", BigInteger),
        Column("check_out_transactions", Text),
        Column("check_out_timestamp", DateTime(timezone=True)),
        Column("pending_record_id", BigInteger),
        Column("pending_snapshot", Text),
        Column("pending_after", BigInteger),
        Column("check_in_transaction_id", BigInteger),
        Column("check_in_timestamp", DateTime(timezone=True)),
        schema=schema,
    )


def checkin_table(event_log: str, schema: str | None, metadata: MetaData | None = None) -> Table:
    """A row per checked-in transaction: its id, or the record_ids it logged, as the database's
    `visibility.Visibility.check_in` records it."""
    return Table(
        f"{event_log}{CHECKIN_TABLE_SUFFIX}", metadata or MetaData(),
        Column("subscriber_name", String(255), nullable=False, index=True),
        Column("transaction_id", BigInteger),
        Column("first_record_id", BigInteger),
        Column("last_record_id", BigInteger),
        Column("checked_in_at", DateTime(timezone=True), nullable=False),
        schema=schema,
    )


def is_transaction(column: ColumnElement[Any]) -> ColumnElement[bool]:
    """Whether the column holds a transaction id: 1 to 18 digits (a fraction of a regular
    expression's cost per row, which a check-out pays on every event it looks at)."""
    digits: ColumnElement[str] = literal_column("'0123456789'")
    return and_(
        func.length(column).between(literal_column("1"), literal_column(str(TRANSACTION_DIGITS))),
        func.ltrim(column, digits) == literal_column("''"),
    )


def transaction_of(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """The event's transaction as a number, NULL when the column holds no transaction id. The
    install's index is on this very expression, so it must not change without it."""
    return case((is_transaction(column), cast(column, BigInteger)), else_=null())


def require_check_outs(dialect: str) -> None:
    """Subscribers need a database that can tell which events a check-out's snapshot holds: by
    their transactions, or by record_id where one writer commits at a time."""
    found = dialect_of(dialect)
    if not found.serves_subscribers():
        able = " or ".join(family.title for family in families() if family.serves_subscribers())
        raise MissingStateError(
            f"subscribers need {able}: a {found.title} trigger can read no transaction id, and "
            "the server shows no snapshot of the transactions running, so a check-out could not tell an event "
            "committed after it from one it took; publish this event log in status mode (no [subscribers])"
        )
