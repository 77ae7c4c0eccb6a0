"""Which rows a cycle takes: its window of the event log, planned by the driver.

The first `query_limit` `N` rows in processing order (record_id, or in future mode event time
then record_id), moved on to a place between transactions; and after a cycle that wrote its
output but was not acknowledged, exactly that cycle's rows again.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from sqlalchemy import Engine, Table, and_, func, null, select

from publisher.config import PublisherSettings
from publisher.errors import OutputStateError
from publisher.model.events import Status
from publisher.pipeline.event_log import EventLogSource, role_columns
from publisher.pipeline.processing_order import ProcessingOrder
from publisher.pipeline.window_end import LOOK_AROUND, WindowEnd
from publisher.subscriptions.bounds import CheckOutWindow, Snapshot
from publisher.subscriptions.checkout import check_out_predicate
from publisher.subscriptions.visibility import visibility_of


@dataclass(frozen=True)
class WindowLimits:
    """How much a cycle takes, and in which order (`publisher.*` settings)."""

    query_limit: int
    future_events: bool
    max_row_bytes: int

    @classmethod
    def of(cls, settings: PublisherSettings) -> WindowLimits:
        return cls(settings.query_limit, settings.future_events, settings.max_row_bytes)


@dataclass(frozen=True)
class CycleWindow:
    """Which `N` rows a cycle takes: record_ids lo..hi, and in future mode up to a cutoff event."""

    url: str
    table: str
    schema: str | None
    columns: tuple[str, ...]
    lo: int
    hi: int
    count: int
    cutoff_record_id: int | None
    """Future mode: the last row taken in (event_time, record_id) order."""
    transaction_column: str | None = None
    """The event log's optional transaction_id column, when it has one."""
    partitions: int = 1
    """How many record_id ranges Spark reads in parallel; set for the cycle's path."""
    check_out: CheckOutWindow | None = None
    """A subscriber's check-out: its events instead of the `N` rows."""
    max_row_bytes: int = 64 << 20
    """A row whose text is longer is rejected unread (`row_bytes`)."""
    excluded: tuple[int, ...] = ()
    """Rows isolated as poison (`poison`): left out of this window's reading."""
    planned_in: str | None = None
    """The transaction snapshot the window was planned in, where the database shows one
    (`Visibility.snapshot`): the rows of transactions it does not see are left to a later cycle
    (`Visibility.ended_when_planned`)."""

    @property
    def future(self) -> bool:
        """Future-event processing: rows are taken in (event time, record_id) order."""
        return self.cutoff_record_id is not None

    def ending_at(self, hi: int, count: int) -> CycleWindow:
        """The window's rows up to record_id `hi`, `count` of them."""
        return replace(self, hi=hi, count=count)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CycleWindow:
        data = json.loads(text)
        data["columns"] = tuple(data["columns"])
        data["excluded"] = tuple(data.get("excluded", ()))
        if data.get("check_out") is not None:
            data["check_out"] = CheckOutWindow.from_dict(data["check_out"])
        return cls(**data)


def _window_of(
    log: EventLogSource, limits: WindowLimits, lo: int, hi: int, count: int, cutoff_record_id: int | None = None,
    check_out: CheckOutWindow | None = None, planned_in: str | None = None,
) -> CycleWindow:
    return CycleWindow(
        url=log.url, table=log.name, schema=log.schema, columns=log.column_names, lo=lo, hi=hi, count=count,
        cutoff_record_id=cutoff_record_id, transaction_column=log.transaction_column, check_out=check_out,
        max_row_bytes=limits.max_row_bytes, planned_in=planned_in,
    )


def plan_window(
    log: EventLogSource, engine: Engine, limits: WindowLimits, check_out: CheckOutWindow | None = None
) -> CycleWindow | None:
    """The rows of this cycle, or None when there is nothing new.

    The first `query_limit` rows in processing order; and when that cuts into a transaction or
    into one statement's events for an object, the rest of it (see `window_end.WindowEnd`). With
    `check_out`, the subscriber's events instead of the `N` rows, in record_id order.
    """
    columns, transaction_column = log.column_names, log.transaction_column
    table = log.with_transaction
    eligible = None
    if check_out is not None:
        transaction = None if transaction_column is None else table.c[transaction_column]
        eligible = check_out_predicate(check_out, table.c[columns[0]], transaction, log.schema, engine.dialect.name)
    future = limits.future_events and check_out is None
    order = ProcessingOrder(table, columns, engine.dialect.name, future, eligible)
    limit = limits.query_limit
    taken = (
        select(order.record_id.label("rid")).where(order.eligible).order_by(*order.ascending).limit(limit).subquery()
    )
    planned_in = _planned_in(engine, transaction_column, check_out)
    with engine.connect() as conn:
        lo, hi, count, snapshot = conn.execute(
            select(func.min(taken.c.rid), func.max(taken.c.rid), func.count(), planned_in)
        ).one()
        if not count:
            return None
        lo, hi, count = int(lo), int(hi), int(count)
        last = hi
        if count == limit:
            end = WindowEnd(conn, order, transaction_column)
            last, beyond = end.extend(count, hi)
            if beyond.count:
                lo, hi, count = min(lo, beyond.lo), max(hi, beyond.hi), count + beyond.count
        elif order.future:
            last = int(conn.execute(
                select(order.record_id).where(order.eligible).order_by(*order.ascending).offset(count - 1).limit(1)
            ).scalar_one())
    return _window_of(log, limits, lo, hi, count, last if order.future else None, check_out, snapshot)


