"""Where a window that `query_limit` cut ends: past the cut, at a place between transactions
(or between one statement's events for an object, where the event log names no transaction),
found by reading the rows that follow a page at a time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, null, select

from publisher.dialects import dialect_of
from publisher.pipeline.event_log import role_columns

if TYPE_CHECKING:
    from publisher.pipeline.processing_order import ProcessingOrder

LOOK_AROUND = 5_000
"""Rows looked at before a full window's end, and at most after its last taken row, to end the
window between transactions. A transaction that logs nothing while more rows than this are
logged by others, and then logs again, can still be cut there: finding every row of a
transaction would read the whole backlog on every cycle, since the event log has no index on
transaction_id."""


PAGE = 1_000
"""Rows read at a time past a window's end."""


@dataclass
class _Taken:
    """The rows a window takes past its first `query_limit`."""

    lo: int = 0
    hi: int = 0
    count: int = 0

    def add(self, record_id: int) -> None:
        self.lo = record_id if not self.count else min(self.lo, record_id)
        self.hi = record_id if not self.count else max(self.hi, record_id)
        self.count += 1


class WindowEnd:
    """Moves the end of a window that query_limit cut to a place between transactions.

    The rows that follow the window in processing order are read a page at a time. A row of a
    transaction the window holds (among its last LOOK_AROUND rows, or taken since) is taken,
    with every row before it, whose transactions the window then holds too. Where the triggers
    cannot name the transaction, their transaction_id names the statement, kept together the same way.

    Rows without a transaction_id: where the dialect names what one statement's rows share
    (`Dialect.statement_mark`) they follow each other with one such mark, and a row of that run
    is taken, with the rows before it, when the window holds its object (table_name and
    table_key) from the same run, as a cascade or a logical class's child rows interleave
    objects; elsewhere the rows that directly follow the window's last row for the same object.
    The walk stops LOOK_AROUND rows past the last row taken, at once when the window holds no
    transaction and the run has ended, and where the eligible rows end.
    """

    def __init__(self, conn: Connection, order: ProcessingOrder, transaction_column: str | None) -> None:
        self.conn = conn
        self.order = order
        c = role_columns(order.table, order.columns)
        dialect = dialect_of(order.dialect)
        mark = dialect.statement_mark(c["event_time"])
        self.by_statement = mark is not None
        transaction = null() if transaction_column is None else order.table.c[transaction_column]
        statement = [c["table_name"], c["table_key"]] + ([mark] if mark is not None else [])
        self.columns = [order.record_id, *(dialect.exact(column) for column in (transaction, *statement))]

    def _run(self, row: Any) -> Any:
        """What rows of one statement without a transaction_id share: where the dialect names it
        (`Dialect.statement_mark`), that; elsewhere (no statement to tell) the object itself."""
        return row[4] if self.by_statement else tuple(row[2:4])

    def _page(self, after: Any, position: int, limit: int) -> list[Any]:
        """`limit` rows (record_id, transaction, table_name, table_key[, statement mark]) in
        processing order: by record_id after the row `after`, in future mode from `position` on."""
        query = select(*self.columns).where(self.order.eligible)
        if self.order.future:
            query = query.order_by(*self.order.ascending).offset(position)
        else:
            query = query.where(self.order.record_id > after[0]).order_by(self.order.record_id)
        return list(self.conn.execute(query.limit(limit)).all())

    def _behind(self, position: int, hi: int) -> list[Any]:
        """The window's last rows, up to LOOK_AROUND of them, in processing order; by record_id
        an index walk back from `hi`, in future mode the window's own sort."""
        query = select(*self.columns).where(self.order.eligible)
        if not self.order.future:
            newest = query.where(self.order.record_id <= hi).order_by(self.order.record_id.desc())
            return list(reversed(self.conn.execute(newest.limit(LOOK_AROUND)).all()))
        start = max(0, position - LOOK_AROUND)
        query = query.order_by(*self.order.ascending).offset(start).limit(position - start)
        return list(self.conn.execute(query).all())

    def _open_run(self, behind: list[Any]) -> tuple[Any, set[Any]]:
        """The run of rows without a transaction_id the window ends in, and the objects it
        holds of it; (None, empty) when its last row has a transaction_id."""
        if behind[-1][1] is not None:
            return None, set()
        run = self._run(behind[-1])
        objects = set()
        for row in reversed(behind):
            if row[1] is not None or self._run(row) != run:
                break
            objects.add(tuple(row[2:4]))
        return run, objects

    def extend(self, position: int, hi: int) -> tuple[int, _Taken]:
        """The record_id of the window's new last row, and the rows taken past the cut; the
        window's last row is its `position`-th in processing order (record_id `hi` when that
        is the order)."""
        behind = self._behind(position, hi)
        last = behind[-1]
        held = {row[1] for row in behind if row[1] is not None}
        run, objects = self._open_run(behind)
        taken = _Taken()
        waiting: list[Any] = []
        read = position
        while True:
            page = self._page(waiting[-1] if waiting else last, read, PAGE)
            read += len(page)
            for row in page:
                if run is not None and (row[1] is not None or self._run(row) != run):
                    run = None
                joins = row[1] in held if row[1] is not None else run is not None and tuple(row[2:4]) in objects
                if not joins:
                    waiting.append(row)
                    if (not held and run is None) or len(waiting) > LOOK_AROUND:
                        return int(last[0]), taken
                    continue
                for row_taken in (*waiting, row):
                    taken.add(int(row_taken[0]))
                    if row_taken[1] is not None:
                        held.add(row_taken[1])
                    elif run is not None:
                        objects.add(tuple(row_taken[2:4]))
                waiting = []
                last = row
            if len(page) < PAGE:
                return int(last[0]), taken
