"""Which events a PostgreSQL snapshot holds: by the transaction that logged each. The triggers log
`txid_current()`, 64 bits (`subscriptions.tables.TRANSACTION_DIGITS`), and a snapshot's text is
`xmin:xmax:active,…`, as txid_current_snapshot() spells it (a window's `planned_in`, a check-out's
`Snapshot`). A check-out takes the events of the transactions visible in its snapshot and not in
the previous one, as PgQ's ticks do: a transaction left open across a check-out is delivered by
the first check-out after it commits, whatever its record_ids. Events without a transaction id
(a site's own triggers) are taken by record_id."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Table,
    Text,
    and_,
    case,
    cast,
    func,
    literal_column,
    not_,
    or_,
    select,
    true,
)

from publisher.subscriptions.bounds import NOTHING_SEEN, CheckOutWindow, Snapshot
from publisher.subscriptions.tables import is_transaction, transaction_of
from publisher.subscriptions.visibility import Visibility


class TransactionSnapshots(Visibility):
    """By transaction, against txid snapshots."""

    nothing_seen = NOTHING_SEEN

    def snapshot(self) -> ColumnElement[Any]:
        return cast(func.txid_current_snapshot(), Text)

    def transaction(self) -> ColumnElement[Any]:
        return func.txid_current()

    def ended_when_planned(self, table: Table, record_id: str, transaction: str, hi: int,
                           planned_in: str | None, look_around: int) -> ColumnElement[bool]:
        """The rows of the transactions the snapshot the window was planned in sees; a transaction
        it does not see is left to a later cycle, even when it commits before the rows are read:
        its record_ids may lie on both sides of `hi`. A window planned with no snapshot (its pin
        kept none) reads its rows as they are."""
        if planned_in is None:
            return true()
        logged = table.c[transaction]
        planned = self.visible_in(cast(logged, BigInteger), Snapshot(0, planned_in))
        return case((is_transaction(logged), planned), else_=true())

    def checked_in(self, conn: Connection, checkins: Table, subscriber: str, since: Snapshot,
                   until: Snapshot) -> tuple[int, ...]:
        """A constant list, which the database hashes (`none_of`): it costs the read less than a
        lookup of the check-in table per event."""
        found = conn.execute(select(checkins.c.transaction_id).where(
            checkins.c.subscriber_name == subscriber,
            checkins.c.transaction_id >= since.oldest, checkins.c.transaction_id < until.next,
        ).order_by(checkins.c.transaction_id))
        return tuple(int(t) for (t,) in found)

    def check_out_events(self, window: CheckOutWindow, record_id: ColumnElement[Any],
                         transaction: ColumnElement[Any] | None, schema: str | None) -> ColumnElement[bool]:
        """An event new to the check-out belongs to a transaction no older than the oldest running
        at `since` (every older one is visible in it), or, without a transaction id, has a
        record_id above `since`'s: the transaction index (`PostgreSQLCapture.subscription_indexes`)
        and the primary key find those rows, whatever order the record_ids were given in (a cached
        sequence, ids set by hand). Each is then tested once, in one CASE."""
        if transaction is None:
            return super().check_out_events(window, record_id, transaction, schema)
        since, until = window.since, window.until
        new = or_(transaction_of(transaction) >= since.oldest, record_id > since.record_id)
        tx = cast(transaction, BigInteger)
        committed_between = and_(self.visible_in(tx, until), not_(self.visible_in(tx, since)))
        if window.checked_in:
            committed_between = and_(committed_between, self.none_of(tx, window.checked_in))
        return and_(new, case((is_transaction(transaction), committed_between),
                              else_=record_id <= until.record_id))

    def checked_out_events(self, since: Snapshot, record_id: ColumnElement[Any],
                           transaction: ColumnElement[Any] | None) -> ColumnElement[bool]:
        by_record = super().checked_out_events(since, record_id, transaction)
        if transaction is None:
            return by_record
        return case((is_transaction(transaction), self.visible_in(cast(transaction, BigInteger), since)),
                    else_=by_record)

    def check_out_record(self, until: Snapshot) -> dict[str, Any]:
        """The transaction it finished in, the oldest running in its snapshot and those running."""
        return {"check_out_transaction_id": self.transaction(), "check_out_oldest_transaction_id": until.oldest,
                "check_out_transactions": ",".join(map(str, until.active))}

    @contextmanager
    def check_in(self, conn: Connection, checkins: Table, subscriber: str, record_id: Column[Any],
                 now: dt.datetime) -> Iterator[None]:
        """Its transaction's id."""
        yield
        conn.execute(checkins.insert().values(subscriber_name=subscriber, transaction_id=self.transaction(),
                                              checked_in_at=now))

    def visible_in(self, transaction: ColumnElement[Any], snapshot: Snapshot) -> ColumnElement[bool]:
        """A transaction id visible in the snapshot: begun before its `next` and not running then
        (no test of the running ones when none was: a window's read pays it on every row)."""
        if not snapshot.active:
            return transaction < snapshot.next
        return and_(transaction < snapshot.next, self.none_of(transaction, snapshot.active))

    def none_of(self, transaction: ColumnElement[Any], ids: Sequence[int]) -> ColumnElement[bool]:
        """Whether a transaction id (a BIGINT) is none of `ids` (those running at a snapshot, those
        a subscriber checked in): `<> ALL` of a constant array, which the database hashes, so a
        window's read pays less on every row than a lookup per event."""
        return transaction != func.all(literal_column(f"'{{{','.join(map(str, ids))}}}'::bigint[]"))
