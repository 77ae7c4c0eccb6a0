"""A cycle's plan: its window of the event log (the one kept after a crash, else the next),
and everything its stages need from the configuration and the database, resolved once before
any is run; with the status mode's acknowledgement, which keeps the window until it is done."""
from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from publisher.capture.install import published_tables
from publisher.config import Config, Reader
from publisher.database import association_schema, publisher_user
from publisher.dialects import dialect_of, named_class
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


class StatusWriting(abc.ABC):
    """How a large cycle writes its statuses to the event log, as its database allows
    (`Dialect.status_writing`)."""

    @staticmethod
    @abc.abstractmethod
    def start(acknowledgement: StatusAcknowledgement, runs: Iterable[StatusRun]) -> PendingAcknowledgement:
        """`Acknowledgement.start`."""

    @staticmethod
    @abc.abstractmethod
    def start_early(acknowledgement: StatusAcknowledgement,
                    runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        """`Acknowledgement.start_early`."""


class WrittenAtFinish(StatusWriting):
    """Once the output is durable, in a short transaction: where an open UPDATE of the event log's
    rows holds back the application's writers."""

    @staticmethod
    def start(acknowledgement: StatusAcknowledgement, runs: Iterable[StatusRun]) -> PendingAcknowledgement:
        return AcknowledgedAtFinish(acknowledgement, runs)

    @staticmethod
    def start_early(acknowledgement: StatusAcknowledgement,
                    runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        """Nothing: the statuses wait for the outcomes."""
        return None


class WrittenBeside(StatusWriting):
    """Marked, uncommitted, while the output is written (`MarkingBeside`): where an open UPDATE of
    the event log's rows holds back no insert of the application's triggers."""

    @staticmethod
    def start(acknowledgement: StatusAcknowledgement, runs: Iterable[StatusRun]) -> PendingAcknowledgement:
        return MarkingBeside(acknowledgement.engine, acknowledgement.settings, runs)

    @staticmethod
    def start_early(acknowledgement: StatusAcknowledgement,
                    runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        """Beside resolving too, where the rows are marked rather than deleted (a deleted row
        cannot be marked again once resolving finds its status)."""
        if acknowledgement.settings.delete_processed_rows:
            return None
        return MarkingBeside(acknowledgement.engine, acknowledgement.settings, runs)


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
        """The statuses written beside the output where the database allows (`status_writing`)."""
        return self._writing().start(self, runs)

    def start_early(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        return self._writing().start_early(self, runs)

    def _writing(self) -> type[StatusWriting]:
        """A large cycle's as its database says (`Dialect.status_writing`); a small one's at its finish."""
        if self.window is None or self.window.count < MARKED_BESIDE_EVENTS:
            return WrittenAtFinish
        dialect = dialect_of(self.engine)
        found = named_class(dialect.status_writing)
        if not issubclass(found, StatusWriting):
            raise TypeError(f"{dialect.status_writing} (of {dialect.name!r}) is no {__name__}.StatusWriting")
        return found

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
