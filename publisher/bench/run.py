"""The benchmark run: generate → floor → reference sample → drain → small-poll latency → report.

The drain is what `publisher run` does with a backlog: cycles of `query_limit` events, one warm
SparkSession, until no `N` row is left. Memory is the peak resident size of the driver and of
the processes Spark started (the JVM, the Python workers), sampled from /proc while they run.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from pyspark.sql import SparkSession
from sqlalchemy import Engine, func, select

from publisher.bench.floor import Floor, measure_floor
from publisher.bench.processes import descendants
from publisher.bench.reference import ReferenceResult, run_reference
from publisher.bench.workload import (
    DEFAULT_POSTGRES_URL,
    DEFAULT_SCHEMA,
    MIN_EVENTS,
    MIN_ROWS,
    Backlog,
    Dialect,
    Workload,
    change_rows,
    discard,
    generate,
)
from publisher.config import Config, SparkConfig
from publisher.database import connect, table_schema
from publisher.model.events import Status
from publisher.pipeline.cycle import CycleResult, run_cycle
from publisher.pipeline.window import event_log_table

log = logging.getLogger("publisher")

SAMPLE_SECONDS = 0.2


class BenchError(RuntimeError):
    """The benchmark could not finish: the backlog did not drain."""


@dataclass(frozen=True)
class BenchOptions:
    database: Dialect = "postgresql"
    url: str | None = None
    """Default: the local test server for PostgreSQL, a file in the work directory for SQLite."""
    rows: int = 100_000
    events: int = 1_000_000
    query_limit: int = 200_000
    batch_size: int = 128
    latency_cycles: int = 50
    latency_events: int = 10
    reference_sample: int = 5_000
    master: str = "local[*]"
    schema: str = DEFAULT_SCHEMA
    warm_up: bool = True
    """Drain a tiny backlog before the measured drain; off only where the session is known to be warm."""
    workdir: Path | None = None
    """Where the documents (and the SQLite file) go; default: a temporary directory, removed afterwards."""
    cluster: bool = False
    """Start a standalone master and worker on loopback and drain on them instead of `master`."""
    formats: bool = False
    """Write change tables and messages (with trail headers) beside the XDS documents."""
    backlog: Backlog = Backlog.MIX
    """The generated backlog as the triggers logged it, or rewritten so every row is E or W."""
    subscribers: int = 0
    """Subscribers that each check the whole backlog out, timed before the status mode's drain."""


def with_formats(config: Config) -> Config:
    """The configuration with every output format beside XDS switched on."""
    from publisher.config import ChangeTablesConfig, MessagesConfig

    output = dataclasses.replace(
        config.output,
        change_tables=ChangeTablesConfig(enabled=True, trail_header=True),
        messages=MessagesConfig(enabled=True, trail_header=True),
    )
    return dataclasses.replace(config, output=output)


@dataclass
class DrainResult:
    cycles: int = 0
    distributed_cycles: int = 0
    """Cycles that ran as Spark jobs; the others ran in the driver alone (spark.small_cycle_events)."""
    events: int = 0
    operations: int = 0
    documents: int = 0
    bytes_written: int = 0
    rejected: int = 0
    change_rows: int = 0
    messages: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    cycle_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def add(self, result: CycleResult, seconds: float) -> None:
        self.cycles += 1
        self.distributed_cycles += result.distributed
        self.events += result.events
        self.operations += result.operations
        self.documents += result.documents
        self.bytes_written += result.bytes_written
        self.rejected += result.rejected
        self.change_rows += result.change_rows
        self.messages += result.messages
        self.cycle_seconds.append(seconds)
        for status, count in result.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count
        for stage, spent in result.seconds.items():
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + spent

    def summary(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "distributed_cycles": self.distributed_cycles,
            "events": self.events,
            "operations": self.operations,
            "documents": self.documents,
            "bytes": self.bytes_written,
            "rejected": self.rejected,
            "change_rows": self.change_rows,
            "messages": self.messages,
            "statuses": dict(sorted(self.statuses.items())),
            "seconds": round(self.seconds, 3),
            "events_per_second": round(self.events_per_second, 1),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "cycle_seconds": [round(s, 3) for s in self.cycle_seconds],
        }


