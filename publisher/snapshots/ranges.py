"""A large table's part of a direct snapshot, cut into key ranges taken at once, each chunk by
chunk as the driver would (`snapshot_direct`): one range per task of Spark's executors, or on a
local master one per core, each on a thread of the driver.

The ranges are cut by the keys at even offsets of the rows left, and recorded in
`<event_log>_snapshot_range` before any is taken, each with how far it has come, so that a
snapshot killed while they run continues each range after its last chunk. Each range names its
documents by a cycle number the driver took for it (no two executors ever take the same name),
while the driver holds the status mode's lock, so no cycle writes among them. Ranges hold
disjoint objects, so the order of their documents among one another says nothing.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select

from publisher import failpoints
from publisher.config import Config
from publisher.errors import TransientError, root_cause
from publisher.model.catalog import TableInfo
from publisher.outputs.cycle_files import next_cycle_number
from publisher.snapshots.chunks import EventLogger, KeyOrder, bound_after, log_chunk
from publisher.snapshots.direct import DirectOutput, Numbering, publish_chunk
from publisher.snapshots.state import PROGRESS_EVERY, KeyRange, TablePart, record_ranges, snapshot_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

PARALLEL_ROWS = 200_000
"""A direct snapshot takes a table with at least this many rows left in parallel key ranges."""


@dataclass(frozen=True)
class RangeJob:
    """What a task needs to take a key range: picklable (no engine, no lock)."""

    url: str
    config: Config
    schema: str | None
    table: TableInfo
    condition: str
    reader: str
    perpetrator: str
    chunk_rows: int
    direct: DirectOutput | None
    """None: the rows are logged (a logged snapshot continuing ranges a direct one cut)."""


def take_range(job: RangeJob, key_range: KeyRange, cycle: int | None, engine: Engine | None = None) -> tuple[int, int]:
    """Every chunk of one key range after its last, in key order: (rows, of them published)."""
    from publisher.pipeline.workers import engine_for

    engine = engine or engine_for(job.url)
    order = KeyOrder(job.table, job.schema, engine, job.condition, upto=key_range.upto)
    logger = EventLogger(job.config, engine, job.perpetrator)
    part = TablePart(job.config.event_log.table, job.schema, job.reader, job.table.name, key_range.part)
    numbering = Numbering(job.direct.output, cycle) if job.direct is not None else None
    last_key = key_range.resume_after
    after = None if last_key is None else order.values_of_key(last_key)
    rows = published = 0
    while True:
        if job.direct is None or numbering is None:
            chunk = log_chunk(engine, order, logger, part, last_key, after, job.chunk_rows)
        else:
            chunk = publish_chunk(engine, order, logger, part, last_key, after, job.chunk_rows, job.direct, numbering)
        rows += chunk.rows
        published += chunk.published
        if chunk.extent.last is not None:
            last_key = chunk.extent.last[0]
            after = bound_after(order, chunk.extent.last)
        failpoints.reached("snapshot_chunk")
        if chunk.extent.finished:
            return rows, published


def cut_ranges(engine: Engine, order: KeyOrder, after_key: str | None, rows: int, parts: int) -> list[KeyRange]:
    """`parts` ranges of about `rows / parts` rows each after `after_key`, by the keys at even
    offsets (read without a lock: a bound only needs to be a key in order)."""
    after = None if after_key is None else order.values_of_key(after_key)
    bounds: list[str] = []
    with engine.connect() as conn:
        for index in range(1, parts):
            query = order.query(select(*order.texts), after, 1).offset(rows * index // parts - 1)
            found = order.keyed(conn.execute(query))
            if found and (not bounds or found[0][0] != bounds[-1]):
                bounds.append(found[0][0])
    starts = [after_key, *bounds]
    ends: list[str | None] = [*bounds, None]
    return [KeyRange(part, start, end) for part, (start, end) in enumerate(zip(starts, ends, strict=True))]


def record(engine: Engine, job: RangeJob, started_at: str, cut: list[KeyRange]) -> None:
    from publisher.snapshots.state import range_table

    with engine.begin() as conn:
        record_ranges(conn, range_table(job.config.event_log.table, job.schema), job.reader, job.table.name,
                      started_at, cut)


def parallelism(spark: SparkSession) -> int:
    """The tasks the session runs at once (two where it does not say)."""
    try:
        return max(2, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return 2


_RESULT = "part int, rows long, published long"


def take_on_spark(
    spark: SparkSession, engine: Engine, job: RangeJob, ranges: list[KeyRange],
    progress: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """The unfinished ranges taken at once, one Spark task each, under cycle numbers taken here;
    `progress` gets the table's rows logged so far every few seconds. (rows, published)."""
    import pyarrow as pa

    from publisher.model.arrow import arrow_schema_of

    waiting = [r for r in ranges if not r.finished]
    if not waiting:
        return 0, 0
    cycles = [next_cycle_number(job.direct.output) if job.direct is not None else None for _ in waiting]
    schema = arrow_schema_of(_RESULT)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column("id").to_pylist():
                rows, published = take_range(job, waiting[index], cycles[index])
                yield pa.RecordBatch.from_pylist(
                    [{"part": waiting[index].part, "rows": rows, "published": published}], schema=schema)

    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(engine, job, done, progress), daemon=True)
    watcher.start()
    try:
        results = spark.range(0, len(waiting), 1, len(waiting)).mapInArrow(run, _RESULT).collect()
    except Exception as exc:
        raise TransientError(f"snapshot of {job.table.name} in key ranges: {root_cause(exc)}") from exc
    finally:
        done.set()
        watcher.join()
    return sum(r["rows"] for r in results), sum(r["published"] for r in results)


