"""Subscriptions on the event log (seed 002): each subscriber checks out, at its own pace,
exactly the events committed since its previous check-out, and never writes the status column.

A check-out is bounded by two snapshots of the database: the one its previous check-out took
(`since`) and one taken when it begins (`until`). It publishes the events visible in `until`
and not in `since`, which the database's `Visibility` tells (`visibility.visibility_of`): by
record_id where one writer commits at a time (`Dialect.begin_alone`), so that commit order is
record_id order and a snapshot is the highest record_id; by the transaction that logged each
event where the database shows which transactions a snapshot holds, as PgQ's ticks do (a
transaction left open across a check-out is then delivered by the first check-out after it
commits, whatever its record_ids).

`until` is kept in the subscriber's state row before anything is written, and the check-out
is published in windows of `query_limit` events like the status mode's cycles. After each
window's output is durable, one transaction records how far the check-out has come; after the
last, that `until` becomes the subscriber's `since`. A crash in between publishes that window
again: the same events, so the same operations with the same event-ids.

Events a subscriber checked in (`checkin`) are never delivered to it.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, ColumnElement, Connection, Engine, and_, func, select

from publisher.dialects import dialect_of
from publisher.dialects.reflection import reflection
from publisher.errors import MissingStateError, OutputStateError
from publisher.subscriptions.bounds import CheckOutWindow, Snapshot
from publisher.subscriptions.tables import (
    CHECKIN_TABLE_SUFFIX,
    SUBSCRIBER_TABLE_SUFFIX,
    checkin_table,
    require_check_outs,
    subscriber_table,
)
from publisher.subscriptions.visibility import visibility_of


def check_out_predicate(
    window: CheckOutWindow, record_id: ColumnElement[Any], transaction: ColumnElement[Any] | None,
    schema: str | None, dialect: str,
) -> ColumnElement[bool]:
    """The events of the check-out not yet published (after `window.after`) and not checked in by
    its subscriber (`Visibility.check_out_events`). Events without a transaction id (a site's own
    triggers) are taken by record_id, as where one writer commits at a time."""
    between = visibility_of(dialect).check_out_events(window, record_id, transaction, schema)
    return and_(record_id > window.after, between)


def checked_out_predicate(
    since: Snapshot, record_id: ColumnElement[Any], transaction: ColumnElement[Any] | None, dialect: str,
) -> ColumnElement[bool]:
    """The events a subscriber's finished check-outs have taken (or passed over) up to `since`."""
    return visibility_of(dialect).checked_out_events(since, record_id, transaction)


@dataclass(frozen=True)
class SubscriberState:
    """A subscriber's row: what it checked out last, and the check-out under way, if any."""

    since: Snapshot
    pending: Snapshot | None
    after: int


@contextmanager
def checked_in(engine: Engine, event_log: str, schema: str | None, subscriber: str,
               record_id: Column[Any]) -> Iterator[Connection]:
    """A transaction whose events are checked in by `subscriber`: never delivered to it, and
    delivered to every other subscriber. All or nothing: the record commits with the changes.

    What is recorded is the database's (`Visibility.check_in`): the transaction's id, or the
    record_ids its events took."""
    require_state_tables(engine, event_log, schema)
    checkins = checkin_table(event_log, schema)
    subscribers = subscriber_table(event_log, schema)
    now = dt.datetime.now(dt.UTC)
    visibility = visibility_of(engine)
    with engine.connect() as conn:
        for statement in dialect_of(conn).begin_alone():
            conn.exec_driver_sql(statement)
        with visibility.check_in(conn, checkins, subscriber, record_id, now):
            yield conn
        conn.execute(subscribers.update().where(subscribers.c.subscriber_name == subscriber).values(
            check_in_transaction_id=visibility.transaction(), check_in_timestamp=now,
        ))
        conn.commit()


def require_state_tables(engine: Engine, event_log: str, schema: str | None) -> None:
    """The subscribers' state tables exist, or an error that says how to make them."""
    require_check_outs(engine.dialect.name)
    for name in (f"{event_log}{SUBSCRIBER_TABLE_SUFFIX}", f"{event_log}{CHECKIN_TABLE_SUFFIX}"):
        if not reflection(engine, schema).has_table(name, schema=schema):
            where = f" in schema {schema}" if schema else ""
            raise MissingStateError(
                f"the subscribers' state table {name} does not exist{where}: run `publisher install -c CONFIG` "
                "with the subscriptions configured, which creates it"
            )


def require_increasing_ids(conn: Connection, event_log: str) -> None:
    """A check-out by record_id takes the record_ids above the last one's, so an id must never be
    given twice: where the database may give a deleted row's id again
    (`Dialect.ids_given_again`), that event would never be checked out."""
    found = dialect_of(conn)
    if found.ids_given_again(conn, event_log):
        raise MissingStateError(
            f"the event log {event_log}'s record_id is not AUTOINCREMENT, so {found.title} may give a deleted row's "
            "id to a new event, which no check-out would take; recreate it as `publisher install` does "
            "(INTEGER PRIMARY KEY AUTOINCREMENT) to use subscribers"
        )