@dataclass
class Latency:
    """Small polls on a warm session: the time from a change's commit to its documents and statuses."""

    events_per_cycle: int
    to_documents: list[float] = field(default_factory=list)
    to_acknowledged: list[float] = field(default_factory=list)
    events_seen: list[int] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """Summed over the cycles, like the drain's."""

    def summary(self) -> dict[str, Any]:
        return {
            "cycles": len(self.to_acknowledged),
            "events_per_cycle": self.events_per_cycle,
            "events_seen": sum(self.events_seen),
            "to_documents": _spread(self.to_documents),
            "to_acknowledged": _spread(self.to_acknowledged),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
        }


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, -(-95 * len(ordered) // 100) - 1))]
    return {"median": round(statistics.median(ordered), 4), "p95": round(p95, 4)}


@dataclass
class Memory:
    """Peak resident sizes in bytes; None where /proc could not say."""

    driver: int = 0
    jvm: int | None = None
    python_worker: int | None = None
    """The largest Python worker seen."""
    python_workers_seen: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "driver_bytes": self.driver,
            "jvm_bytes": self.jvm,
            "python_worker_bytes": self.python_worker,
            "python_workers_seen": self.python_workers_seen,
        }


class ProcessSampler:
    """Samples VmHWM of this process's descendants in /proc: the JVM and Spark's Python workers.

    VmHWM is each process's own peak, so a sample between two peaks loses nothing of a process
    that lives on; Spark reuses its Python workers, so most of them do.
    """

    def __init__(self, interval: float = SAMPLE_SECONDS, roots: list[int] | None = None) -> None:
        self.interval = interval
        self.roots = roots or [os.getpid()]
        self.peaks: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        for pid in {p for root in self.roots for p in descendants(root)}:
            kind = _kind(pid)
            peak = _status_kib(pid, "VmHWM")
            if kind is None or peak is None:
                continue
            previous = self.peaks.get(pid, (kind, 0))[1]
            self.peaks[pid] = (kind, max(previous, peak * 1024))

    def memory(self) -> Memory:
        jvm = [peak for kind, peak in self.peaks.values() if kind == "jvm"]
        workers = [peak for kind, peak in self.peaks.values() if kind == "python"]
        return Memory(
            driver=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            jvm=max(jvm) if jvm else None,
            python_worker=max(workers) if workers else None,
            python_workers_seen=len(workers),
        )


def _kind(pid: int) -> str | None:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "python"
    return None


def _status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


@dataclass
class BenchReport:
    options: BenchOptions
    workload: Workload
    floor: Floor
    reference: ReferenceResult
    drain: DrainResult
    latency: Latency
    memory: Memory
    left_new: int
    subscribers: list[DrainResult] = field(default_factory=list)
    """Each subscriber's check-out of the backlog, in windows of query_limit events."""
    spark_seconds: float | None = None
    """Building the SparkSession, when the benchmark built it."""
    warm_up_seconds: float = 0.0

    @property
    def floor_ratio(self) -> float:
        """How many times the floor's time the publisher needs."""
        return self.drain.seconds / self.floor.seconds if self.floor.seconds else 0.0

    @property
    def reference_extrapolated_seconds(self) -> float | None:
        """The reference's time for the whole backlog, at the rate it kept on the sample."""
        rate = self.reference.events_per_second
        return self.workload.events / rate if rate else None

    @property
    def reference_speedup(self) -> float:
        """How many times faster than one event at a time the publisher is."""
        rate = self.reference.events_per_second
        return self.drain.events_per_second / rate if rate else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "database": self.options.database,
            "rows": self.options.rows,
            "events": self.options.events,
            "query_limit": self.options.query_limit,
            "master": self.options.master,
            "spark_seconds": _rounded(self.spark_seconds),
            "warm_up_seconds": round(self.warm_up_seconds, 3),
            "workload": self.workload.summary(),
            "floor": self.floor.summary(),
            "reference": {
                **self.reference.summary(),
                "extrapolated_seconds": _rounded(self.reference_extrapolated_seconds),
            },
            "drain": self.drain.summary(),
            "latency": self.latency.summary(),
            "memory": self.memory.summary(),
            "left_new": self.left_new,
            "subscribers": [s.summary() for s in self.subscribers],
            "subscriber_floor_ratios": [round(s.seconds / self.floor.seconds, 3) if self.floor.seconds else None
                                        for s in self.subscribers],
            "floor_ratio": round(self.floor_ratio, 3),
            "reference_speedup": round(self.reference_speedup, 3),
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_benchmark(options: BenchOptions, spark: SparkSession | None = None) -> BenchReport:
    """Run every phase; `spark` is reused when given, else one session is built and timed (and,
    with `options.cluster`, a standalone cluster started for it and stopped afterwards)."""
    with work_directory(options.workdir) as workdir:
        if not options.cluster or spark is not None:
            return _run(options, workdir, spark, {})
        from publisher.bench.cluster import StandaloneCluster, spark_conf_for

        with StandaloneCluster(workdir / "cluster") as cluster:
            log.info("standalone cluster up at %s", cluster.master_url)
            options = dataclasses.replace(options, master=cluster.master_url)
            try:
                return _run(options, workdir, None, spark_conf_for(cluster), cluster.daemon_pids())
            finally:
                active = SparkSession.getActiveSession()
                if active is not None:
                    active.stop()