def take_on_threads(job: RangeJob, ranges: list[KeyRange], engine: Engine,
                    progress: Callable[[int], None] | None = None) -> tuple[int, int]:
    """The unfinished ranges taken at once, a thread and a connection each, under cycle numbers
    taken here: on a local master, whose tasks would share the driver's cores, and where a
    chunk's work is the database's, Arrow's and the disk's, outside the GIL. The threads share
    `engine`'s pool: a chunk takes a connection a chunk before it gave back, where a connection
    of its own would cost every chunk a login and a server process. `job` may hold the lock's
    `lock_lost`, which each chunk asks. (rows, published)."""
    from concurrent.futures import ThreadPoolExecutor

    waiting = [r for r in ranges if not r.finished]
    if not waiting:
        return 0, 0
    cycles = [next_cycle_number(job.direct.output) if job.direct is not None else None for _ in waiting]
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(engine, job, done, progress), daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(len(waiting), thread_name_prefix="snapshot-range") as pool:
            results = list(pool.map(take_range, [job] * len(waiting), waiting, cycles, [engine] * len(waiting)))
    finally:
        done.set()
        watcher.join()
    return sum(rows for rows, _ in results), sum(published for _, published in results)


def take_in_driver(engine: Engine, job: RangeJob, ranges: list[KeyRange],
                   progress: Callable[[int], None] | None = None) -> tuple[int, int]:
    """The unfinished ranges one after another (no Spark at hand). (rows, published)."""
    rows = published = 0
    for key_range in ranges:
        if key_range.finished:
            continue
        cycle = next_cycle_number(job.direct.output) if job.direct is not None else None
        taken, written = take_range(job, key_range, cycle, engine)
        rows += taken
        published += written
        if progress is not None:
            progress(rows_logged(engine, job))
    return rows, published


def _watch(engine: Engine, job: RangeJob, done: threading.Event, progress: Callable[[int], None] | None) -> None:

    if progress is None:
        return
    while not done.wait(PROGRESS_EVERY):
        try:
            progress(rows_logged(engine, job))
        except Exception:  # noqa: BLE001,S112 - progress is a courtesy; the ranges go on
            continue


def rows_logged(engine: Engine, job: RangeJob) -> int:
    """The table's rows logged (or written) so far, as `<event_log>_snapshot` counts them."""
    from sqlalchemy import and_

    state = snapshot_table(job.config.event_log.table, job.schema)
    with engine.connect() as conn:
        value: Any = conn.execute(select(state.c.rows_logged).where(
            and_(state.c.reader == job.reader, state.c.table_name == job.table.name))).scalar_one()
    return int(value)
