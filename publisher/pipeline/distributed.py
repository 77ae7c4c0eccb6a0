"""The Spark path: a large cycle's stages as Spark jobs. The executors read, classify, resolve
and write; no event or operation passes through the driver, which only plans, reserves change
numbers, renames staged files and acknowledges."""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from publisher import failpoints
from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.events import Status
from publisher.outputs.documents import DocumentWritten, write_documents_distributed
from publisher.outputs.formats import FormatsWritten, PartWritten, reserve_change_numbers, write_part
from publisher.outputs.outcomes import write_outcomes_distributed
from publisher.pipeline.objects import publishable_fields
from publisher.pipeline.read import read_events
from publisher.pipeline.resolve import RESOLVED_SCHEMA, resolve_batches
from publisher.pipeline.spark import is_connect
from publisher.pipeline.stages import REJECT_FIELDS, CyclePath, Outcomes
from publisher.pipeline.timing import StepTimer
from publisher.rules.changes import NO_TIME, Change, TransactionPlace, stamp
from publisher.rules.classify import Disposition
from publisher.rules.classify_batch import CLASSIFIED_SCHEMA, BatchClassifier
from publisher.rules.order import spark_order

PART_WRITTEN_SCHEMA = "part int, format string, name string, count long"
"""What a partition's formats wrote (`formats.PartWritten`), a row per count."""
"""What a partition's change-table and message writer reports: a row per table written."""


@dataclass
class Distributed(CyclePath[DataFrame, DataFrame]):
    spark: SparkSession | None = None

    @property
    def partitions(self) -> int:
        return self.plan.window.partitions

    def read_and_classify(self) -> DataFrame:
        assert self.spark is not None
        classify = BatchClassifier(self.plan.classify, self.plan.future_events)
        classified = read_events(self.spark, self.plan.window, classify, CLASSIFIED_SCHEMA)
        classified = classified.localCheckpoint(eager=True)
        failpoints.reached("after_read")
        return classified

    def resolve(self, classified: DataFrame) -> DataFrame:
        """Shuffle so each object's events meet in one partition, sorted together, then resolve
        them there. Spark Connect has no accumulators: there the steps are not timed."""
        assert self.spark is not None
        ctx = self.plan.objects
        steps = None if is_connect(self.spark) else self.spark.sparkContext.accumulator({}, _SecondsParam())

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            spent = StepTimer()
            yield from resolve_batches(batches, ctx, spent)
            if steps is not None:
                steps.add(spent.seconds)

        publishable = classified.where(F.col("disposition") == Disposition.PUBLISH).select(
            *publishable_fields(self.plan.formats is not None)
        )
        resolved = (
            publishable.repartition(self.partitions, "class_name", "canonical_key")
            .sortWithinPartitions("class_name", "canonical_key")
            .mapInArrow(run, RESOLVED_SCHEMA)
            .localCheckpoint(eager=True)
        )
        if steps is not None:
            self.steps["resolve"] = steps.value
        return resolved

    def write_documents(self, resolved: DataFrame, cycle_number: int) -> list[DocumentWritten]:
        operations = resolved.where(F.col("xml").isNotNull()).select("op_time", "event_id", "xml")
        return write_documents_distributed(operations, self.plan.output, cycle_number, self.plan.batch_size)

    def write_formats(self, resolved: DataFrame, cycle_number: int) -> FormatsWritten:
        """Each operation's place in its transaction by a window over the transaction, then the
        publication order cut into `partitions` ranges (a fixed count, so that the writing runs
        on every core however small the data looks); partition i's change numbers follow
        partition i-1's."""
        steps = self.steps.setdefault("changes", {})
        started = time.perf_counter()
        formats = self.plan.cycle_formats(cycle_number)
        placed = placed_changes(resolved.where(F.col("xml").isNotNull()), self.partitions)
        steps["place"] = (placed_at := time.perf_counter()) - started
        starts = self._reserve(placed)
        steps["number"] = (numbered_at := time.perf_counter()) - placed_at
        cycles = formats.started
        written_schema = arrow_schema_of(PART_WRITTEN_SCHEMA)

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
            written = write_part(stamp(changes, places, number, after_time), cycles, part)
            out: list[tuple[Any, ...]] = [
                (part, name, counted, count) for name, counts in written.counts.items()
                for counted, count in counts.items()
            ]
            yield rows_batch(out or [(part, None, None, 0)], written_schema)

        pieces: dict[int, dict[str, dict[str, int]]] = {}
        for r in placed.mapInArrow(write, PART_WRITTEN_SCHEMA).collect():
            counts = pieces.setdefault(r["part"], {})
            if r["format"] is not None:
                counts.setdefault(r["format"], {})[r["name"]] = r["count"]
        steps["write"] = (written_at := time.perf_counter()) - numbered_at
        finished = formats.finish(PartWritten(part, counts) for part, counts in pieces.items())
        steps["finish"] = time.perf_counter() - written_at
        return finished

    def _reserve(self, placed: DataFrame) -> dict[int, tuple[int, str]]:
        """Count each partition's changes, reserve the cycle's numbers once: where each starts."""
        stats = placed.groupBy("part").agg(
            F.count(F.lit(1)).alias("changes"), F.max(time_prefix_of("change_time")).alias("latest")
        ).collect()
        parts = sorted((r["part"], r["changes"], r["latest"] or NO_TIME) for r in stats)
        latest = max((p[2] for p in parts), default=NO_TIME)
        numbers = reserve_change_numbers(self.plan.output, sum(p[1] for p in parts), latest)
        starts: dict[int, tuple[int, str]] = {}
        first, after_time = numbers.first, numbers.after_time
        for part, count, part_latest in parts:
            starts[part] = (first, after_time)
            first, after_time = first + count, max(after_time, part_latest)
        return starts

    def outcomes(self, classified: DataFrame, resolved: DataFrame, cycle_number: int) -> Outcomes:
        staged = write_outcomes_distributed(*_outcomes(classified, resolved), self.plan.output, cycle_number,
                                            REJECT_FIELDS)
        passed = classified.where(F.col("disposition") == Disposition.LOOPBACK).groupBy("perpetrator").count()
        loopback = {str(row["perpetrator"]): int(row["count"]) for row in passed.collect()}
        return Outcomes(staged.events, staged.statuses, staged.append_rejects, staged.remove, loopback)


