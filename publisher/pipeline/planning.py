"""A cycle's plan: its window of the event log (the one kept after a crash, else the next),
and everything its stages need from the configuration and the database, resolved once before
any is run; with the status mode's acknowledgement, which keeps the window until it is done."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from publisher.capture.install import published_tables
from publisher.config import Config, Reader
from publisher.database import association_schema, publisher_user
from publisher.dialects import dialect_of
from publisher.model.catalog import referenced_tables, reflect_catalog
from publisher.model.events import Status
from publisher.model.runs import StatusRun
from publisher.outputs.cycle_files import WINDOW_FILE, pin_window, pinned_window, unpin_window
from publisher.pipeline.acknowledge import (
    Acknowledging,
    MarkingBeside,
    acknowledge_runs,
    refresh_statistics,
)
from publisher.pipeline.event_log import EventLogSource, event_log_source
from publisher.pipeline.objects import ObjectsContext
from publisher.pipeline.queryback import QueryBackContext
from publisher.pipeline.shapes import described_tables, shape_history, with_retired, within_one_shape
from publisher.pipeline.stages import (
    AcknowledgedAtFinish,
    Acknowledgement,
    CyclePlan,
    PendingAcknowledgement,
)
from publisher.pipeline.subscribers import CheckOutAcknowledgement, check_out_window, subscriber_config, tracked
from publisher.pipeline.window import CycleWindow, WindowLimits, plan_window, resume_window, window_pin
from publisher.rules.classify import ClassifyContext
from publisher.rules.operations import OperationContext
from publisher.subscriptions.filter import tracked_tables


def plan_cycle(config: Config, engine: Engine, reader: Reader) -> CyclePlan | None:
    """The cycle's window and everything it needs from the configuration and the database,
    resolved once; None when there is nothing to do."""
    subscriber = reader.subscriber
    log = event_log_source(config, engine)
    state = None
    if subscriber is None:
        output = Path(config.output.directory).resolve()
        window = _window(log, engine, WindowLimits.of(config.publisher), output, pinned_window(output))
    else:
        config = subscriber_config(config, subscriber)
        output = Path(config.output.directory).resolve()
        limits = WindowLimits.of(config.publisher)
        state, window = check_out_window(log, engine, limits, subscriber, config.subscriber(subscriber))
    if window is None:
        return None
    schema = log.schema
    catalog = with_retired(config, engine, reflect_catalog(engine, schema, published_tables(config, engine),
                                                           config.classes))
    history = shape_history(config, engine, catalog.tables) if config.output.publishes_changes else None
    if history is not None:
        window = within_one_shape(log, engine, window, history)
    acknowledgement: Acknowledgement = (
        StatusAcknowledgement(engine, Acknowledging.of(config, log), output, window) if state is None
        else CheckOutAcknowledgement(engine, state, window, output))
    subscription = None if subscriber is None else tracked(config, subscriber, catalog)
    tables = catalog.tables if subscription is None else tracked_tables(catalog, subscription)
    described = None
    if history is not None:
        logged_for = dataclasses.replace(catalog, tables=described_tables(history, window))
        described = logged_for.tables if subscription is None else tracked_tables(logged_for, subscription)
    operations = OperationContext(
        tables,
        association_schema(config, engine),
        config.publisher.insert_row_operation,
        changes=config.output.publishes_changes,
    )
    return CyclePlan(
        window=window,
        output=output,
        classify=ClassifyContext(catalog, publisher_user(config, engine), config.publisher.allow_loopback,
                                 subscription, reader=reader),
        objects=ObjectsContext(QueryBackContext(config.database.sqlalchemy_url(), schema,
                                                {**referenced_tables(catalog, tables), **tables}), operations),
        future_events=config.publisher.future_events,
        batch_size=config.publisher.batch_size,
        formats=config.output if config.output.publishes_changes else None,
        described=described,
        acknowledgement=acknowledgement,
        small_cycle_events=config.spark.driver_events,
        read_partitions=config.spark.read_partitions,
    )


MARKED_BESIDE_EVENTS = 10_000
"""Events from which a cycle's statuses are marked beside it: a smaller cycle's statements take a
few milliseconds, less than a connection and a thread of their own would add to a small poll."""


@dataclass
class StatusAcknowledgement:
    """The status mode's: every read row's status written to the event log; the window kept in
    the output directory meanwhile."""

    engine: Engine
    settings: Acknowledging
    output: Path
    window: CycleWindow | None
    writes_statuses: bool = True

    def keep(self) -> None:
        """A new window is kept in the output directory before anything else is written there."""
        assert self.window is not None
        pin = window_pin(self.window)
        if pinned_window(self.output) != pin:
            pin_window(self.output, pin)

    def acknowledge(self, runs: Iterable[StatusRun], published: bool) -> Mapping[Status, int]:
        return acknowledge_runs(self.engine, self.settings, runs, run_post_polling=published)

    def start(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement:
        """The statuses written beside the output where the database allows (`MarkingBeside`)."""
        if self._beside():
            return MarkingBeside(self.engine, self.settings, runs)
        return AcknowledgedAtFinish(self, runs)

    def start_early(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        """Beside resolving too, where the rows are marked rather than deleted (a deleted row
        cannot be marked again once resolving finds its status)."""
        if self._beside() and not self.settings.delete_processed_rows:
            return MarkingBeside(self.engine, self.settings, runs)
        return None

    def _beside(self) -> bool:
        large = self.window is not None and self.window.count >= MARKED_BESIDE_EVENTS
        return large and dialect_of(self.engine).marks_beside_writes

    def refresh_statistics(self) -> None:
        refresh_statistics(self.engine, self.settings.log)

    def release(self) -> None:
        unpin_window(self.output)


def _window(
    log: EventLogSource, engine: Engine, limits: WindowLimits, output: Path, kept: str | None
) -> CycleWindow | None:
    """The rows of a cycle that was not acknowledged (`kept`), again; else the next rows, which
    the cycle keeps in the output directory before it writes anything, until they are
    acknowledged."""
    if kept is not None:
        window = resume_window(log, engine, limits, kept, str(output / WINDOW_FILE))
        if window is not None:
            return window
    window = plan_window(log, engine, limits)
    if window is None and kept is not None:
        unpin_window(output)
    return window