@contextmanager
def work_directory(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="publisher-bench-") as name:
        yield Path(name)


def _run(
    options: BenchOptions, workdir: Path, spark: SparkSession | None, conf: dict[str, str], roots: tuple[int, ...] = ()
) -> BenchReport:
    url = options.url or (
        DEFAULT_POSTGRES_URL if options.database == "postgresql" else f"sqlite:///{workdir / 'bench.db'}"
    )
    log.info("generating %d events on %d rows (%s)", options.events, options.rows, options.database)
    workload = generate(options.database, url, options.rows, options.events, options.schema,
                        backlog=options.backlog)
    log.info("generated %d events in %.1f s", workload.events, workload.generate_seconds)
    config = workload.config(workdir / "out", options.query_limit, options.batch_size, options.master)
    if options.formats:
        config = with_formats(config)
    engine = connect(config)
    try:
        floor = measure_floor(config, engine)
        log.info("floor: read %d rows in %.2f s, marked them in %.2f s", floor.rows, floor.read_seconds,
                 floor.mark_seconds)
        reference = run_reference(config, engine, options.reference_sample, workdir / "reference")
        log.info("reference: %d events one at a time in %.1f s", reference.events, reference.seconds)
        spark_seconds = None
        if spark is None:
            started = time.perf_counter()
            spark = start_spark(config, conf)
            spark_seconds = time.perf_counter() - started
        started = time.perf_counter()
        if options.warm_up:
            warm_up(spark, options, workdir)
        warm_up_seconds = time.perf_counter() - started
        config = with_subscribers(config, engine, options.subscribers, workdir)
        with ProcessSampler(roots=[os.getpid(), *roots]) as sampler:
            checked_out = [check_out_backlog(spark, engine, config, name) for name in sorted(config.subscribers)]
            drained = drain(spark, engine, config, workload.events)
            latency = measure_latency(spark, engine, config, workload, options.latency_cycles,
                                      options.latency_events)
        left = count_new(config, engine)
    finally:
        engine.dispose()
    return BenchReport(
        options, workload, floor, reference, drained, latency, sampler.memory(), left, checked_out, spark_seconds,
        warm_up_seconds,
    )


def warm_up(spark: SparkSession, options: BenchOptions, workdir: Path) -> None:
    """Drain a tiny backlog of the same dialect first, through Spark jobs even though it is small,
    so that the drain measures a warm session: Python workers started, code paths compiled, as in
    a `publisher run` that has been up a while."""
    url = options.url or DEFAULT_POSTGRES_URL
    if options.database == "sqlite":
        url = f"sqlite:///{workdir / 'warm-up.db'}"
    workload = generate(options.database, url, MIN_ROWS, MIN_EVENTS, f"{options.schema}_warm_up")
    config = workload.config(workdir / "warm-up", options.query_limit, options.batch_size, options.master)
    config = dataclasses.replace(config, spark=dataclasses.replace(config.spark, small_cycle_events=0))
    if options.formats:
        config = with_formats(config)
    engine = connect(config)
    try:
        drain(spark, engine, config, workload.events, "warm-up")
    finally:
        engine.dispose()
        discard(workload)


def start_spark(config: Config, conf: dict[str, str]) -> SparkSession:
    from publisher.pipeline.spark import get_spark

    return get_spark(SparkConfig(master=config.spark.master, conf=conf))


