"""`publisher bench --triggerless`: what a triggerless cycle costs, against the floor.

Every triggerless cycle reads its tables whole, so the floor is the database handing the whole table
over with COPY (`Dialect.copy_out`), measured in the same run. The bench's `usr` table is filled, a
first cycle records it (startup_option "future": nothing published), a first comparison finds
nothing changed (on a cluster it starts the workers' Python, once for the life of a `run`), then 1%
of the rows change and a cycle publishes them, then a cycle finds nothing changed (idle).
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from sqlalchemy import Engine

from publisher.config import Config, PublicationMode, StartupOption
from publisher.database import connect
from publisher.databases.workbench import Workbench
from publisher.triggerless.cycle import ComparisonResult, run_comparison_cycle
from publisher.workshop.bench.floor import vacuum
from publisher.workshop.bench.report import format_count, format_seconds, format_size
from publisher.workshop.bench.run import start_spark
from publisher.workshop.bench.sampling import Memory, ProcessSampler
from publisher.workshop.bench.scratch import work_directory
from publisher.workshop.bench.snapshot import CopyFloor, measure_copy_floor
from publisher.workshop.bench.workload import bench_config, load_usr
from publisher.workshop.databases import copying, of_url

SCHEMA = "triggerless_bench"
"""The schema the benchmark creates and drops."""


@dataclass(frozen=True)
class TriggerlessOptions:
    url: str | None = None
    rows: int = 1_000_000
    changed_percent: float = 1.0
    master: str = "local[*]"
    schema: str = SCHEMA
    workdir: Path | None = None
    cluster: bool = False
    """Start a standalone master and worker (`bench.cluster`) and compare on them (ignores `master`)."""

    @property
    def copied(self) -> Workbench:
        """The database measured: the URL's, else the first that sends a table as COPY does."""
        return of_url(self.url) if self.url else copying()[0]

    @property
    def database_url(self) -> str:
        return self.url or str(self.copied.bench_url)


@dataclass
class TriggerlessReport:
    options: TriggerlessOptions
    load_seconds: float
    floor: CopyFloor
    first: ComparisonResult
    first_comparison: ComparisonResult
    """The first cycle that compares (nothing changed): where a cluster's tasks start their Python."""
    changed: ComparisonResult
    idle: ComparisonResult
    changed_rows: int
    memory: Memory
    spark_seconds: float

    def ratio(self, result: ComparisonResult) -> float:
        return result.elapsed / self.floor.seconds if self.floor.seconds else 0.0

    @property
    def complete(self) -> bool:
        """The changed cycle published exactly the rows changed, as modifies; the idle one nothing."""
        table = self.changed.tables.get("usr")
        return (table is not None and table.modify == self.changed_rows == self.changed.operations
                and self.idle.operations == 0 and self.first_comparison.operations == 0)

    def summary(self) -> dict[str, Any]:
        o = self.options
        return {
            "database": o.copied.name, "rows": o.rows, "changed_rows": self.changed_rows, "master": o.master,
            "load_seconds": round(self.load_seconds, 3), "spark_seconds": round(self.spark_seconds, 3),
            "floor": self.floor.summary(),
            "first_cycle": self.first.summary(), "first_comparison": self.first_comparison.summary(),
            "changed_cycle": self.changed.summary(),
            "idle_cycle": self.idle.summary(),
            "changed_floor_ratio": round(self.ratio(self.changed), 3),
            "idle_floor_ratio": round(self.ratio(self.idle), 3),
            "memory": self.memory.summary(), "complete": self.complete,
        }


