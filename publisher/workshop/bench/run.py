"""The benchmark run: generate → floor → reference sample → cold poll → drain → small-poll
latency → report.

The drain is what `publisher run` does with a backlog: cycles of `query_limit` events, one warm
SparkSession, until no `N` row is left. Memory is the peak resident size of the driver and of
the processes Spark started (the JVM, the Python workers), sampled from /proc while they run.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import SparkSession
from sqlalchemy import Engine

from publisher.config import Config, SparkConfig
from publisher.database import connect
from publisher.databases.workbench import Workbench
from publisher.workshop.bench.brokered import BrokerPair, broker_summary, drain_pairs, median_ratio
from publisher.workshop.bench.cold import ColdPoll, cold_poll, last_record_id, renew_backlog
from publisher.workshop.bench.drain import DrainResult, check_out_backlog, count_new, drain, measure_latency
from publisher.workshop.bench.floor import Floor, measure_floor
from publisher.workshop.bench.mix import MIN_EVENTS, MIN_ROWS, Backlog, WorkloadError
from publisher.workshop.bench.reference import ReferenceResult, run_reference
from publisher.workshop.bench.sampling import Latency, Memory, ProcessSampler
from publisher.workshop.bench.scratch import work_directory
from publisher.workshop.bench.workload import Workload, discard, generate
from publisher.workshop.bench.writers import DEFAULT_SCHEMA
from publisher.workshop.databases import draining, named, of_url

log = logging.getLogger("publisher")


@dataclass(frozen=True)
class BenchOptions:
    database: str | None = None
    """The database's name; None: the `url`'s database, else the first in the registry that makes
    the workload."""
    url: str | None = None
    """Default: the database's test server (`Workbench.bench_url`), or a file in the work directory."""
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
    """Where the documents (and a database file) go; default: a temporary directory, removed afterwards."""
    cluster: bool = False
    """Start a standalone master and worker on loopback and drain on them instead of `master`."""
    formats: bool = False
    """Write change tables and messages (with trail headers) beside the XDS documents."""
    backlog: Backlog = Backlog.MIX
    """The generated backlog as the triggers logged it, or rewritten so every row is E or W."""
    subscribers: int = 0
    """Subscribers that each check the whole backlog out, timed before the status mode's drain."""
    cold: bool = True
    """Time a `publisher poll` process started cold on the whole backlog first (`bench.cold`)."""
    small_cycle_events: int | None = None
    """`spark.small_cycle_events` of the cold poll and the drain; None: the publisher's default."""
    broker: str | None = None
    """With `formats`: a Kafka broker the backlog's messages go to in a second drain, timed beside the first."""
    encoding: Literal["json", "avro"] = "json"
    """What the messages go to `broker` as."""
    broker_pairs: int = 1
    """With `broker`: how many pairs of drains (files only, then to the broker) to time."""
    transaction_events: int | None = None
    """Events per transaction of the generated backlog; None: the workload's ROUNDS transactions."""
    formats_beside: bool = False
    """After the drain, set the backlog back to new and drain it again with change tables and
    messages on: what the formats cost on the same log, against the drain without them."""


def with_broker(config: Config, broker: str, encoding: Literal["json", "avro"]) -> Config:
    """The configuration with its messages also sent to `broker`, in `encoding`."""
    messages = dataclasses.replace(config.output.messages, broker=broker, encoding=encoding)
    return dataclasses.replace(config, output=dataclasses.replace(config.output, messages=messages))


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
    cold: ColdPoll | None = None
    """A poll process started cold on the same backlog, before the warm drain."""
    broker_pairs: list[BrokerPair] = field(default_factory=list)
    """With `options.broker`: the same backlog drained again in pairs, files only then also to the broker."""
    formatted: DrainResult | None = None
    """With `options.formats_beside`: the same backlog drained again with change tables and messages."""

    @property
    def formats_ratio(self) -> float | None:
        """How many times the drain's time the same backlog's drain with the formats on took."""
        if self.formatted is None or not self.drain.seconds:
            return None
        return self.formatted.seconds / self.drain.seconds

    @property
    def broker_ratio(self) -> float | None:
        """How many times the files-only drain's time the drain sending to the broker took, the pairs' median."""
        return median_ratio(self.broker_pairs)

    @property
    def floor_ratio(self) -> float:
        """How many times the floor's time the publisher needs."""
        return self.drain.seconds / self.floor.seconds if self.floor.seconds else 0.0

    @property
    def cold_ratio(self) -> float | None:
        """How many times the floor's time a cold poll process needs, from its start to its exit."""
        return self.cold.seconds / self.floor.seconds if self.cold is not None and self.floor.seconds else None

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
            "database": self.workload.dialect,
            "rows": self.options.rows,
            "events": self.options.events,
            "query_limit": self.options.query_limit,
            "master": self.options.master,
            "small_cycle_events": self.options.small_cycle_events,
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
            "cold": None if self.cold is None else self.cold.summary(),
            "cold_floor_ratio": _rounded(self.cold_ratio),
            "reference_speedup": round(self.reference_speedup, 3),
            "broker": broker_summary(self.options.encoding, self.broker_pairs) if self.broker_pairs else None,
            "formats_beside": None if self.formatted is None else {
                "drain": self.formatted.summary(), "ratio": _rounded(self.formats_ratio)},
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_benchmark(options: BenchOptions, spark: SparkSession | None = None) -> BenchReport:
    """Run every phase; `spark` is reused when given, else one session is built and timed (and,
    with `options.cluster`, a standalone cluster started for it and stopped afterwards)."""
    with work_directory(options.workdir) as workdir:
        if not options.cluster or spark is not None:
            return _run(options, workdir, spark, {})
        from publisher.workshop.bench.cluster import StandaloneCluster, spark_conf_for

        with StandaloneCluster(workdir / "cluster") as cluster:
            log.info("standalone cluster up at %s", cluster.master_url)
            options = dataclasses.replace(options, master=cluster.master_url)
            try:
                return _run(options, workdir, None, spark_conf_for(cluster), cluster.daemon_pids())
            finally:
                active = SparkSession.getActiveSession()
                if active is not None:
                    active.stop()