def _planned_in(engine: Engine, transaction_column: str | None, check_out: CheckOutWindow | None) -> Any:
    """The snapshot the window's first rows are found in, as text, selected beside them, where the
    database shows one (`Visibility.snapshot`) and the events carry their transaction. A check-out
    has snapshots of its own."""
    if check_out is not None or transaction_column is None:
        return null()
    return visibility_of(engine).snapshot()


def kept_check_out_window(
    log: EventLogSource, engine: Engine, limits: WindowLimits, check_out: CheckOutWindow, hi: int
) -> CycleWindow | None:
    """A check-out window whose output was written and not acknowledged, again: its events up to
    `hi`, whatever `query_limit` is now, so the repeat publishes the same operations under the
    same event-ids. None when it holds no event (then it was acknowledged)."""
    window = _window_of(log, limits, check_out.after + 1, hi, 0, check_out=check_out)
    table = log.with_transaction
    predicate = window_predicate(window, table, window.lo, hi, engine.dialect.name)
    with engine.connect() as conn:
        lo, count = conn.execute(select(func.min(table.c[log.column_names[0]]), func.count()).where(predicate)).one()
    return replace(window, lo=int(lo), count=int(count)) if count else None


def window_predicate(window: CycleWindow, table: Table, lo: int, hi: int, dialect: str) -> Any:
    """The rows of the window within record_ids lo..hi; the same rule for reading and nothing else."""
    c = role_columns(table, window.columns)
    if window.check_out is not None:
        transaction = None if window.transaction_column is None else table.c[window.transaction_column]
        eligible = check_out_predicate(window.check_out, c["record_id"], transaction, window.schema, dialect)
    else:
        eligible = c["status"] == Status.NEW.value
    predicate = and_(eligible, c["record_id"] >= lo, c["record_id"] <= hi)
    if window.check_out is None and window.transaction_column is not None:
        predicate = and_(predicate, visibility_of(dialect).ended_when_planned(
            table, window.columns[0], window.transaction_column, window.hi, window.planned_in, LOOK_AROUND))
    if window.excluded:
        predicate = and_(predicate, c["record_id"].not_in(window.excluded))
    if window.cutoff_record_id is not None:
        order = ProcessingOrder(table, window.columns, dialect, future=True)
        predicate = and_(predicate, order.at_or_before(window.cutoff_record_id))
    return predicate


def window_pin(window: CycleWindow) -> str:
    """What identifies the window's rows, to be kept until they are acknowledged (no URL: it may
    carry a password)."""
    return json.dumps(
        {"table": window.table, "schema": window.schema, "lo": window.lo, "hi": window.hi,
         "cutoff_record_id": window.cutoff_record_id, "planned_in": window.planned_in}
    )


def resume_window(
    log: EventLogSource, engine: Engine, limits: WindowLimits, pin: str, where: str
) -> CycleWindow | None:
    """The window a cycle that was not acknowledged took, while any of its rows is still `N`.

    Run again, that cycle reads the same rows and publishes the same operations under the same
    event-ids, which a consumer that applied them drops; rows logged since wait for the next
    cycle, instead of joining an operation under an event-id the consumer has applied. None
    when the acknowledgement did happen (the rows are no longer `N`).
    """
    try:
        pinned = json.loads(pin)
        lo, hi = int(pinned["lo"]), int(pinned["hi"])
        cutoff = None if pinned["cutoff_record_id"] is None else int(pinned["cutoff_record_id"])
        table, pinned_schema = pinned["table"], pinned["schema"]
        planned_in = None if pinned.get("planned_in") is None else Snapshot(0, str(pinned["planned_in"])).transactions
    except (ValueError, KeyError, TypeError, OutputStateError) as exc:
        raise OutputStateError(
            f"{where} does not hold a cycle's window ({exc}); remove it to go on, and the rows of the "
            "cycle it kept may be published again under other event-ids"
        ) from exc
    if (table, pinned_schema) != (log.name, log.schema):
        raise OutputStateError(
            f"{where} keeps the unacknowledged rows {lo}..{hi} of event log {table!r} (schema "
            f"{pinned_schema!r}), not of {log.name!r} as configured: publish that event log to "
            "its end first, or remove the file to give up on those rows' operations"
        )
    window = _window_of(log, limits, lo, hi, 0, cutoff, planned_in=planned_in)
    rows = log.with_transaction
    with engine.connect() as conn:
        count = conn.execute(
            select(func.count()).select_from(rows).where(window_predicate(window, rows, lo, hi, engine.dialect.name))
        ).scalar_one()
    return replace(window, count=int(count)) if count else None