def drain(spark: SparkSession, engine: Engine, config: Config, backlog: int, name: str = "drain") -> DrainResult:
    """Poll until no new row is left, as `publisher run` follows a full cycle at once."""
    limit = config.publisher.query_limit
    most = -(-backlog // limit) + 2
    result = DrainResult()
    started = time.perf_counter()
    while True:
        cycle_started = time.perf_counter()
        cycle = run_cycle(spark, engine, config)
        if cycle.idle:
            break
        result.add(cycle, time.perf_counter() - cycle_started)
        log.info("%s cycle %d: %d events in %.1f s", name, result.cycles, cycle.events, result.cycle_seconds[-1])
        if result.cycles > most:
            raise BenchError(f"the backlog of {backlog} events did not drain in {most} cycles of {limit}")
    result.seconds = time.perf_counter() - started
    return result


def with_subscribers(config: Config, engine: Engine, count: int, workdir: Path) -> Config:
    """The configuration with `count` subscribers (bench-1, …) of every published table, their
    state tables installed; unchanged for none."""
    if not count:
        return config
    from publisher.capture.install import published_tables, subscription_ddl
    from publisher.config import SubscriberConfig, SubscriptionConfig

    subscription = SubscriptionConfig(tables=published_tables(config, engine).names)
    subscribers = {f"bench-{i}": SubscriberConfig("all", str(workdir / f"subscriber-{i}")) for i in range(1, count + 1)}
    config = dataclasses.replace(config, subscriptions={"all": subscription}, subscribers=subscribers)
    with engine.begin() as conn:
        for statement in subscription_ddl(config, engine):
            conn.exec_driver_sql(statement)
    return config


def check_out_backlog(spark: SparkSession, engine: Engine, config: Config, subscriber: str) -> DrainResult:
    """One check-out of the whole backlog by `subscriber`, in windows of query_limit events."""
    from publisher.service.checkouts import check_out

    result = DrainResult()
    started = time.perf_counter()
    checked_out = check_out(spark, engine, config, subscriber)
    result.seconds = time.perf_counter() - started
    for window in checked_out.windows:
        result.add(window, sum(spent for stage, spent in window.seconds.items() if "." not in stage))
    log.info("subscriber %s: %d events in %d windows, %.1f s", subscriber, result.events, result.cycles,
             result.seconds)
    return result


def measure_latency(
    spark: SparkSession, engine: Engine, config: Config, workload: Workload, cycles: int, per_cycle: int
) -> Latency:
    """Commit `per_cycle` changes through the triggers, poll once, and time it; `cycles` times."""
    latency = Latency(per_cycle)
    output = Path(config.output.directory)
    for serial in range(cycles):
        change_rows(engine, workload, per_cycle, serial)
        committed = time.time()
        result = run_cycle(spark, engine, config)
        acknowledged = time.time()
        latency.to_acknowledged.append(acknowledged - committed)
        latency.events_seen.append(result.events)
        for stage, spent in result.seconds.items():
            latency.stage_seconds[stage] = latency.stage_seconds.get(stage, 0.0) + spent
        if result.files:
            written = max(os.stat(output / name).st_mtime for name in result.files)
            latency.to_documents.append(written - committed)
    return latency


def count_new(config: Config, engine: Engine) -> int:
    table = event_log_table(config, table_schema(config, engine))
    status = table.c[config.event_log.columns.status]
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(status == Status.NEW.value)).scalar_one())


def format_count(n: float) -> str:
    return f"{n:,.0f}"


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.3f} s" if s < 10 else f"{s:,.1f} s"


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**20:,.1f} MiB"