def _run(
    options: BenchOptions, workdir: Path, spark: SparkSession | None, conf: dict[str, str], roots: tuple[int, ...] = ()
) -> BenchReport:
    database = bench_database(options)
    url = _scratch_url(database, options.url, workdir / "bench.db")
    log.info("generating %d events on %d rows (%s)", options.events, options.rows, database.name)
    workload = generate(database.name, url, options.rows, options.events, options.schema,
                        backlog=options.backlog, transaction_events=options.transaction_events)
    log.info("generated %d events in %.1f s", workload.events, workload.generate_seconds)
    config = workload.config(workdir / "out", options.query_limit, options.batch_size, options.master)
    config = dataclasses.replace(config, spark=dataclasses.replace(
        config.spark, small_cycle_events=options.small_cycle_events))
    if options.formats:
        config = with_formats(config)
    engine = connect(config)
    try:
        floor = measure_floor(config, engine)
        log.info("floor: read %d rows in %.2f s, marked them in %.2f s", floor.rows, floor.read_seconds,
                 floor.mark_seconds)
        reference = run_reference(config, engine, options.reference_sample, workdir / "reference")
        log.info("reference: %d events one at a time in %.1f s", reference.events, reference.seconds)
        cold = None
        generated = last_record_id(config, engine)
        if options.cold:
            cold = cold_poll(config, workdir, workload.events)
            log.info("cold poll: %d events in %.1f s, %.1f s of it before the cycle", workload.events, cold.seconds,
                     cold.before_cycle)
            renew_backlog(config, engine, generated)
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
        pairs = []
        if options.broker:
            pairs = drain_pairs(spark, engine, config, with_broker(config, options.broker, options.encoding),
                                workload.events, generated, options.broker_pairs)
        formatted = None
        if options.formats_beside:
            renew_backlog(config, engine, generated)
            formatted = drain(spark, engine, with_formats(config), workload.events, "drain with the formats")
    finally:
        engine.dispose()
    return BenchReport(
        options, workload, floor, reference, drained, latency, sampler.memory(), left, checked_out, spark_seconds,
        warm_up_seconds, cold, pairs, formatted,
    )


def bench_database(options: BenchOptions) -> Workbench:
    """The database the options name, else the one of their URL, else the first that makes the workload."""
    if options.url is None and options.database is None:
        return draining()[0]
    try:
        found = named(options.database) if options.database is not None else of_url(str(options.url))
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None
    return found


def _scratch_url(database: Workbench, given: str | None, file: Path) -> str:
    """`given`, else the database's server for the benchmark, else a file of its own."""
    url = given or database.bench_url or database.file_url(file)
    if url is None:
        raise WorkloadError(f"url: {database.name} has no default; name one with --url")
    return url


def warm_up(spark: SparkSession, options: BenchOptions, workdir: Path) -> None:
    """Drain a tiny backlog of the same dialect first, through Spark jobs even though it is small,
    so that the drain measures a warm session: Python workers started, code paths compiled, as in
    a `publisher run` that has been up a while."""
    database = bench_database(options)
    url = _scratch_url(database, database.file_url(workdir / "warm-up.db") or options.url, workdir / "warm-up.db")
    workload = generate(database.name, url, MIN_ROWS, MIN_EVENTS, f"{options.schema}_warm_up")
    config = workload.config(workdir / "warm-up", options.query_limit, options.batch_size, options.master)
    config = dataclasses.replace(config, spark=dataclasses.replace(config.spark, small_cycle_events=0))
    if options.formats or options.formats_beside:
        config = with_formats(config)
    if options.broker:
        config = with_broker(config, options.broker, options.encoding)
    engine = connect(config)
    try:
        drain(spark, engine, config, workload.events, "warm-up")
    finally:
        engine.dispose()
        discard(workload)


def start_spark(config: Config, conf: dict[str, str]) -> SparkSession:
    from publisher.pipeline.spark import get_spark

    return get_spark(SparkConfig(master=config.spark.master, conf=conf))


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