def time_prefix_of(column: str) -> Column:
    """`changes.time_prefix` in Spark SQL (UTC session): YYYYMMDDHHmmSShh, NULL for no time."""
    return F.date_format(column, "yyyyMMddHHmmssSS")


def placed_changes(operations: DataFrame, partitions: int) -> DataFrame:
    """Each change with its place in its transaction (`changes.transaction_places` in Spark
    SQL), in publication order (the driver path's `_publication_order`) cut into ranges."""
    order = spark_order(F, "op_time", "event_id")
    transaction = F.coalesce(F.col("transaction_id"), F.concat(F.lit("#"), F.col("event_id").cast("string")))
    earlier = Window.partitionBy("transaction").orderBy(*order)
    whole = Window.partitionBy("transaction")
    return (
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


def _outcomes(classified: DataFrame, resolved: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """Every read row's status as classified (S, or E), partitioned and ordered as read; the
    statuses resolving decided (W, E); and the rows classification made E and those resolving
    made E, each with its reason and its values as read."""
    is_error = F.col("disposition") == Disposition.ERROR
    as_read = classified.select(
        "record_id", F.when(is_error, F.lit(Status.ERROR.value)).otherwise(F.lit(Status.SUCCESS.value)).alias("status")
    )
    decided = resolved.where(F.col("xml").isNull()).select("record_id", "status", "reason")
    rejected = classified.where(is_error).select("record_id", "reason", *REJECT_FIELDS[1:])
    errors = decided.where(F.col("status") == Status.ERROR.value)
    rejected_later = errors.join(classified.select(*REJECT_FIELDS), "record_id").select(
        "record_id", "reason", *REJECT_FIELDS[1:]
    )
    return as_read, decided, rejected, rejected_later


def _unzip(pairs: Iterator[tuple[Change, Any]]) -> tuple[Iterator[Change], Iterator[Any]]:
    """Two lazy streams from one stream of pairs, consumed in step (as `stamp` zips them)."""
    first, second = itertools.tee(pairs)
    return (pair[0] for pair in first), (pair[1] for pair in second)


class _SecondsParam(AccumulatorParam[dict[str, float]]):
    """Seconds per step, summed across the executors' tasks."""

    def zero(self, value: dict[str, float]) -> dict[str, float]:
        return {}

    def addInPlace(self, value1: dict[str, float], value2: dict[str, float]) -> dict[str, float]:
        for step, spent in value2.items():
            value1[step] = value1.get(step, 0.0) + spent
        return value1
