"""One polling cycle, read top to bottom: read → classify → precedence → query back →
build operations → write → acknowledge. Nothing is acknowledged before the output is on disk.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from publisher import failpoints
from publisher.acknowledge import acknowledge, status_ranges
from publisher.capture import published_tables
from publisher.catalog import reflect_catalog
from publisher.classify import ClassifyContext, Disposition, classify
from publisher.config import Config
from publisher.database import association_schema, publisher_user, table_schema
from publisher.errors import StageFailedError, root_cause
from publisher.events import Status
from publisher.operations import OperationContext, build_operations
from publisher.precedence import Outcome, objects_to_query_back, resolve, with_position
from publisher.queryback import QueryBackContext, query_back
from publisher.read import plan_window, read_events
from publisher.write import append_rejects, next_cycle_number, write_documents


@dataclass
class CycleResult:
    events: int = 0
    operations: int = 0
    documents: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    files: list[str] = field(default_factory=list)
    bytes_written: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

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
        except (PySparkException, Py4JError, SQLAlchemyError, OSError) as exc:
            raise StageFailedError(name, root_cause(exc)) from exc
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


def run_cycle(spark: SparkSession, engine: Engine, config: Config) -> CycleResult:
    """Publish what the event log holds now, once; return what was done."""
    watch = _Stopwatch()
    partitions = config.spark.read_partitions or spark.sparkContext.defaultParallelism
    with watch.stage("read"):
        window = plan_window(config, engine, partitions)
        if window is None:
            return CycleResult(seconds=watch.seconds)
        events = read_events(spark, window).localCheckpoint(eager=True)
        failpoints.reached("after_read")
        table_names = [r[0] for r in events.select("table_name").distinct().collect()]
    schema = table_schema(config, engine)
    with watch.stage("classify"):
        catalog = reflect_catalog(engine, schema, table_names, published_tables(config, engine))
        context = ClassifyContext(catalog, publisher_user(config, engine), config.publisher.allow_loopback)
        classified = with_position(classify(events, context), config.publisher.future_events)
        classified = classified.localCheckpoint(eager=True)
        publishable = classified.where(F.col("disposition") == Disposition.PUBLISH)
    tables = {t.name: t for t in catalog.tables.values()}
    with watch.stage("query_back"):
        qb_context = QueryBackContext(config.database.sqlalchemy_url(), schema, tables)
        current = query_back(objects_to_query_back(publishable), qb_context, partitions)
        current = current.localCheckpoint(eager=True)
    with watch.stage("precedence"):
        resolved = resolve(publishable, current).localCheckpoint(eager=True)
    output = Path(config.output.directory)
    with watch.stage("build_and_write"):
        op_context = OperationContext(tables, association_schema(config, engine), config.publisher.insert_row_operation)
        operations = build_operations(resolved, current, op_context)
        cycle_number = next_cycle_number(output)
        written = write_documents(operations, output, cycle_number, config.publisher.batch_size)
    with watch.stage("rejects"):
        outcomes = _outcomes(classified, resolved).localCheckpoint(eager=True)
        rejected = append_rejects(output, _rejects(outcomes, classified))
    failpoints.reached("before_acknowledge")
    with watch.stage("acknowledge"):
        ranges = status_ranges(outcomes.select("record_id", "status"))
        statuses = acknowledge(engine, config, ranges, run_post_polling=bool(written))
    return CycleResult(
        events=events.count(),
        operations=sum(d.operations for d in written),
        documents=len(written),
        statuses={s.value: n for s, n in statuses.items()},
        rejected=rejected,
        files=[d.name for d in written],
        bytes_written=sum(d.bytes for d in written),
        seconds=watch.seconds,
    )


def _outcomes(classified: DataFrame, resolved: DataFrame) -> DataFrame:
    """record_id, status and reason of every event the cycle read."""
    by_disposition = classified.where(F.col("disposition") != Disposition.PUBLISH).select(
        "record_id",
        F.when(F.col("disposition") == Disposition.ERROR, Status.ERROR.value)
        .otherwise(Status.SUCCESS.value)
        .alias("status"),
        "reason",
    )
    by_outcome = resolved.select(
        "record_id",
        F.when(F.col("outcome") == Outcome.VANISHED, Status.WARNING.value)
        .when(F.col("outcome") == Outcome.UNREADABLE, Status.ERROR.value)
        .otherwise(Status.SUCCESS.value)
        .alias("status"),
        "reason",
    )
    return by_disposition.unionByName(by_outcome)


def _rejects(outcomes: DataFrame, classified: DataFrame) -> list[dict[str, Any]]:
    """The rejected rows as they were read, with the reason; small, so collected to the driver."""
    errors = outcomes.where(F.col("status") == Status.ERROR.value).select("record_id", "reason")
    columns = ["record_id", "event_type", "event_time", "perpetrator", "table_name", "table_key",
               "column_name", "old_value", "new_value"]
    rows = errors.join(classified.select(*columns), on="record_id").orderBy("record_id").collect()
    return [{**row.asDict()} for row in rows]
