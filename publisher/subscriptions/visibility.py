"""Which events a snapshot of the database holds: those a status-mode window reads, and those a
check-out takes between two snapshots. Each database answers with a `Visibility`, the class its
dialect names (`Dialect.visibility`, found by `visibility_of`).

This class is the answer of a database that shows no transactions: a snapshot is the highest
record_id, which holds every event below it where one writer commits at a time
(`Dialect.begin_alone`), and a check-in records the record_ids its events took. A database whose
triggers log the transaction's id, and which shows the transactions a snapshot holds, decides by
transaction instead, in its own folder (PostgreSQL's, as PgQ's ticks do).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Column, ColumnElement, Connection, Table, and_, exists, func, not_, null, or_, select

from publisher.dialects import dialect_of, named_class
from publisher.subscriptions.tables import checkin_table

if TYPE_CHECKING:
    from publisher.subscriptions.bounds import CheckOutWindow, Snapshot


class Visibility:
    """By record_id: no transaction is told from another."""

    nothing_seen: ClassVar[str | None] = None
    """The transactions of the snapshot a subscriber has before its first check-out: none named."""

    def snapshot(self) -> ColumnElement[Any]:
        """The transactions a statement sees, as text, selected beside the highest record_id it
        sees (a check-out's bounds, a window's `planned_in`): NULL, the record_id is all of it."""
        return null()

    def transaction(self) -> ColumnElement[Any]:
        """The id of the transaction a statement runs in, as a subscriber's row records its last
        check-in: NULL, none is told."""
        return null()

    def ended_when_planned(self, table: Table, record_id: str, transaction: str, hi: int,
                           planned_in: str | None, look_around: int) -> ColumnElement[bool]:
        """The rows a status-mode window up to `hi` reads of transactions that may still have been
        running when it was planned (`transaction` names the event log's column): with no snapshot
        to say which, those of each transaction_id none of whose rows lie past `hi`. One that
        commits between the window's planning and its reading can have rows on both sides of `hi`
        (others logged in between); read in part, an insert's first attribute would go out as an
        `<add>` in this cycle and the rest as another in the next, which a consumer refuses. Its
        rows wait for a later cycle. Rows up to `look_around` past the end are looked at (as far
        as the window's end is, `pipeline.window_end`)."""
        later = table.alias("later")
        logged, after = table.c[transaction], later.c[transaction]
        later_id = later.c[record_id]
        beyond = select(after).where(later_id > hi, later_id <= hi + look_around, after.is_not(None))
        return or_(logged.is_(None), logged.not_in(beyond))

    def checked_in(self, conn: Connection, checkins: Table, subscriber: str, since: Snapshot,
                   until: Snapshot) -> tuple[int, ...]:
        """The transactions the subscriber checked in that a check-out from `since` to `until`
        could see, read once per window: none, the check-out looks the record_ids up itself."""
        return ()

    def check_out_events(self, window: CheckOutWindow, record_id: ColumnElement[Any],
                         transaction: ColumnElement[Any] | None, schema: str | None) -> ColumnElement[bool]:
        """The events committed between the check-out's snapshots that its subscriber did not
        check in: by record_id, one writer committing at a time."""
        checkins = checkin_table(window.event_log, schema)
        checked_in = exists().where(checkins.c.subscriber_name == window.subscriber,
                                    record_id.between(checkins.c.first_record_id, checkins.c.last_record_id))
        return and_(record_id > window.since.record_id, record_id <= window.until.record_id, not_(checked_in))

    def checked_out_events(self, since: Snapshot, record_id: ColumnElement[Any],
                           transaction: ColumnElement[Any] | None) -> ColumnElement[bool]:
        """The events visible in `since`: those up to its record_id."""
        return record_id <= since.record_id

    def check_out_record(self, until: Snapshot) -> dict[str, Any]:
        """What a finished check-out records in the subscriber's row beside its snapshot: nothing
        of transactions."""
        return {}

    @contextmanager
    def check_in(self, conn: Connection, checkins: Table, subscriber: str, record_id: Column[Any],
                 now: dt.datetime) -> Iterator[None]:
        """Record on `conn` that the events logged inside are the subscriber's: the record_ids
        they took, since the transaction began alone (`Dialect.begin_alone`) and no other writer
        logs between its first and last event."""
        highest = select(func.coalesce(func.max(record_id), 0))
        first = int(conn.execute(highest).scalar_one())
        yield
        last = int(conn.execute(highest).scalar_one())
        if last > first:
            conn.execute(checkins.insert().values(subscriber_name=subscriber, first_record_id=first + 1,
                                                  last_record_id=last, checked_in_at=now))


def visibility_of(what: Any) -> Visibility:
    """The visibility of a database (a dialect's name, an Engine or a Connection)."""
    return _visibility(dialect_of(what).visibility)


@cache
def _visibility(dotted: str) -> Visibility:
    found = named_class(dotted)
    if not issubclass(found, Visibility):
        raise TypeError(f"{dotted} is no {__name__}.Visibility")
    return found()
