"""A subscriber's cycle: the same stages as the status mode's, over a window of its check-out,
acknowledged by advancing its state row instead of writing statuses (see `checkout`)."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import ColumnElement, Engine, and_, exists, func, not_, select

from publisher.config import Config, ConfigError, SubscriberConfig
from publisher.database import table_schema
from publisher.failpoints import reached
from publisher.model.catalog import Catalog
from publisher.model.events import Status
from publisher.model.runs import StatusRun
from publisher.outputs.cycle_files import CHECK_OUT_FILE, pin_window, pinned_window, unpin_window
from publisher.pipeline.event_log import EventLogSource, event_log_table_of, logged_transaction_column
from publisher.pipeline.retention import PROCESSED
from publisher.pipeline.stages import AcknowledgedAtFinish, PendingAcknowledgement
from publisher.pipeline.window import CycleWindow, WindowLimits, kept_check_out_window, plan_window
from publisher.subscriptions.bounds import CheckOutWindow
from publisher.subscriptions.checkout import CheckOutState, check_out_predicate, checked_out_predicate
from publisher.subscriptions.filter import SubscriptionFilter, UntrackableError, subscription_filter


def subscriber_config(config: Config, name: str) -> Config:
    """The configuration as a subscriber's cycle sees it: its output, and none of the status
    mode's own settings. Loopback is what the subscriber checked in, not the database user;
    commit order, not event time, orders a check-out; rows are never deleted by a check-out."""
    subscriber = config.subscriber(name)
    settings = dataclasses.replace(
        config.publisher, allow_loopback=True, future_events=False, delete_processed_rows=False,
        post_polling_statements=(),
    )
    return dataclasses.replace(config, publisher=settings, output=subscriber.output_config())


def tracked(config: Config, name: str, catalog: Catalog) -> SubscriptionFilter:
    """The subscriber's subscription resolved against this cycle's catalog."""
    subscription_name = config.subscribers[name].subscription
    subscription = config.subscriptions[subscription_name]
    try:
        return subscription_filter(subscription.tables, subscription.columns, subscription.operations, catalog)
    except UntrackableError as exc:
        raise ConfigError(f"subscriptions.{subscription_name}.{exc}") from None


@dataclass
class CheckOutAcknowledgement:
    """Advances a subscriber's check-out once a window's output is durable."""

    engine: Engine
    state: CheckOutState
    window: CycleWindow
    output: Path

    def keep(self) -> None:
        """The check-out under way is kept in the state row already (`CheckOutState.begin`); the
        window's end is kept in the output directory before anything is written there, so that a
        repeat takes the same events whatever `query_limit` it runs with."""
        pin = _check_out_pin(self.window)
        if pinned_window(self.output, CHECK_OUT_FILE) != pin:
            pin_window(self.output, pin, CHECK_OUT_FILE)

    def acknowledge(self, runs: Iterable[StatusRun], published: bool) -> Mapping[Status, int]:
        counted: dict[Status, int] = {}
        for status, run in runs:
            counted[status] = counted.get(status, 0) + run.count
        check_out = self.window.check_out
        assert check_out is not None
        with self.engine.begin() as conn:
            later = _remaining(self.window, self.engine.dialect.name)
            more = conn.execute(select(exists().where(later))).scalar_one()
            self.state.advance(conn, check_out, self.window.hi, finished=not more)
            reached("acknowledge")
        return counted

    def start(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement:
        """A check-out's acknowledgement is one short transaction, made at the finish."""
        return AcknowledgedAtFinish(self, runs)

    def start_early(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        return None

    def release(self) -> None:
        unpin_window(self.output, CHECK_OUT_FILE)

    def refresh_statistics(self) -> None:
        """A check-out writes no status: the event log's statistics stand."""

    @property
    def writes_statuses(self) -> bool:
        return False


def _check_out_pin(window: CycleWindow) -> str:
    """Which check-out (its snapshot and its progress) the window belongs to, and its end."""
    assert window.check_out is not None
    return json.dumps({"until": window.check_out.until.record_id, "after": window.check_out.after, "hi": window.hi})


def _kept(
    log: EventLogSource, engine: Engine, limits: WindowLimits, check_out: CheckOutWindow, output: Path
) -> CycleWindow | None:
    """The window this check-out wrote and did not acknowledge, again; None when there is none
    (a pin of another check-out, or of progress since made, is forgotten)."""
    pin = pinned_window(output, CHECK_OUT_FILE)
    if pin is None:
        return None
    try:
        kept = json.loads(pin)
        same = (int(kept["until"]), int(kept["after"])) == (check_out.until.record_id, check_out.after)
        hi = int(kept["hi"])
    except (ValueError, KeyError, TypeError):
        same = False
    window = kept_check_out_window(log, engine, limits, check_out, hi) if same else None
    if window is None:
        unpin_window(output, CHECK_OUT_FILE)
    return window


def _remaining(window: CycleWindow, dialect: str) -> ColumnElement[bool]:
    """The check-out's events after the window."""
    assert window.check_out is not None
    extra = () if window.transaction_column is None else (window.transaction_column,)
    table = event_log_table_of(window.table, window.columns + extra, window.schema)
    transaction = None if window.transaction_column is None else table.c[window.transaction_column]
    later = dataclasses.replace(window.check_out, after=window.hi)
    return check_out_predicate(later, table.c[window.columns[0]], transaction, window.schema, dialect)


def check_out_window(
    log: EventLogSource, engine: Engine, limits: WindowLimits, name: str, subscriber: SubscriberConfig
) -> tuple[CheckOutState, CycleWindow | None]:
    """The next window of subscriber `name`'s check-out (begun now if none is under way); None,
    with the check-out finished, when it has no more events."""
    state = CheckOutState(engine, log.name, log.schema, name)
    check_out: CheckOutWindow = state.begin(subscriber.subscription, subscriber.output,
                                            log.table.c[log.columns.record_id])
    window = _kept(log, engine, limits, check_out, Path(subscriber.output))
    if window is None:
        window = plan_window(log, engine, limits, check_out)
    if window is None:
        with engine.begin() as conn:
            state.advance(conn, check_out, check_out.after, finished=True)
    return state, window


@dataclass(frozen=True)
class SubscriberBacklog:
    """What `publisher stats` says of a subscriber."""

    waiting: int
    """Events committed since its last finished check-out and not checked in by it: what its next
    check-out publishes (those its subscription tracks) or passes over."""
    oldest_waiting: object
    """The earliest event_time among them, as the database holds it."""
    last_check_out: object
    under_way: bool
    holding_back: int
    """Rows retention keeps for it alone: processed by the status mode (or any row, without it),
    not checked out by it."""


def subscriber_backlog(config: Config, engine: Engine, name: str) -> SubscriberBacklog:
    schema = table_schema(config, engine)
    state = CheckOutState(engine, config.event_log.table, schema, name)
    names = config.event_log.columns
    transaction_name = logged_transaction_column(engine, config, schema)
    extra = () if transaction_name is None else (transaction_name,)
    table = event_log_table_of(config.event_log.table, (*names.in_order(), *extra), schema)
    record_id = table.c[names.record_id]
    transaction = None if transaction_name is None else table.c[transaction_name]
    with engine.connect() as conn:
        since, now = state.since_and_now(conn, record_id)
        window = CheckOutWindow(name, since, now, 0, config.event_log.table, state.checked_in(conn, since, now))
        waiting = check_out_predicate(window, record_id, transaction, schema, engine.dialect.name)
        count, oldest = conn.execute(select(func.count(), func.min(table.c[names.event_time])).where(waiting)).one()
        kept = not_(checked_out_predicate(since, record_id, transaction, engine.dialect.name))
        if config.publisher.status_mode:
            kept = and_(kept, table.c[names.status].in_(PROCESSED))
        holding = conn.execute(select(func.count()).where(kept)).scalar_one()
        last, under_way = state.last_check_out(conn)
    return SubscriberBacklog(int(count), oldest, last, under_way, int(holding))
