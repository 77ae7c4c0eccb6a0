"""One polling cycle, read top to bottom: read → classify → query back, precedence and
operations per object → write → acknowledge. Nothing is acknowledged before the output is on disk.

Two ways through the same stages, chosen by the cycle's size: a large cycle runs as Spark jobs
(partitioned read, shuffle by object, documents written by the executors); a cycle of at most
`spark.small_cycle_events` events runs in the driver alone, where a Spark job's fixed cost
would dominate. Both call the same rule functions, so both publish the same operations.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from publisher.capture.install import published_tables
from publisher.config import Config
from publisher.database import association_schema, publisher_user, table_schema
from publisher.errors import OutputStateError, StageFailedError, root_cause
from publisher.model.catalog import reflect_catalog
from publisher.model.events import EVENT_LOG_COLUMNS, Status
from publisher.outputs.files import (
    WINDOW_FILE,
    DocumentWritten,
    append_rejects,
    next_cycle_number,
    pin_window,
    pinned_window,
    unpin_window,
    write_documents,
    write_documents_distributed,
    write_outcomes_distributed,
)
from publisher.outputs.formats import CycleFormats, FormatsWritten, PartWritten, reserve_change_numbers, write_part
from publisher.pipeline import failpoints
from publisher.pipeline.acknowledge import (
    ANALYZE_AFTER,
    StatusRun,
    acknowledge_runs,
    id_runs,
    refresh_statistics,
    status_runs,
)
from publisher.pipeline.objects import ObjectsContext, StatusNote, publish_objects, publishable_fields
from publisher.pipeline.queryback import QueryBackContext
from publisher.pipeline.read import ARROW_BATCH_ROWS, read_events, read_rows
from publisher.pipeline.spark import is_connect
from publisher.pipeline.window import CycleWindow, plan_window, resume_window, window_pin
from publisher.rules.changes import NO_TIME, Change, stamp, time_prefix, transaction_places
from publisher.rules.classify import (
    CLASSIFIED_FIELD_NAMES,
    CLASSIFIED_SCHEMA,
    ClassifyContext,
    Disposition,
    RowClassifier,
)
from publisher.rules.operations import OperationContext, PublishedOperation

SparkProvider = SparkSession | Callable[[], SparkSession]
"""A session, or a function that builds one: a run of small cycles never starts Spark."""
REJECT_FIELDS = tuple(EVENT_LOG_COLUMNS[i] for i in (0, 2, 3, 4, 5, 6, 7, 8, 9))
"""The event log values a rejected row is recorded with (all but the status)."""
NOTE_SCHEMA = (
    "record_id long, status string, reason string, op_time timestamp, event_id long, xml binary, "
    "change binary, transaction_id string, change_time timestamp, records int"
)
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
            "path": "spark" if self.distributed else "driver",
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


class _Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the stage; a failure in it (on the driver or in an executor) becomes one clear line."""
        started = time.perf_counter()
        try:
            yield
        except (PySparkException, Py4JError, SQLAlchemyError, OSError, OutputStateError) as exc:
            raise StageFailedError(name, root_cause(exc)) from exc
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def add_steps(self, stage: str, steps: dict[str, float]) -> None:
        """Record the steps inside a stage as `stage.step` (summed over executors on Spark)."""
        for step, spent in steps.items():
            key = f"{stage}.{step}"
            self.seconds[key] = self.seconds.get(key, 0.0) + spent


@dataclass(frozen=True)
class _Contexts:
    classify: ClassifyContext
    objects: ObjectsContext


@dataclass
class _Outcome:
    """What a path hands back for writing and acknowledging."""

    events: int
    statuses: Iterable[StatusRun]
    """Every read row's status, as runs in record_id order; gone through twice."""
    append_rejects: Callable[[], int]
    """Appends the rejected rows to rejects.jsonl and says how many."""
    documents: list[DocumentWritten]
    formats: FormatsWritten = field(default_factory=FormatsWritten)
    discard: Callable[[], None] = lambda: None
    """Removes what the path staged for acknowledging, once it is done or failed."""