def format_report(report: BenchReport) -> str:
    """The report as a plain-text table, one measurement per line."""
    o, w, f, r, d, lat = report.options, report.workload, report.floor, report.reference, report.drain, report.latency
    lines: list[tuple[str, str]] = []

    def section(title: str) -> None:
        lines.append(("", ""))
        lines.append((title, ""))

    def row(name: str, value: str) -> None:
        lines.append(("  " + name, value))

    lines.append((
        f"publisher bench: {o.database}, {format_count(o.rows)} rows, {format_count(w.events)} events, "
        f"query_limit {format_count(o.query_limit)}, master {o.master}",
        "",
    ))
    section("workload (real triggers)")
    row("generated", f"{format_count(w.events)} events in {format_seconds(w.generate_seconds)} "
        f"({format_count(w.events / w.generate_seconds if w.generate_seconds else 0)} events/s)")
    row("tables loaded", f"{format_count(w.rows)} rows in {format_seconds(w.load_seconds)}")
    row("backlog", w.backlog.value)
    row("by event type", "  ".join(f"{t}: {format_count(n)}" for t, n in w.by_type.items()))
    row("loopback / malformed", f"{format_count(w.loopback)} / {format_count(w.plan.malformed)}")
    section(f"floor ({o.database} itself)")
    row("read every new row", f"{format_seconds(f.read_seconds)} ({format_count(f.rows)} rows"
        + (f", {format_size(f.bytes_read)})" if f.bytes_read is not None else ")"))
    row("mark them all", f"{format_seconds(f.mark_seconds)} ({format_count(f.marked)} rows, one UPDATE, rolled back)")
    section(f"reference (one event at a time, measured on the first {format_count(r.events)} events)")
    row("events/s", format_count(r.events_per_second))
    row("documents / bytes", f"{format_count(r.documents)} / {format_size(r.bytes_written)}")
    if report.reference_extrapolated_seconds is not None:
        row("extrapolated",
            f"{format_seconds(report.reference_extrapolated_seconds)} for {format_count(w.events)} events")
    section(f"publisher (drain, {d.cycles} cycles: {d.distributed_cycles} as Spark jobs, "
            f"{d.cycles - d.distributed_cycles} in the driver alone)")
    if report.spark_seconds is not None:
        row("SparkSession start", format_seconds(report.spark_seconds))
    if o.warm_up:
        row("warm-up (tiny backlog)", format_seconds(report.warm_up_seconds))
    row("events", f"{format_count(d.events)}  ("
        + "  ".join(f"{s} {format_count(n)}" for s, n in sorted(d.statuses.items())) + ")")
    row("wall time", format_seconds(d.seconds))
    row("events/s end to end", format_count(d.events_per_second))
    row("operations / documents", f"{format_count(d.operations)} / {format_count(d.documents)}")
    row("bytes written", format_size(d.bytes_written))
    if d.change_rows or d.messages:
        row("change-table rows / messages", f"{format_count(d.change_rows)} / {format_count(d.messages)}")
    staged = 0.0
    for stage, spent in d.stage_seconds.items():
        if "." in stage:
            row(f"  {stage.split('.', 1)[1]}", format_seconds(spent) + " (summed over the tasks)")
            continue
        staged += spent
        share = f" ({spent / d.seconds:.0%})" if d.seconds else ""
        row(f"stage {stage}", format_seconds(spent) + share)
    row("outside the stages", format_seconds(max(0.0, d.seconds - staged)))
    for number, sub in enumerate(report.subscribers, start=1):
        section(f"subscriber bench-{number} (one check-out of the backlog in {sub.cycles} windows, before the drain)")
        row("events", f"{format_count(sub.events)}  (" + "  ".join(
            f"{s} {format_count(n)}" for s, n in sorted(sub.statuses.items())) + ", none written)")
        row("wall time", format_seconds(sub.seconds))
        row("events/s end to end", format_count(sub.events_per_second))
        row("time / status mode's time", f"{sub.seconds / d.seconds:,.2f}x" if d.seconds else "-")
        row("time / floor time", f"{sub.seconds / f.seconds:,.1f}x" if f.seconds else "-")
        row("stages", "  ".join(f"{stage} {format_seconds(spent)}" for stage, spent in sub.stage_seconds.items()
                                if "." not in stage))
    section("memory (peak RSS)")
    row("driver (Python)", format_size(report.memory.driver))
    row("JVM", format_size(report.memory.jvm))
    row("Python worker (largest)", f"{format_size(report.memory.python_worker)} "
        f"({report.memory.python_workers_seen} seen)")
    section("ratios")
    row("publisher time / floor time", f"{report.floor_ratio:,.1f}x")
    row("publisher speed / reference speed", f"{report.reference_speedup:,.1f}x")
    section(f"small-poll latency ({len(lat.to_acknowledged)} cycles of {lat.events_per_cycle} events, warm session)")
    for name, values in (("commit -> documents on disk", lat.to_documents),
                         ("commit -> statuses written", lat.to_acknowledged)):
        spread = _spread(values)
        row(name, f"median {format_seconds(spread['median'])}  p95 {format_seconds(spread['p95'])}")
    cycles = max(1, len(lat.to_acknowledged))
    row("per cycle, by stage", "  ".join(
        f"{stage} {spent / cycles * 1000:.1f}" for stage, spent in lat.stage_seconds.items() if "." not in stage
    ) + " (ms)")
    lines.append(("", ""))
    lines.append(("new rows left in the event log", format_count(report.left_new)))
    width = max(len(name) for name, value in lines if value) + 2
    return "\n".join(f"{name:<{width}}{value}".rstrip() if value else name for name, value in lines)
