"""One polling cycle, read top to bottom: plan → read and classify → resolve (query back,
precedence and operations per object) → outcomes → write documents → write formats →
acknowledge. Nothing is acknowledged before the output is on disk: the acknowledgement may be
begun earlier (the statuses marked beside the cycle, `acknowledge.MarkingBeside`), but it
commits only then.

Two ways through the same stages (`stages.CyclePath`), chosen by the cycle's size: a cycle of
at most `spark.small_cycle_events` events (`SparkConfig.driver_events`: on a local master, up to
a million) runs in the driver alone (`driver`); a larger one runs as Spark jobs (`distributed`).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from sqlalchemy import Engine

from publisher import failpoints
from publisher.capture.following import follow_shapes
from publisher.config import STATUS_MODE, Config, ConfigError, Reader
from publisher.errors import MissingStateError, StageFailedError, root_cause
from publisher.model.events import Status
from publisher.model.runs import IdRun, StatusRun
from publisher.outputs.cycle_files import next_cycle_number
from publisher.outputs.documents import DocumentWritten
from publisher.outputs.formats import FormatsWritten
from publisher.outputs.outcomes import append_rejects
from publisher.pipeline.acknowledge import ANALYZE_AFTER
from publisher.pipeline.collection import collected_after
from publisher.pipeline.distributed import Distributed
from publisher.pipeline.driver import InDriver
from publisher.pipeline.planning import plan_cycle
from publisher.pipeline.poison import FailureMemory, Isolation, is_row_failure, narrow, rejects_of, window_ids
from publisher.pipeline.spark import is_connect
from publisher.pipeline.stages import (
    Acknowledgement,
    CyclePath,
    CyclePlan,
    Outcomes,
    PendingAcknowledgement,
)
from publisher.pipeline.timing import StepTimer

log = logging.getLogger("publisher")
SparkProvider = SparkSession | Callable[[], SparkSession]
"""A session, or a function that builds one: a run of small cycles never starts Spark."""
CONNECT_PARALLELISM = 2
"""Read partitions on a Spark Connect server that sets no spark.default.parallelism."""


@dataclass
class CycleResult:
    events: int = 0
    operations: int = 0
    documents: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    files: list[str] = field(default_factory=list)
    """The XDS documents written, by name in the output directory."""
    format_files: list[str] = field(default_factory=list)
    """The change-table and message files written, relative to the output directory."""
    bytes_written: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    distributed: bool = False
    """True when the cycle ran as Spark jobs, False when it ran in the driver alone."""
    change_rows: int = 0
    messages: int = 0
    brokered: int = 0
    """Messages the broker stored (metadata messages included)."""
    dangling_references: int = 0
    """Reference values published without association-ref: the object they name does not exist."""
    operation_kinds: dict[str, int] = field(default_factory=dict)
    """Operations by kind (add, modify, delete)."""
    isolation: Isolation | None = None
    """Rows rejected because a stage failed on them twice (counted in `statuses` and `rejected`)."""
    reshaped: tuple[str, ...] = ()
    """Tables whose capture the cycle made anew after a migration: their rows are owed to every
    reader again (`capture.resyncs`; the service's `resync_owed`)."""
    loopback: Mapping[str, int] = field(default_factory=dict)
    """The rows passed over as loopback (marked S, not published), by perpetrator."""

    @property
    def idle(self) -> bool:
        return self.events == 0

    def summary(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "operations": self.operations,
            "documents": self.documents,
            "statuses": self.statuses,
            "rejected": self.rejected,
            "bytes": self.bytes_written,
            "change_rows": self.change_rows,
            "messages": self.messages,
            "brokered": self.brokered,
            "dangling_references": self.dangling_references,
            "path": "spark" if self.distributed else "driver",
            **({} if self.isolation is None else {"isolated": self.isolation.summary()}),
            **({"reshaped": list(self.reshaped)} if self.reshaped else {}),
            **({"loopback": sum(self.loopback.values())} if self.loopback else {}),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


@contextmanager
def failing_as(name: str) -> Iterator[None]:
    """A failure (on the driver or in an executor, of any kind: a row's value may fail any
    library) as StageFailedError, one clear line. A configuration the cycle finds wrong stays
    what it is: retrying cannot fix it."""
    try:
        yield
    except (ConfigError, MissingStateError, StageFailedError):
        raise
    except Exception as exc:
        raise StageFailedError(name, root_cause(exc)) from exc


class _Stopwatch(StepTimer):
    """The cycle's seconds per stage, and per step inside a stage as `stage.step`."""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the stage; a failure in it becomes one clear line (`failing_as`)."""
        started = time.perf_counter()
        try:
            with failing_as(name):
                yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add_steps(self, stage: str, steps: dict[str, float]) -> None:
        """Record the steps inside a stage (summed over executors on Spark)."""
        for step, spent in steps.items():
            self.add(f"{stage}.{step}", spent)


@collected_after
def run_cycle(spark: SparkProvider, engine: Engine, config: Config, reader: Reader = STATUS_MODE) -> CycleResult:
    """Publish what the event log holds now, once, for `reader` (a subscriber: a window of its
    check-out); return what was done."""
    watch = _Stopwatch()
    with watch.stage("plan"):
        reshaped = tuple(found.published_as for found in follow_shapes(config, engine))
        plan = plan_cycle(config, engine, reader)
        if plan is None:
            return CycleResult(seconds=watch.seconds, reshaped=reshaped)
    with watch.stage("write"):
        plan.acknowledgement.keep()
    memory = FailureMemory(plan.output, plan.window)
    isolation, plan, (path, classified, resolved, pending) = _resolved_or_isolated(spark, engine, plan, memory, watch)
    outcomes: Outcomes | None = None
    try:
        with watch.stage("write"):
            memory.forget()
            cycle_number = next_cycle_number(plan.output)
        with watch.stage("outcomes"):
            outcomes = path.outcomes(classified, resolved, cycle_number)
        with watch.stage("acknowledge"):
            pending = _settled(plan.acknowledgement, pending, outcomes.statuses)
        with watch.stage("write"):
            documents = path.write_documents(resolved, cycle_number)
        formats = FormatsWritten()
        if plan.formats is not None:
            with watch.stage("changes"):
                formats = path.write_formats(resolved, cycle_number)
        with watch.stage("rejects"):
            rejected = outcomes.append_rejects()
        failpoints.reached("before_acknowledge")
    except BaseException:
        if pending is not None:
            pending.abandon()
        if outcomes is not None:
            outcomes.discard()
        raise
    try:
        with watch.stage("acknowledge"):
            statuses = pending.finish(published=bool(documents))
    finally:
        outcomes.discard()
    plan.acknowledgement.release()
    if plan.acknowledgement.writes_statuses and sum(statuses.values()) >= ANALYZE_AFTER:
        with watch.stage("analyze"):
            plan.acknowledgement.refresh_statistics()
    for stage, steps in path.steps.items():
        watch.add_steps(stage, steps)
    isolated = 0 if isolation is None else len(isolation.record_ids)
    if isolated:
        statuses = {**statuses, Status.ERROR: statuses.get(Status.ERROR, 0) + isolated}
    return CycleResult(
        events=outcomes.events + isolated,
        operations=sum(d.operations for d in documents),
        documents=len(documents),
        statuses={s.value: n for s, n in statuses.items()},
        rejected=rejected + isolated,
        isolation=isolation,
        files=[d.name for d in documents],
        format_files=formats.files,
        bytes_written=sum(d.bytes for d in documents),
        seconds=watch.seconds,
        distributed=isinstance(path, Distributed),
        change_rows=formats.change_rows,
        messages=formats.messages,
        brokered=formats.brokered,
        dangling_references=sum(d.dangling for d in documents),
        operation_kinds=_kinds(documents),
        reshaped=reshaped,
        loopback=dict(outcomes.loopback),
    )


def _resolved_or_isolated(
    spark: SparkProvider, engine: Engine, plan: CyclePlan, memory: FailureMemory, watch: _Stopwatch
) -> tuple[Isolation | None, CyclePlan, tuple[CyclePath[Any, Any], Any, Any, PendingAcknowledgement | None]]:
    """The window read and resolved (`_read_and_resolve`). A row's failure met the first time is
    remembered and raised, so that the cycle is tried again; met again on the same window, the
    rows it fails on are isolated (`_isolate`) and the rest read and resolved."""
    try:
        return None, plan, _read_and_resolve(spark, plan, watch, early=True)
    except StageFailedError as exc:
        if not is_row_failure(exc):
            raise
        if not memory.repeated(exc):
            with watch.stage("write"):
                memory.remember(exc)
            raise
        isolation, plan = _isolate(spark, engine, plan, exc, watch)
        return isolation, plan, _read_and_resolve(spark, plan, watch, early=True)


def _read_and_resolve(
    spark: SparkProvider, plan: CyclePlan, watch: _Stopwatch, early: bool = False
) -> tuple[CyclePath[Any, Any], Any, Any, PendingAcknowledgement | None]:
    """The stages whose work depends on the rows' values (`poison.ROW_STAGES`); `early`: the
    acknowledgement begun beside resolving where the path and the reader allow (the rows'
    statuses as classified, settled later with the outcomes'), else None."""
    with watch.stage("start"):  # a cold process: waiting for Spark's session
        path = _path(spark, plan)
    with watch.stage("read_and_classify"):
        classified = path.read_and_classify()
    pending = None
    if early:
        with watch.stage("acknowledge"):
            provisional = path.provisional_statuses(classified)
            pending = None if provisional is None else plan.acknowledgement.start_early(provisional)
    try:
        with watch.stage("resolve"):
            resolved = path.resolve(classified)
    except BaseException:
        if pending is not None:
            pending.abandon()
        raise
    return path, classified, resolved, pending


def _settled(
    acknowledgement: Acknowledgement, pending: PendingAcknowledgement | None, statuses: Iterable[StatusRun]
) -> PendingAcknowledgement:
    """The acknowledgement of the outcomes' statuses: the one begun early settled with them, or
    one begun now."""
    if pending is None:
        return acknowledgement.start(statuses)
    pending.settle(statuses)
    return pending


def _isolate(
    spark: SparkProvider, engine: Engine, plan: CyclePlan, exc: StageFailedError, watch: _Stopwatch
) -> tuple[Isolation, CyclePlan]:
    """The rows the window fails on, found by bisecting it, rejected; and the plan for the rest.
    The status mode marks them `E` at once (its kept window then reads the rest, after a crash
    too); a subscriber's window leaves them out, and its check-out passes them when it advances."""

    def fails(record_ids: Sequence[int]) -> bool:
        """Whether the rows fail by themselves; a failure of the environment met on the way
        ends the isolation, with nothing marked, and the cycle is retried."""
        part = dataclasses.replace(plan.window, lo=record_ids[0], hi=record_ids[-1], count=len(record_ids))
        try:
            _read_and_resolve(spark, dataclasses.replace(plan, window=part), _Stopwatch())
        except StageFailedError as failure:
            if not is_row_failure(failure):
                raise
            return True
        return False

    with watch.stage("isolate"):
        read = window_ids(engine, plan.window)
        if not read or not fails(read):
            raise exc  # the rows tried again pass: whatever failed, it was not them
        record_ids = narrow(read, fails)
        isolation = Isolation(tuple(record_ids), exc.stage, exc.reason)
        append_rejects(plan.output, rejects_of(engine, plan.window, isolation))
        if plan.acknowledgement.writes_statuses:
            runs = [(Status.ERROR, IdRun(rid, rid)) for rid in record_ids]
            plan.acknowledgement.acknowledge(runs, published=False)
    done = "marked E" if plan.acknowledgement.writes_statuses else "skipped into the subscriber's rejects"
    them = "it" if len(record_ids) == 1 else "them"
    whole = len(record_ids) == len(read) > 1
    every = " (every row of the window: requeue them once the cause is fixed)" if whole else ""
    log.error("%s%s: stage %s failed on %s twice (%s); %s, publishing goes on", _rows(record_ids), every, exc.stage,
              them, exc.reason, done)
    window = dataclasses.replace(plan.window, excluded=plan.window.excluded + isolation.record_ids,
                                 count=max(0, plan.window.count - len(record_ids)))
    return isolation, dataclasses.replace(plan, window=window)


def _rows(record_ids: Sequence[int]) -> str:
    shown = ", ".join(str(rid) for rid in record_ids[:10])
    more = f" and {len(record_ids) - 10} more" if len(record_ids) > 10 else ""
    return f"{'row' if len(record_ids) == 1 else 'rows'} {shown}{more} isolated"


def _kinds(documents: list[DocumentWritten]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for document in documents:
        for kind, count in document.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + count
    return kinds


def _path(spark: SparkProvider, plan: CyclePlan) -> CyclePath[Any, Any]:
    """The driver alone for a small cycle; Spark jobs, read in partitions of about 1,000 rows
    at least, for a large one."""
    if plan.window.count <= plan.small_cycle_events:
        return InDriver(plan)
    session = spark() if callable(spark) else spark
    partitions = plan.read_partitions or _default_parallelism(session)
    partitions = max(1, min(partitions, plan.window.count // 1000 + 1))
    window = dataclasses.replace(plan.window, partitions=partitions)
    return Distributed(dataclasses.replace(plan, window=window), spark=session)


def _default_parallelism(session: SparkSession) -> int:
    """A Spark Connect client cannot see the server's SparkContext, only its settings."""
    if not is_connect(session):
        return session.sparkContext.defaultParallelism
    return int(session.conf.get("spark.default.parallelism", None) or CONNECT_PARALLELISM)