class CheckOutState:
    """A subscriber's row in the state table, read and advanced."""

    def __init__(self, engine: Engine, event_log: str, schema: str | None, subscriber: str) -> None:
        require_state_tables(engine, event_log, schema)
        self.engine = engine
        self.visibility = visibility_of(engine)
        self.table = subscriber_table(event_log, schema)
        self.log_table = event_log
        self.schema = schema
        self.subscriber = subscriber

    def begin(self, subscription: str, destination: str, record_id: Column[Any]) -> CheckOutWindow:
        """The check-out under way, or a new one from a snapshot taken now; kept before any output."""
        t = self.table
        with self.engine.begin() as conn:
            require_increasing_ids(conn, self.log_table)
            state = self._read(conn)
            if state is None:
                conn.execute(t.insert().values(
                    subscriber_name=self.subscriber, subscription_name=subscription, destination=destination,
                    check_out_record_id=0,
                ))
                state = SubscriberState(self._nothing_seen(), None, 0)
            if state.pending is None:
                pending = self._snapshot(conn, record_id)
                conn.execute(t.update().where(t.c.subscriber_name == self.subscriber).values(
                    pending_record_id=pending.record_id, pending_snapshot=pending.transactions, pending_after=0,
                ))
                state = SubscriberState(state.since, pending, 0)
        assert state.pending is not None
        with self.engine.connect() as conn:
            checked_in = self.checked_in(conn, state.since, state.pending)
        return CheckOutWindow(self.subscriber, state.since, state.pending, state.after, self.log_table, checked_in)

    def checked_in(self, conn: Connection, since: Snapshot, until: Snapshot) -> tuple[int, ...]:
        """The transactions the subscriber checked in that a check-out from `since` to `until` could
        see, where the database tells them (`Visibility.checked_in`)."""
        return self.visibility.checked_in(conn, checkin_table(self.log_table, self.schema), self.subscriber,
                                          since, until)

    def checked_out(self, conn: Connection) -> Snapshot | None:
        """The snapshot of the subscriber's last finished check-out; None: it has none yet."""
        state = self._read(conn)
        return None if state is None else state.since

    def last_check_out(self, conn: Connection) -> tuple[dt.datetime | None, bool]:
        """When the subscriber last finished a check-out, and whether one is under way."""
        t = self.table
        row = conn.execute(select(t.c.check_out_timestamp, t.c.pending_record_id).where(
            t.c.subscriber_name == self.subscriber)).first()
        return (None, False) if row is None else (row[0], row[1] is not None)

    def under_way(self) -> bool:
        """Whether a check-out is begun and not finished."""
        with self.engine.connect() as conn:
            state = self._read(conn)
        return state is not None and state.pending is not None

    def _read(self, conn: Connection) -> SubscriberState | None:
        t = self.table
        row = conn.execute(select(
            t.c.check_out_record_id, t.c.check_out_snapshot, t.c.pending_record_id, t.c.pending_snapshot,
            t.c.pending_after,
        ).where(t.c.subscriber_name == self.subscriber)).first()
        if row is None:
            return None
        since = Snapshot(int(row[0]), self.visibility.nothing_seen if row[1] is None else row[1])
        pending = None if row[2] is None else Snapshot(int(row[2]), row[3])
        return SubscriberState(since, pending, int(row[4] or 0))

    def since_and_now(self, conn: Connection, record_id: Column[Any]) -> tuple[Snapshot, Snapshot]:
        """The subscriber's last finished check-out (none yet: nothing seen) and a snapshot now."""
        state = self._read(conn)
        since = state.since if state is not None else self._nothing_seen()
        return since, self._snapshot(conn, record_id)

    def _nothing_seen(self) -> Snapshot:
        """The `since` of a subscriber that has not checked out yet."""
        return Snapshot(0, self.visibility.nothing_seen)

    def _snapshot(self, conn: Connection, record_id: Column[Any]) -> Snapshot:
        highest = select(func.coalesce(func.max(record_id), 0)).scalar_subquery()
        transactions, seen = conn.execute(select(self.visibility.snapshot(), highest)).one()
        return Snapshot(int(seen), None if transactions is None else str(transactions))

    def advance(self, conn: Connection, window: CheckOutWindow, hi: int, finished: bool) -> None:
        """Record, in the acknowledging transaction `conn`, that the check-out is published up to
        `hi`, or all of it (`finished`): then its snapshot is the subscriber's `since`."""
        t = self.table
        under_way = and_(
            t.c.subscriber_name == self.subscriber,
            t.c.pending_record_id == window.until.record_id,
            t.c.pending_after == window.after,
        )
        if finished:
            until = window.until
            values: dict[str, Any] = {
                "check_out_record_id": until.record_id, "check_out_snapshot": until.transactions,
                "check_out_timestamp": dt.datetime.now(dt.UTC),
                **self.visibility.check_out_record(until),
                "pending_record_id": None, "pending_snapshot": None, "pending_after": None,
            }
        else:
            values = {"pending_after": hi}
        if conn.execute(t.update().where(under_way).values(**values)).rowcount != 1:
            raise OutputStateError(
                f"subscriber {self.subscriber}: its check-out was advanced by another process meanwhile; "
                "two pollers of one subscriber must not run at once"
            )