def run_cycle(spark: SparkProvider, engine: Engine, config: Config) -> CycleResult:
    """Publish what the event log holds now, once; return what was done."""
    watch = _Stopwatch()
    output = Path(config.output.directory).resolve()
    with watch.stage("plan"):
        kept = pinned_window(output)
        window = _window(config, engine, output, kept)
        if window is None:
            return CycleResult(seconds=watch.seconds)
        contexts = _contexts(engine, config)
    if window_pin(window) != kept:
        with watch.stage("write"):
            pin_window(output, window_pin(window))
    distributed = window.count > config.spark.small_cycle_events
    if distributed:
        session = spark() if callable(spark) else spark
        partitions = config.spark.read_partitions or _default_parallelism(session)
        window = dataclasses.replace(window, partitions=max(1, min(partitions, window.count // 1000 + 1)))
        outcome = _distributed(session, window, contexts, config, output, watch)
    else:
        outcome = _in_driver(window, contexts, config, output, watch)
    try:
        with watch.stage("rejects"):
            rejected = outcome.append_rejects()
        failpoints.reached("before_acknowledge")
        with watch.stage("acknowledge"):
            statuses = acknowledge_runs(engine, config, outcome.statuses, run_post_polling=bool(outcome.documents))
    finally:
        outcome.discard()
    unpin_window(output)
    if sum(statuses.values()) >= ANALYZE_AFTER:
        with watch.stage("analyze"):
            refresh_statistics(engine, config)
    return CycleResult(
        events=outcome.events,
        operations=sum(d.operations for d in outcome.documents),
        documents=len(outcome.documents),
        statuses={s.value: n for s, n in statuses.items()},
        rejected=rejected,
        files=[d.name for d in outcome.documents],
        format_files=outcome.formats.files,
        bytes_written=sum(d.bytes for d in outcome.documents),
        seconds=watch.seconds,
        distributed=distributed,
        change_rows=outcome.formats.change_rows,
        messages=outcome.formats.messages,
        brokered=outcome.formats.brokered,
    )


def _window(config: Config, engine: Engine, output: Path, kept: str | None) -> CycleWindow | None:
    """The rows of a cycle that was not acknowledged (`kept`), again; else the next rows, which
    the cycle keeps in the output directory before it writes anything, until they are
    acknowledged."""
    if kept is not None:
        window = resume_window(config, engine, kept, str(output / WINDOW_FILE))
        if window is not None:
            return window
    window = plan_window(config, engine)
    if window is None and kept is not None:
        unpin_window(output)
    return window


def _default_parallelism(session: SparkSession) -> int:
    """A Spark Connect client cannot see the server's SparkContext, only its settings."""
    if not is_connect(session):
        return session.sparkContext.defaultParallelism
    return int(session.conf.get("spark.default.parallelism", None) or CONNECT_PARALLELISM)


def _contexts(engine: Engine, config: Config) -> _Contexts:
    schema = table_schema(config, engine)
    catalog = reflect_catalog(engine, schema, published_tables(config, engine))
    return _Contexts(
        ClassifyContext(catalog, publisher_user(config, engine), config.publisher.allow_loopback),
        ObjectsContext(
            QueryBackContext(config.database.sqlalchemy_url(), schema, catalog.tables),
            OperationContext(
                catalog.tables,
                association_schema(config, engine),
                config.publisher.insert_row_operation,
                changes=config.output.publishes_changes,
            ),
        ),
    )


def _in_driver(
    window: CycleWindow, contexts: _Contexts, config: Config, output: Path, watch: _Stopwatch
) -> _Outcome:
    with watch.stage("read"):
        rows = list(read_rows(window, window.lo, window.hi))
        failpoints.reached("after_read")
    with watch.stage("classify"):
        classifier = RowClassifier(contexts.classify, config.publisher.future_events)
        fields = publishable_fields(config.output.publishes_changes)
        publishable = []
        exceptions: dict[int, Status] = {}
        rejects: dict[int, dict[str, Any]] = {}
        by_id = {}
        for row in rows:
            event = dict(zip(CLASSIFIED_FIELD_NAMES, classifier(row), strict=True))
            by_id[event["record_id"]] = event
            if event["disposition"] == Disposition.PUBLISH:
                publishable.append({name: event[name] for name in fields})
            elif event["disposition"] == Disposition.ERROR:
                exceptions[event["record_id"]] = Status.ERROR
                rejects[event["record_id"]] = _reject(event, event["reason"])
        publishable.sort(key=lambda e: (e["class_name"], e["canonical_key"]))
    with watch.stage("resolve"):
        operations: list[PublishedOperation] = []
        steps: dict[str, float] = {}
        for item in publish_objects(publishable, contexts.objects, steps):
            if isinstance(item, StatusNote):
                exceptions[item.record_id] = item.status
                if item.status is Status.ERROR:
                    rejects[item.record_id] = _reject(by_id[item.record_id], item.reason)
            else:
                operations.append(item)
    watch.add_steps("resolve", steps)
    with watch.stage("write"):
        cycle_number = next_cycle_number(output)
        documents = write_documents(operations, output, cycle_number, config.publisher.batch_size)
    formats = FormatsWritten()
    if config.output.publishes_changes:
        with watch.stage("changes"):
            ordered = sorted(operations, key=lambda op: op.order)
            changes = [op.change for op in ordered if op.change is not None]
            formats = _formats_in_driver(changes, contexts, config, output, cycle_number)
    return _Outcome(
        events=len(rows),
        statuses=status_runs(id_runs(by_id), exceptions),
        append_rejects=lambda: append_rejects(output, (rejects[rid] for rid in sorted(rejects))),
        documents=documents,
        formats=formats,
    )


def _cycle_formats(contexts: _Contexts, config: Config, output: Path, cycle_number: int) -> CycleFormats:
    operations = contexts.objects.operations
    return CycleFormats(output, cycle_number, operations.tables, operations.schema_label, config.output)


def _formats_in_driver(
    changes: list[Change], contexts: _Contexts, config: Config, output: Path, cycle_number: int
) -> FormatsWritten:
    formats = _cycle_formats(contexts, config, output, cycle_number)
    latest = max((time_prefix(c.event_time) for c in changes), default=NO_TIME)
    numbers = reserve_change_numbers(output, len(changes), latest)
    stamped = stamp(changes, transaction_places(changes), numbers.first, numbers.after_time)
    return formats.finish([write_part(stamped, formats.ctx, 0)])


def _reject(row: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {**{name: row[name] for name in REJECT_FIELDS}, "reason": reason}


def _distributed(
    spark: SparkSession, window: CycleWindow, contexts: _Contexts, config: Config, output: Path, watch: _Stopwatch
) -> _Outcome:
    with watch.stage("read_and_classify"):
        classifier = RowClassifier(contexts.classify, config.publisher.future_events)
        classified = read_events(spark, window, classifier, CLASSIFIED_SCHEMA).localCheckpoint(eager=True)
        failpoints.reached("after_read")
    with watch.stage("resolve"):
        publishable = classified.where(F.col("disposition") == Disposition.PUBLISH).select(
            *publishable_fields(config.output.publishes_changes)
        )
        steps = None if is_connect(spark) else spark.sparkContext.accumulator({}, _SecondsParam())
        results = _resolve_by_object(publishable, contexts.objects, window.partitions, steps)
        results = results.localCheckpoint(eager=True)
    if steps is not None:
        watch.add_steps("resolve", steps.value)
    with watch.stage("write"):
        cycle_number = next_cycle_number(output)
        documents = write_documents_distributed(
            results.where(F.col("xml").isNotNull()).select("op_time", "event_id", "xml"),
            output,
            cycle_number,
            config.publisher.batch_size,
        )
    formats = FormatsWritten()
    if config.output.publishes_changes:
        with watch.stage("changes"):
            operations = results.where(F.col("xml").isNotNull())
            format_steps: dict[str, float] = {}
            formats = _formats_distributed(
                operations, window.partitions, contexts, config, output, cycle_number, format_steps
            )
        watch.add_steps("changes", format_steps)
    with watch.stage("outcomes"):
        staged = write_outcomes_distributed(*_outcomes(classified, results), output, cycle_number, REJECT_FIELDS)
    return _Outcome(
        events=staged.events,
        statuses=staged.statuses,
        append_rejects=staged.append_rejects,
        documents=documents,
        formats=formats,
        discard=staged.remove,
    )


def _outcomes(classified: DataFrame, results: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame | None]:
    """Every read row's status as classified (S, or E with its reason and values), partitioned
    and ordered as read; the statuses the per-object stages decided (W, E); and the rows they
    decided are E, with their reason and values as read (None when there are none)."""
    is_error = F.col("disposition") == Disposition.ERROR
    as_read = classified.select(
        "record_id",
        F.when(is_error, F.lit(Status.ERROR.value)).otherwise(F.lit(Status.SUCCESS.value)).alias("status"),
        F.when(is_error, F.col("reason")).alias("reason"),
        *(F.when(is_error, F.col(c)).alias(c) for c in REJECT_FIELDS[1:]),
    )
    decided = results.where(F.col("xml").isNull()).select("record_id", "status", "reason")
    errors = decided.where(F.col("status") == Status.ERROR.value)
    if errors.isEmpty():
        return as_read, decided, None
    rejected = errors.join(classified.select(*REJECT_FIELDS), "record_id").select(
        "record_id", "status", "reason", *REJECT_FIELDS[1:]
    )
    return as_read, decided, rejected


def _formats_distributed(
    operations: DataFrame, partitions: int, contexts: _Contexts, config: Config, output: Path, cycle_number: int,
    steps: dict[str, float],
) -> FormatsWritten:
    """Change tables and messages from the executors: each operation's place in its transaction
    by a window over the transaction, then the publication order cut into `partitions` ranges
    (a fixed count, so that the writing runs on every core however small the data looks);
    partition i's change numbers follow partition i-1's. `steps` gets the seconds of each step."""
    import pyarrow as pa
    from pyspark.sql import Window

    from publisher.pipeline.workers import arrow_batch, arrow_schema
    from publisher.rules.changes import TransactionPlace

    started = time.perf_counter()
    formats = _cycle_formats(contexts, config, output, cycle_number)
    order = [F.col("op_time").asc_nulls_first(), F.col("event_id")]
    transaction = F.coalesce(F.col("transaction_id"), F.concat(F.lit("#"), F.col("event_id").cast("string")))
    earlier = Window.partitionBy("transaction").orderBy(*order)
    whole = Window.partitionBy("transaction")
    placed = (
        operations.withColumn("transaction", transaction)
        .select(
            *order,
            "change",
            "change_time",
            (F.row_number().over(earlier) - 1).alias("t_index"),
            F.count(F.lit(1)).over(whole).alias("t_total"),
            F.coalesce(F.sum("records").over(earlier.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0))
            .alias("t_row_index"),
            F.sum("records").over(whole).alias("t_rows"),
        )
        .repartitionByRange(partitions, *order)
        .sortWithinPartitions(*order)
        .select(F.spark_partition_id().alias("part"), "change", "change_time", "t_index", "t_total", "t_row_index",
                "t_rows")
        .localCheckpoint(eager=True)
    )
    steps["place"] = (placed_at := time.perf_counter()) - started
    stats = placed.groupBy("part").agg(
        F.count(F.lit(1)).alias("changes"), F.max(F.date_format("change_time", "yyyyMMddHHmmssSS")).alias("latest")
    ).collect()
    parts = sorted((r["part"], r["changes"], r["latest"] or NO_TIME) for r in stats)
    latest = max((p[2] for p in parts), default=NO_TIME)
    numbers = reserve_change_numbers(output, sum(p[1] for p in parts), latest)
    starts: dict[int, tuple[int, str]] = {}
    first, after_time = numbers.first, numbers.after_time
    for part, count, part_latest in parts:
        starts[part] = (first, after_time)
        first, after_time = first + count, max(after_time, part_latest)
    ctx = formats.ctx
    written_schema = arrow_schema(PART_WRITTEN_SCHEMA)
    steps["number"] = (numbered_at := time.perf_counter()) - placed_at

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        while first is not None and not first.num_rows:
            first = next(batches, None)
        if first is None:
            return
        part = first.column("part")[0].as_py()
        rows = (row for batch in itertools.chain([first], batches) for row in batch.to_pylist())
        pairs = ((Change.from_bytes(r["change"]), TransactionPlace(r["t_index"], r["t_total"], r["t_row_index"],
                                                                   r["t_rows"])) for r in rows)
        changes, places = _unzip(pairs)
        number, after_time = starts[part]
        written = write_part(stamp(changes, places, number, after_time), ctx, part)
        out: list[tuple[int, str | None, int, int]] = [
            (part, table, count, written.messages) for table, count in written.rows.items()
        ]
        yield arrow_batch(out or [(part, None, 0, written.messages)], written_schema)

    pieces: dict[int, tuple[dict[str, int], int]] = {}
    for r in placed.mapInArrow(write, PART_WRITTEN_SCHEMA).collect():
        table_rows, messages = pieces.setdefault(r["part"], ({}, r["messages"]))
        if r["table"] is not None:
            table_rows[r["table"]] = r["rows"]
    steps["write"] = (written_at := time.perf_counter()) - numbered_at
    finished = formats.finish(PartWritten(part, rows, messages) for part, (rows, messages) in pieces.items())
    steps["finish"] = time.perf_counter() - written_at
    return finished


def _unzip(pairs: Iterator[tuple[Change, Any]]) -> tuple[Iterator[Change], Iterator[Any]]:
    """Two lazy streams from one stream of pairs, consumed in step (as `stamp` zips them)."""
    first, second = itertools.tee(pairs)
    return (pair[0] for pair in first), (pair[1] for pair in second)


PART_WRITTEN_SCHEMA = "part int, table string, rows long, messages long"
"""What a partition's change-table and message writer reports: a row per table written."""


class _SecondsParam(AccumulatorParam[dict[str, float]]):
    """Seconds per step, summed across the executors' tasks."""

    def zero(self, value: dict[str, float]) -> dict[str, float]:
        return {}

    def addInPlace(self, value1: dict[str, float], value2: dict[str, float]) -> dict[str, float]:
        for step, spent in value2.items():
            value1[step] = value1.get(step, 0.0) + spent
        return value1


def _resolve_by_object(
    publishable: DataFrame, ctx: ObjectsContext, partitions: int, steps: Accumulator[dict[str, float]] | None
) -> DataFrame:
    """Shuffle so each object's events meet in one partition, sorted together; then run
    stages 3–5 there: the output holds a row per operation and per event that is not S.
    Without `steps` (Spark Connect has no accumulators) the time spent per step is not summed."""
    import pyarrow as pa

    from publisher.pipeline.workers import arrow_batch, arrow_schema

    schema = arrow_schema(NOTE_SCHEMA)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def events() -> Iterator[dict[str, Any]]:
            for batch in batches:
                yield from batch.to_pylist()

        rows: list[tuple[Any, ...]] = []
        spent: dict[str, float] = {}
        for item in publish_objects(events(), ctx, spent):
            if isinstance(item, StatusNote):
                rows.append((item.record_id, item.status.value, item.reason, None, None, None, None, None, None, None))
            else:
                change = item.change
                rows.append((
                    None, None, None, item.op_time, item.event_id, item.xml,
                    None if change is None else change.to_bytes(),
                    None if change is None else change.transaction_id,
                    None if change is None else change.event_time,
                    None if change is None else change.records,
                ))
            if len(rows) == ARROW_BATCH_ROWS:
                yield arrow_batch(rows, schema)
                rows = []
        if rows:
            yield arrow_batch(rows, schema)
        if steps is not None:
            steps.add(spent)

    return (
        publishable.repartition(partitions, "class_name", "canonical_key")
        .sortWithinPartitions("class_name", "canonical_key")
        .mapInArrow(run, NOTE_SCHEMA)
    )
