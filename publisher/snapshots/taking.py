"""Taking one table's part of a snapshot: chunk after chunk in key order from where an earlier
run stopped, or, for a large table written directly, in key ranges taken at once; with what
the summary reports of it."""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from publisher import failpoints
from publisher.config import Config
from publisher.errors import TransientError
from publisher.model.catalog import TableInfo
from publisher.snapshots.chunks import ROWS, ChunkEvents, EventLogger, KeyOrder, bound_after, log_chunk
from publisher.snapshots.direct import DirectOutput, Numbering, publish_chunk, why_not_direct
from publisher.snapshots.ranges import (
    RangeJob,
    cut_ranges,
    parallelism,
    record,
    rows_logged,
    take_in_driver,
    take_on_spark,
    take_on_threads,
)
from publisher.snapshots.state import (
    Begun,
    KeyRange,
    TablePart,
    finish_ranges,
    part_started_at,
    range_table,
    recorded_ranges,
    snapshot_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Progress = Callable[[str, int, int, float], None]
"""(table, rows logged, rows total, seconds since the table began)."""


@dataclass
class TableSnapshot:
    """One table's part of a snapshot, as the summary reports it."""

    rows: int = 0
    """Rows logged by this run (a resumed snapshot: since it resumed)."""
    before: int = 0
    """A resumed snapshot: rows the runs it resumed logged; with `rows`, what its progress counts."""
    total: int = 0
    """Rows the condition selected when the snapshot began."""
    resumed_after: str | None = None
    """The table_key after which a snapshot started again continued; None: from the first row."""
    published: int = 0
    """Of `rows`, those the direct path wrote as operations itself; the others were logged."""
    ranges: dict[str, int] | None = None
    """Taken in key ranges: how many, of them how many an earlier run finished and how many it
    had begun (continued after their last chunk). None: taken whole."""
    null_keys: int = 0
    """Of `total`, rows with a NULL key column (a database may allow one, a view may hold one): no
    object has their key, so none is published; counted so the summary says so."""


@dataclass(frozen=True)
class Taking:
    """What taking each table's part of a snapshot needs, resolved once."""

    config: Config
    engine: Engine
    schema: str | None
    perpetrator: str
    condition: str
    reader: str
    chunk_rows: int
    progress: Progress | None
    direct: DirectOutput | None
    spark: Callable[[], SparkSession] | None
    parallel_rows: int
    events: ChunkEvents = ROWS

    def job(self, table: TableInfo, direct: DirectOutput | None) -> RangeJob:
        lockless = None if direct is None else dataclasses.replace(direct, lock_lost=None)
        return RangeJob(self.config.database.sqlalchemy_url(), self.config, self.schema, table, self.condition,
                        self.reader, self.perpetrator, self.chunk_rows, lockless)


def take_part(taking: Taking, table: TableInfo, total: int, begun: Begun) -> TableSnapshot:
    """The table's part taken, from where `begun` says an earlier run left it."""
    last_key, before, finished = begun
    done = TableSnapshot(total=total, resumed_after=last_key, before=before)
    if finished:
        return done
    direct = taking.direct if taking.direct is not None and why_not_direct(table) is None else None
    began = time.perf_counter()

    def report(rows: int) -> None:
        if taking.progress is not None:
            taking.progress(table.name, rows, total, time.perf_counter() - began)

    ranges = _ranges(taking, table, direct, last_key, total - before)
    if ranges is not None:
        return _take_ranges(taking, table, direct, ranges, done, report)
    engine = taking.engine
    order = KeyOrder(table, taking.schema, engine, taking.condition)
    logger = EventLogger(taking.config, engine, taking.perpetrator)
    part = TablePart(taking.config.event_log.table, taking.schema, taking.reader, table.name)
    numbering = None if direct is None else Numbering(direct.output)
    after = None if last_key is None else order.values_of_key(last_key)
    chunk_rows = taking.chunk_rows
    while True:
        if direct is None or numbering is None:
            chunk = log_chunk(engine, order, logger, part, last_key, after, chunk_rows, taking.events)
        else:
            chunk = publish_chunk(engine, order, logger, part, last_key, after, chunk_rows, direct, numbering)
        if chunk.extent.last is not None:
            last_key = chunk.extent.last[0]
            after = bound_after(order, chunk.extent.last)
        done.rows += chunk.rows
        done.published += chunk.published
        failpoints.reached("snapshot_chunk")
        report(before + done.rows)
        if chunk.extent.finished:
            return done


def _ranges(taking: Taking, table: TableInfo, direct: DirectOutput | None, last_key: str | None,
            left: int) -> list[KeyRange] | None:
    """The key ranges this part of a snapshot was cut into, or is cut into now (a direct one of
    a table with `parallel_rows` rows or more left, with Spark at hand); None: taken whole."""
    engine = taking.engine
    state = snapshot_table(taking.config.event_log.table, taking.schema)
    ranges = range_table(taking.config.event_log.table, taking.schema)
    with engine.connect() as conn:
        started_at = part_started_at(conn, state, taking.reader, table.name)
        recorded = recorded_ranges(conn, ranges, taking.reader, table.name, started_at)
    if recorded:
        return recorded
    if direct is None or taking.spark is None or left < max(taking.parallel_rows, 2 * taking.chunk_rows):
        return None
    order = KeyOrder(table, taking.schema, engine, taking.condition)
    parts = parallelism(taking.spark()) if taking.config.spark.on_tasks else max(2, os.cpu_count() or 2)
    cut = cut_ranges(engine, order, last_key, left, parts)
    record(engine, taking.job(table, direct), started_at, cut)
    return cut


def _take_ranges(taking: Taking, table: TableInfo, direct: DirectOutput | None, ranges: list[KeyRange],
                 done: TableSnapshot, report: Callable[[int], None]) -> TableSnapshot:
    """Every unfinished range taken (at once where the rows are written directly and Spark is
    at hand: on its tasks, or on a local master on the driver's threads), then the table's part
    finished."""
    job = taking.job(table, direct)
    engine = taking.engine
    done.ranges = {"count": len(ranges), "finished_before": sum(r.finished for r in ranges),
                   "continued": sum(r.last_key is not None and not r.finished for r in ranges)}
    if direct is not None and taking.spark is not None and not taking.config.spark.on_tasks:
        rows, published = take_on_threads(dataclasses.replace(job, direct=direct), ranges, engine, report)
    elif direct is not None and taking.spark is not None:
        if direct.lock_lost is not None and direct.lock_lost():
            raise TransientError("the snapshot lost the status mode's lock; start it again to continue")
        rows, published = take_on_spark(taking.spark(), engine, job, ranges, report)
    else:
        rows, published = take_in_driver(engine, job, ranges, report)
    done.rows += rows
    done.published += published
    finish_ranges(engine, taking.config.event_log.table, taking.schema, taking.reader, table.name)
    failpoints.reached("snapshot_chunk")
    report(rows_logged(engine, job))
    return done
