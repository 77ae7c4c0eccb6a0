"""Retention: which event log rows may go, now that several readers may need them.

A row may be deleted once every configured subscriber has checked it out (or passed over it)
and, where the status mode also publishes the log, that mode has processed it: S or W, the
rows `delete_processed_rows` deletes (E rows stay for inspection, N rows wait). A subscriber
that has not checked out yet holds every row back; one removed from the configuration no
longer holds anything back.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, Engine, and_, delete, false

from publisher.config import Config
from publisher.model.events import Status
from publisher.pipeline.event_log import EventLogSource, event_log_source
from publisher.subscriptions.checkout import CheckOutState, checked_out_predicate

PROCESSED = (Status.SUCCESS.value, Status.WARNING.value)


@dataclass(frozen=True)
class Purged:
    deleted: int
    waiting_for: tuple[str, ...]
    """Subscribers that have not checked out yet, so that nothing could go."""


@dataclass(frozen=True)
class Readers:
    """Who may still need the event log's rows: the status mode (when it publishes the log) and
    the configured subscribers."""

    status_mode: bool
    subscribers: tuple[str, ...]

    @classmethod
    def of(cls, config: Config) -> Readers:
        return cls(config.publisher.status_mode, tuple(sorted(config.subscribers)))


def purgeable(
    conn: Connection, log: EventLogSource, readers: Readers
) -> tuple[ColumnElement[bool], tuple[str, ...]]:
    """The rows that may go, and the subscribers that hold every row back. With neither the
    status mode nor a subscriber, no reader vouches for any row: none goes."""
    table = log.with_transaction
    names = log.columns
    conditions: list[ColumnElement[bool]] = []
    if readers.status_mode:
        conditions.append(table.c[names.status].in_(PROCESSED))
    waiting: list[str] = []
    for name in readers.subscribers:
        since = CheckOutState(conn.engine, log.name, log.schema, name).checked_out(conn)
        if since is None:
            waiting.append(name)
            continue
        transaction = None if log.transaction_column is None else table.c[log.transaction_column]
        conditions.append(checked_out_predicate(since, table.c[names.record_id], transaction, conn.dialect.name))
    if waiting or not conditions:
        return false(), tuple(waiting)
    return and_(*conditions), ()


def delete_purgeable(conn: Connection, log: EventLogSource, readers: Readers) -> Purged:
    """Delete, within the connection's transaction, the rows that may go."""
    condition, waiting = purgeable(conn, log, readers)
    if waiting:
        return Purged(0, waiting)
    return Purged(int(conn.execute(delete(log.with_transaction).where(condition)).rowcount), ())


def purge(engine: Engine, config: Config) -> Purged:
    """`publisher purge`: delete the rows no reader needs any more, in one transaction."""
    log = event_log_source(config, engine)
    with engine.begin() as conn:
        return delete_purgeable(conn, log, Readers.of(config))
