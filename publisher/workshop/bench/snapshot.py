"""`publisher bench --snapshot`: what a snapshot of a large table costs, against the floor.

A snapshot costs twice: the `snapshot` command logs a row query-back per row, and the cycles
then drain those events, reading each row back. The bench's `usr` table is filled with no
trigger, so no event exists, then captured; the floor is the database handing the whole table
over with COPY (`Dialect.copy_out`), the least any publisher needs to read every row once.
Beside it, the same COPY plus as many bytes as the snapshot's documents written to one file
and fsynced: the least the database and the disk need together, which the direct path's
target is set against.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from sqlalchemy import Engine

from publisher.capture.install import install_capture
from publisher.config import Config, SparkConfig
from publisher.database import connect
from publisher.databases.workbench import Workbench
from publisher.dialects import dialect_of
from publisher.snapshots.snapshot import CHUNK_ROWS, DIRECT_CHUNK_ROWS, SnapshotResult, snapshot, snapshot_directly
from publisher.workshop.bench.drain import DrainResult, count_new, drain
from publisher.workshop.bench.floor import copy_out
from publisher.workshop.bench.report import format_count, format_seconds, format_size
from publisher.workshop.bench.run import BenchOptions, start_spark, warm_up
from publisher.workshop.bench.sampling import Memory, ProcessSampler
from publisher.workshop.bench.scratch import work_directory
from publisher.workshop.bench.workload import bench_config, load_usr
from publisher.workshop.databases import copying, of_url

SCHEMA = "snapshot_bench"
"""The schema the benchmark creates and drops."""


@dataclass(frozen=True)
class SnapshotOptions:
    url: str | None = None
    rows: int = 1_000_000
    query_limit: int = 200_000
    chunk_rows: int | None = None
    """Default: the command's, CHUNK_ROWS logged, DIRECT_CHUNK_ROWS direct."""
    direct: bool = True
    """`snapshot --direct`; False measures the logged path."""
    master: str = "local[*]"
    small_cycle_events: int | None = None
    """`spark.small_cycle_events`: 0 takes the key ranges as Spark's tasks on a local master too."""
    schema: str = SCHEMA
    warm_up: bool = True
    """Drain a tiny backlog first; off only where the session is known to be warm."""
    workdir: Path | None = None
    """Where the documents go; default: a temporary directory, removed afterwards."""

    @property
    def copied(self) -> Workbench:
        """The database measured: the URL's, else the first that sends a table as COPY does."""
        return of_url(self.url) if self.url else copying()[0]

    @property
    def database_url(self) -> str:
        return self.url or str(self.copied.bench_url)

    @property
    def chunk(self) -> int:
        return self.chunk_rows or (DIRECT_CHUNK_ROWS if self.direct else CHUNK_ROWS)


