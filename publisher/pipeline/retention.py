"""Retention: which event log rows may go, now that several readers may need them.

A row may be deleted once every configured subscriber has checked it out (or passed over it)
and, where the status mode also publishes the log, that mode has processed it: S or W, the
rows `delete_processed_rows` deletes (E rows stay for inspection, N rows wait). A subscriber
that has not checked out yet holds every row back; one removed from the configuration no
longer holds anything back.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, Engine, Table, and_, delete, false

from publisher.config import Config
from publisher.database import table_schema
from publisher.model.events import Status
from publisher.pipeline.checkout import CheckOutState, checked_out_predicate
from publisher.pipeline.event_log import event_log_table_of, logged_transaction_column

PROCESSED = (Status.SUCCESS.value, Status.WARNING.value)


@dataclass(frozen=True)
class Purged:
    deleted: int
    waiting_for: tuple[str, ...]
    """Subscribers that have not checked out yet, so that nothing could go."""


def retention_table(config: Config, engine: Engine, schema: str | None) -> tuple[Table, str | None]:
    """The event log with its transaction_id column where it has one, and that column's name."""
    transaction = logged_transaction_column(engine, config, schema)
    extra = () if transaction is None else (transaction,)
    columns = (*config.event_log.columns.in_order(), *extra)
    return event_log_table_of(config.event_log.table, columns, schema), transaction


def purgeable(
    conn: Connection, config: Config, table: Table, transaction_name: str | None, schema: str | None
) -> tuple[ColumnElement[bool], tuple[str, ...]]:
    """The rows that may go, and the subscribers that hold every row back. With neither the
    status mode nor a subscriber, no reader vouches for any row: none goes."""
    names = config.event_log.columns
    conditions: list[ColumnElement[bool]] = []
    if config.publisher.status_mode:
        conditions.append(table.c[names.status].in_(PROCESSED))
    waiting: list[str] = []
    for name in sorted(config.subscribers):
        since = CheckOutState(conn.engine, config.event_log.table, schema, name).checked_out(conn)
        if since is None:
            waiting.append(name)
            continue
        transaction = None if transaction_name is None else table.c[transaction_name]
        conditions.append(checked_out_predicate(since, table.c[names.record_id], transaction, conn.dialect.name))
    if waiting or not conditions:
        return false(), tuple(waiting)
    return and_(*conditions), ()


def delete_purgeable(conn: Connection, config: Config, schema: str | None) -> Purged:
    """Delete, within the connection's transaction, the rows that may go."""
    table, transaction = retention_table(config, conn.engine, schema)
    condition, waiting = purgeable(conn, config, table, transaction, schema)
    if waiting:
        return Purged(0, waiting)
    return Purged(int(conn.execute(delete(table).where(condition)).rowcount), ())


def purge(engine: Engine, config: Config) -> Purged:
    """`publisher purge`: delete the rows no reader needs any more, in one transaction."""
    schema = table_schema(config, engine)
    with engine.begin() as conn:
        return delete_purgeable(conn, config, schema)