def format_triggerless_report(report: TriggerlessReport) -> str:
    o, f = report.options, report.floor
    rows = [
        ("floor: COPY of the table", f"{format_seconds(f.seconds)} ({format_count(f.rows)} rows, "
                                     f"{format_size(f.bytes_read)})"),
        ("first cycle (records the table)", format_seconds(report.first.elapsed)),
        ("first comparison (nothing changed)", format_seconds(report.first_comparison.elapsed)),
        (f"cycle, {format_count(report.changed_rows)} rows changed",
         f"{format_seconds(report.changed.elapsed)} ({format_count(report.changed.operations)} operations, "
         f"{format_count(report.changed.documents)} documents)"),
        ("  / floor", f"{report.ratio(report.changed):,.1f}x"),
        ("idle cycle", format_seconds(report.idle.elapsed)),
        ("  / floor", f"{report.ratio(report.idle):,.1f}x"),
        ("peak RSS driver / JVM / worker", f"{format_size(report.memory.driver)} / {format_size(report.memory.jvm)}"
                                           f" / {format_size(report.memory.python_worker)}"),
        ("exactly the changed rows published", "yes" if report.complete else "NO"),
    ]
    width = max(len(name) for name, _ in rows) + 2
    head = f"triggerless cycle cost on {o.copied.name}: usr, {format_count(o.rows)} rows, master {o.master}"
    return "\n".join([head, *(f"{name:<{width}}{value}" for name, value in rows)])


def run_triggerless_bench(options: TriggerlessOptions, spark: SparkSession | None = None) -> TriggerlessReport:
    """Load, measure the floor, run the three cycles; the schema is dropped afterwards. With
    `cluster`, on a standalone master and worker started for the run, whose tasks compare the
    buckets (a cluster master is where the cycles use them)."""
    with work_directory(options.workdir) as workdir:
        if not options.cluster or spark is not None:
            return _on_master(options, workdir, spark, {}, ())
        from pyspark.sql import SparkSession

        from publisher.workshop.bench.cluster import StandaloneCluster, spark_conf_for

        with StandaloneCluster(workdir / "cluster") as cluster:
            options = dataclasses.replace(options, master=cluster.master_url)
            try:
                return _on_master(options, workdir, None, spark_conf_for(cluster), cluster.daemon_pids())
            finally:
                active = SparkSession.getActiveSession()
                if active is not None:
                    active.stop()


def _on_master(options: TriggerlessOptions, workdir: Path, spark: SparkSession | None, conf: dict[str, str],
               daemons: Sequence[int]) -> TriggerlessReport:
    config = bench_config(options.database_url, options.schema, workdir / "out", 10_000, master=options.master)
    config = dataclasses.replace(config, publisher=dataclasses.replace(
        config.publisher, publication_mode=PublicationMode.TRIGGERLESS, startup_option=StartupOption.FUTURE,
        tables=("usr",)))
    engine = connect(config)
    try:
        return _run(options, config, engine, spark, conf, daemons)
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {options.schema} CASCADE")
        engine.dispose()


def _run(options: TriggerlessOptions, config: Config, engine: Engine, spark: SparkSession | None,
         conf: dict[str, str], daemons: Sequence[int]) -> TriggerlessReport:
    started = time.perf_counter()
    load_usr(engine, options.copied, options.schema, options.rows)
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    session = spark or start_spark(config, conf)
    spark_seconds = time.perf_counter() - started
    floor = measure_copy_floor(engine, options.schema)
    with ProcessSampler(roots=[os.getpid(), *daemons]) as sampler:
        first = run_comparison_cycle(lambda: session, engine, config)
        first_comparison = run_comparison_cycle(lambda: session, engine, config)
        every = max(1, round(100 / options.changed_percent))
        with engine.begin() as conn:
            changed = conn.exec_driver_sql(
                f"UPDATE {options.schema}.usr SET fname = fname || '.changed' WHERE mod(idu, {every}) = 0").rowcount
        vacuum(engine, f"{options.schema}.usr")
        floor = min(floor, measure_copy_floor(engine, options.schema), key=lambda f: f.seconds)
        changed_cycle = run_comparison_cycle(lambda: session, engine, config)
        idle = run_comparison_cycle(lambda: session, engine, config)
    return TriggerlessReport(options, load_seconds, floor, first, first_comparison, changed_cycle, idle, changed,
                             sampler.memory(), spark_seconds)