@dataclass(frozen=True)
class CopyFloor:
    """The whole table through COPY … TO STDOUT, every byte read in Python."""

    rows: int
    bytes_read: int
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {"method": "COPY (SELECT * FROM usr) TO STDOUT", "rows": self.rows, "bytes_read": self.bytes_read,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class WriteFloor:
    """As many bytes as the snapshot's documents, written to one file and fsynced."""

    bytes_written: int
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {"method": "one file, written in 1 MiB blocks, fsync", "bytes_written": self.bytes_written,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class ResyncCost:
    """A migration adding one column with a default to the table, through `publisher migrate`,
    which publishes every row again (its logged snapshot), and the drain of what it logged."""

    migrate_seconds: float
    drain: DrainResult

    @property
    def seconds(self) -> float:
        return self.migrate_seconds + self.drain.seconds

    def summary(self) -> dict[str, Any]:
        return {"migrate_seconds": round(self.migrate_seconds, 3), "drain": self.drain.summary(),
                "seconds": round(self.seconds, 3)}


@dataclass
class SnapshotReport:
    options: SnapshotOptions
    load_seconds: float
    floor: CopyFloor
    logged: SnapshotResult
    drain: DrainResult
    memory: Memory
    left_new: int
    spark_seconds: float | None = None
    warm_up_seconds: float = 0.0
    resync: ResyncCost | None = None
    written: WriteFloor | None = None
    """The documents' bytes written and fsynced: with the COPY, the floor of the whole snapshot."""

    @property
    def copy_and_write_seconds(self) -> float | None:
        return None if self.written is None else self.floor.seconds + self.written.seconds

    @property
    def copy_and_write_ratio(self) -> float | None:
        """The snapshot's time against the COPY and the write of its documents' bytes."""
        floor = self.copy_and_write_seconds
        return self.seconds / floor if floor else None

    @property
    def resync_ratio(self) -> float:
        """The one-column resync's whole cost against the snapshot's."""
        return self.resync.seconds / self.seconds if self.resync is not None and self.seconds else 0.0

    @property
    def on_tasks(self) -> bool:
        """Whether the key ranges were Spark's tasks (else the driver's threads)."""
        return SparkConfig(self.options.master, small_cycle_events=self.options.small_cycle_events).on_tasks

    @property
    def events(self) -> int:
        return sum(t.rows - t.published for t in self.logged.tables.values())

    @property
    def published(self) -> int:
        """Rows the direct path wrote as operations itself."""
        return sum(t.published for t in self.logged.tables.values())

    @property
    def seconds(self) -> float:
        """The snapshot's whole cost: logging, then the drain."""
        return self.logged.seconds + self.drain.seconds

    @property
    def floor_ratio(self) -> float:
        return self.seconds / self.floor.seconds if self.floor.seconds else 0.0

    @property
    def rows_per_second(self) -> float:
        return self.options.rows / self.seconds if self.seconds else 0.0

    @property
    def complete(self) -> bool:
        """Every row written directly or logged, once, and published as one operation, no event left new."""
        rows = self.options.rows
        return (self.events + self.published == rows and self.published + self.drain.operations == rows
                and self.left_new == 0)

    def summary(self) -> dict[str, Any]:
        o = self.options
        return {
            "database": o.copied.name,
            "rows": o.rows,
            "query_limit": o.query_limit,
            "chunk_rows": o.chunk,
            "path": "direct" if o.direct else "logged",
            "master": o.master,
            "ranges_on": "tasks" if self.on_tasks else "threads",
            "load_seconds": round(self.load_seconds, 3),
            "spark_seconds": None if self.spark_seconds is None else round(self.spark_seconds, 3),
            "warm_up_seconds": round(self.warm_up_seconds, 3),
            "floor": self.floor.summary(),
            "logging": {"events": self.events, "published": self.published, "seconds": round(self.logged.seconds, 3)},
            "drain": self.drain.summary(),
            "seconds": round(self.seconds, 3),
            "floor_ratio": round(self.floor_ratio, 3),
            "write_floor": None if self.written is None else self.written.summary(),
            "copy_and_write_ratio": None if self.copy_and_write_ratio is None else round(self.copy_and_write_ratio, 3),
            "rows_per_second": round(self.rows_per_second, 1),
            "memory": self.memory.summary(),
            "left_new": self.left_new,
            "complete": self.complete,
            "resync": None if self.resync is None else {**self.resync.summary(),
                                                        "snapshot_ratio": round(self.resync_ratio, 3)},
        }


def format_snapshot_report(report: SnapshotReport) -> str:
    """The report as a plain-text table, one measurement per line."""
    o, f, d = report.options, report.floor, report.drain
    rows = [
        ("floor: COPY of the table", f"{format_seconds(f.seconds)} ({format_count(f.rows)} rows, "
                                     f"{format_size(f.bytes_read)})"),
        ("snapshot command", f"{format_seconds(report.logged.seconds)} ({format_count(report.published)} rows "
                             f"written, {format_count(report.events)} logged)"),
        ("drain (cycles)", f"{format_seconds(d.seconds)} ({d.cycles} cycles, {d.distributed_cycles} as Spark jobs)"),
        ("total", format_seconds(report.seconds)),
        ("total / floor", f"{report.floor_ratio:,.1f}x"),
    ]
    if report.written is not None:
        rows += [("floor: the documents' bytes, fsync", f"{format_seconds(report.written.seconds)} "
                                                        f"({format_size(report.written.bytes_written)})"),
                 ("total / (COPY + the write)", f"{report.copy_and_write_ratio or 0:,.2f}x")]
    rows += [
        ("rows/s end to end", format_count(report.rows_per_second)),
        ("drained operations / documents", f"{format_count(d.operations)} / {format_count(d.documents)}"),
        ("statuses", "  ".join(f"{s} {format_count(n)}" for s, n in sorted(d.statuses.items()))),
        ("peak RSS driver / JVM / worker", f"{format_size(report.memory.driver)} / {format_size(report.memory.jvm)}"
                                           f" / {format_size(report.memory.python_worker)}"),
        ("new rows left in the event log", format_count(report.left_new)),
        ("every row published", "yes" if report.complete else "NO"),
    ]
    if report.resync is not None:
        r = report.resync
        rows += [("resync of one column (migrate ADD COLUMN … DEFAULT)",
                  f"{format_seconds(r.migrate_seconds)} + drain {format_seconds(r.drain.seconds)} = "
                  f"{format_seconds(r.seconds)}, {report.resync_ratio:,.2f}x the snapshot"),
                 ("resync drained operations", format_count(r.drain.operations))]
    rows += [(f"  drain stage {stage}", format_seconds(spent)) for stage, spent in d.stage_seconds.items()
             if "." not in stage]
    width = max(len(name) for name, _ in rows) + 2
    path = "snapshot --direct" if o.direct else "snapshot (logged)"
    ranges = f", key ranges on {'Spark tasks' if report.on_tasks else 'driver threads'}" if o.direct else ""
    head = (f"{path} cost on {o.copied.name}: usr, {format_count(o.rows)} rows, chunk_rows {format_count(o.chunk)}, "
            f"query_limit {format_count(o.query_limit)}, master {o.master}{ranges}")
    return "\n".join([head, *(f"{name:<{width}}{value}" for name, value in rows)])


def run_snapshot_bench(options: SnapshotOptions, spark: SparkSession | None = None) -> SnapshotReport:
    """Load, measure the floor, log the snapshot, drain it; the schema is dropped afterwards.
    `spark` is reused when given, else one session is built and timed."""
    with work_directory(options.workdir) as workdir:
        config = bench_config(options.database_url, options.schema, workdir / "out", options.query_limit,
                              master=options.master)
        config = dataclasses.replace(config, spark=dataclasses.replace(
            config.spark, small_cycle_events=options.small_cycle_events))
        engine = connect(config)
        try:
            return _run(options, config, engine, workdir, spark)
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {options.schema} CASCADE")
            engine.dispose()


def _run(options: SnapshotOptions, config: Config, engine: Engine, workdir: Path,
         spark: SparkSession | None) -> SnapshotReport:
    started = time.perf_counter()
    load_usr(engine, options.copied, options.schema, options.rows)
    install_capture(config, engine, ["usr"], "field")
    load_seconds = time.perf_counter() - started
    floor = measure_copy_floor(engine, options.schema)
    spark_seconds = None
    if spark is None:
        started = time.perf_counter()
        spark = start_spark(config, {})
        spark_seconds = time.perf_counter() - started
    started = time.perf_counter()
    if options.warm_up:
        warm_up(spark, BenchOptions(url=options.database_url, query_limit=options.query_limit, master=options.master,
                                    schema=options.schema), workdir)
    warm_up_seconds = time.perf_counter() - started
    with ProcessSampler(roots=[os.getpid()]) as sampler:
        if options.direct:
            logged = snapshot_directly(config, engine, chunk_rows=options.chunk, spark=lambda: spark)
        else:
            logged = snapshot(config, engine, chunk_rows=options.chunk)
        drained = drain(spark, engine, config, options.rows, "snapshot drain")
    left_new = count_new(config, engine)
    written = measure_write_floor(directory_bytes(Path(config.output.directory)), workdir / "write-floor")
    resync = measure_resync(spark, config, engine, options)
    return SnapshotReport(options, load_seconds, floor, logged, drained, sampler.memory(), left_new,
                          spark_seconds, warm_up_seconds, resync, written)


def directory_bytes(directory: Path) -> int:
    """The bytes of every file under `directory`: what the snapshot wrote."""
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def measure_write_floor(size: int, path: Path, block: int = 2**20) -> WriteFloor:
    """`size` bytes written to one new file and fsynced: the least the disk takes for the documents."""
    data = b"x" * block
    started = time.perf_counter()
    with path.open("wb") as file:
        left = size
        while left > 0:
            left -= file.write(data[:min(block, left)])
        file.flush()
        os.fsync(file.fileno())
    seconds = time.perf_counter() - started
    path.unlink()
    return WriteFloor(size, seconds)


def measure_resync(spark: SparkSession, config: Config, engine: Engine, options: SnapshotOptions) -> ResyncCost:
    """A column added with a default to the snapshotted table through `migrate`, and the drain of
    the rows it publishes again: what the consumer's settling after a migration costs."""
    from publisher.service.migrate import migrate

    started = time.perf_counter()
    migrate(config, f"ALTER TABLE {options.schema}.usr ADD COLUMN resynced INTEGER DEFAULT 1")
    seconds = time.perf_counter() - started
    return ResyncCost(seconds, drain(spark, engine, config, options.rows, "resync drain"))


def measure_copy_floor(engine: Engine, schema: str) -> CopyFloor:
    """The database's own fastest hand-over of every row of `usr`."""
    raw = engine.raw_connection()
    try:
        rows, size, seconds = copy_out(raw.driver_connection, f"SELECT * FROM {schema}.usr",
                                       dialect_of(engine))
        raw.rollback()
    finally:
        raw.close()
    return CopyFloor(rows, size, seconds)
