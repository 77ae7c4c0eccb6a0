"""`publisher bench --targets`: every ratio the drain's targets name, each against its floor
measured in the same run, in one table.

The measurements are the bench's own, run in turn on PostgreSQL: the capture mix (`capture`),
then one backlog (`run`) drained by a cold `poll` process, by the warm session without and then
with change tables and messages, and last a `snapshot --direct` of a table (`snapshot`). Each
row is a time beside its floor's time; the capture rows are seconds per transaction with the
style's triggers beside seconds per transaction without, so their ratio is the slowdown. The
machine's load is taken at the start and the end, since other work on it moves the figures.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from publisher.databases.workbench import Workbench
from publisher.workshop.bench.capture import CaptureOptions, CaptureReport, run_capture_bench
from publisher.workshop.bench.run import BenchOptions, BenchReport, run_benchmark
from publisher.workshop.bench.snapshot import SnapshotOptions, SnapshotReport, run_snapshot_bench
from publisher.workshop.databases import copying, of_url

COLD, WARM, FORMATS, FIELD, ROW, SNAPSHOT = 3.0, 3.0, 1.3, 1.3, 1.2, 2.0
"""The targets: at most this many times the floor."""


@dataclass(frozen=True)
class TargetsOptions:
    url: str | None = None
    """Default: the first database that sends a table as COPY does, on its test server."""
    rows: int | None = None
    """Rows of the drain's usr table (default 100000) and of the snapshotted table (default 1000000)."""
    events: int = 1_000_000
    query_limit: int = 200_000
    seconds: int = 20
    """Seconds each capture configuration runs per round."""
    rounds: int = 3
    master: str = "local[*]"
    small_cycle_events: int | None = None

    @property
    def database(self) -> Workbench:
        return of_url(self.url) if self.url else copying()[0]


@dataclass(frozen=True)
class Measure:
    """One measured time beside its floor's, and the target for their ratio."""

    name: str
    seconds: float
    floor_seconds: float
    target: float

    @property
    def ratio(self) -> float:
        return self.seconds / self.floor_seconds if self.floor_seconds else float("inf")

    @property
    def met(self) -> bool:
        return self.ratio <= self.target

    def summary(self) -> dict[str, Any]:
        return {"measure": self.name, "seconds": self.seconds, "floor_seconds": self.floor_seconds,
                "ratio": self.ratio, "target": self.target, "met": self.met}


@dataclass(frozen=True)
class Machine:
    cores: int
    load_at_start: tuple[float, float, float]
    load_at_end: tuple[float, float, float]

    def summary(self) -> dict[str, Any]:
        return {"cores": self.cores, "load_at_start": list(self.load_at_start), "load_at_end": list(self.load_at_end)}


@dataclass
class TargetsReport:
    options: TargetsOptions
    capture: CaptureReport
    drain: BenchReport
    snapshot: SnapshotReport
    machine: Machine
    seconds: float

    @property
    def measures(self) -> list[Measure]:
        d, c, s = self.drain, self.capture, self.snapshot
        if d.cold is None or d.formatted is None or s.copy_and_write_seconds is None:
            raise ValueError("the drain ran without its cold poll or its formats, or the snapshot without its write")
        return [
            Measure("cold `poll` process / floor", d.cold.seconds, d.floor.seconds, COLD),
            Measure("warm drain / floor", d.drain.seconds, d.floor.seconds, WARM),
            Measure("change tables + messages / XDS only, same log", d.formatted.seconds, d.drain.seconds, FORMATS),
            Measure("capture field, s per transaction / no triggers", 1 / c.median_tps("field"),
                    1 / c.median_tps("none"), FIELD),
            Measure("capture row, s per transaction / no triggers", 1 / c.median_tps("row"),
                    1 / c.median_tps("none"), ROW),
            Measure(f"snapshot --direct of {s.options.rows:,} rows / (COPY + write, fsync)", s.seconds,
                    s.copy_and_write_seconds, SNAPSHOT),
        ]

    def summary(self) -> dict[str, Any]:
        o = self.options
        return {
            "database": o.database.name, "rows": o.rows, "events": o.events, "query_limit": o.query_limit,
            "capture_seconds": o.seconds, "capture_rounds": o.rounds, "master": o.master,
            "machine": self.machine.summary(), "seconds": round(self.seconds, 3),
            "measures": [m.summary() for m in self.measures],
            "capture": self.capture.summary(), "drain": self.drain.summary(), "snapshot": self.snapshot.summary(),
        }


def format_targets_report(report: TargetsReport) -> str:
    """One line per measure: its seconds, its floor's, the ratio, the target and whether it is met."""
    o, m = report.options, report.machine
    measures = report.measures
    width = max(len(x.name) for x in measures) + 2
    lines = [
        f"publisher bench --targets on {o.database.name}: {report.drain.options.rows:,} rows, {o.events:,} events, "
        f"query_limit {o.query_limit:,}, capture {o.rounds} round(s) of {o.seconds} s; {report.seconds:,.0f} s in all",
        f"machine: {m.cores} cores, load average {_load(m.load_at_start)} at the start, "
        f"{_load(m.load_at_end)} at the end",
        f"{'measure':<{width}}{'seconds':>12}{'floor s':>12}{'ratio':>9}{'target':>9}  met",
    ]
    for x in measures:
        lines.append(f"{x.name:<{width}}{x.seconds:>12.4g}{x.floor_seconds:>12.4g}{x.ratio:>8.3f}x"
                     f"{x.target:>8.2g}x  {'yes' if x.met else 'NO'}")
    return "\n".join(lines)


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def run_targets(options: TargetsOptions, spark: SparkSession | None = None) -> TargetsReport:
    """The capture mix first, with no Spark running; then the drain, which builds the session
    unless `spark` is given; then the snapshot on the same warm session."""
    started = time.perf_counter()
    load = os.getloadavg()
    database = options.database
    capture = run_capture_bench(CaptureOptions(database=database.name, url=options.url, seconds=options.seconds,
                                               rounds=options.rounds))
    drained = run_benchmark(BenchOptions(
        database=database.name, url=options.url, rows=options.rows or 100_000, events=options.events,
        query_limit=options.query_limit, latency_cycles=1, reference_sample=100, master=options.master,
        cold=True, formats_beside=True, small_cycle_events=options.small_cycle_events), spark)
    spark = spark or SparkSession.getActiveSession()
    snapshot = run_snapshot_bench(SnapshotOptions(
        url=options.url, rows=options.rows or 1_000_000, query_limit=options.query_limit, master=options.master,
        small_cycle_events=options.small_cycle_events, warm_up=spark is None), spark)
    machine = Machine(os.cpu_count() or 0, load, os.getloadavg())
    return TargetsReport(options, capture, drained, snapshot, machine, time.perf_counter() - started)

