"""Prometheus metrics: `publisher run` serves them over HTTP, `publisher stats --prometheus`
prints the event log's once (docs: guides/metrics.md).

Two sources. What the cycles did is counted by the loop as each cycle ends, per reader of the
event log (the status mode, or a subscriber): counters that live as long as the process. What
the event log holds is read from the database at scrape time, with one GROUP BY, so it is right
whoever changed the rows (a trigger, another publisher, a person setting `E` rows back to `N`)
and right from the first scrape after a restart. Scrapes are bounded: they read through an engine
of their own (no pool, so never the cycles' connections), one at a time, and one read answers
every scrape for EVENT_LOG_CACHE_SECONDS.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from publisher.config import STATUS_MODE, Config, ConfigError, MetricsConfig, Reader
from publisher.dialects import dialect_of
from publisher.model.events import Status
from publisher.model.operation import OperationKind
from publisher.pipeline.subscribers import subscriber_backlog
from publisher.service.event_groups import Group, loopback_groups, read_groups, summed, utc_of
from publisher.service.stats import triggerless_state
from publisher.snapshots.state import RecordedSnapshot, recorded_snapshots

log = logging.getLogger("publisher")
ACKNOWLEDGED = (Status.SUCCESS, Status.WARNING, Status.ERROR)
"""The statuses a cycle gives the rows it read."""
STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Seconds: a small cycle's stages take milliseconds, a large one's minutes."""
EVENT_LOG_CACHE_SECONDS = 5.0
"""How long one read of the event log answers scrapes. Each read is a GROUP BY over the whole
table (with one writer at a time, `Dialect.begin_alone`, it also holds a read lock that delays a
cycle's acknowledgement), so a burst of
scrapes (several Prometheus servers, a dashboard refreshing, someone with curl) must cost one
read; 5 s is well under any scrape interval, so no scrape sees older figures than it would at
its own pace."""
SCRAPE_WAIT_SECONDS = 10.0
"""How long a scrape waits for another scrape's read of the event log before it answers
`publisher_event_log_up 0` instead: a hung database must not pile up scrape threads."""
SCRAPE_TIMEOUT = 5.0
"""Seconds a scrape's connection waits for a lock, where the driver lets it say
(`Dialect.connect_args`; the cycles' wait 30)."""


class EventLogCollector(Collector):
    """The event log as it is now, read at scrape time. `tolerant`: a database that cannot be
    read gives `publisher_event_log_up 0` instead of failing the scrape (a server keeps going;
    `stats --prometheus` fails instead), and is logged once when it starts failing and once
    when it can be read again, not at every scrape.

    Reads go through `scrape_engine(engine)`, never the cycles' pool; one scrape reads at a
    time, and its figures answer every scrape for EVENT_LOG_CACHE_SECONDS."""

    def __init__(self, config: Config, engine: Engine, tolerant: bool = True) -> None:
        self.config = config
        self.engine = scrape_engine(engine)
        self.tolerant = tolerant
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None
        self._failing = False

    def collect(self) -> Iterator[Metric]:
        if not self._lock.acquire(timeout=SCRAPE_WAIT_SECONDS):
            yield _up(0)
            return
        try:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= EVENT_LOG_CACHE_SECONDS:
                self._cached = (now, self._scrape())
            found = self._cached[1]
        finally:
            self._lock.release()
        yield from found

    def _scrape(self) -> list[Metric]:
        try:
            metrics = list(self._read())
        except SQLAlchemyError as exc:
            if not self.tolerant:
                raise
            if not self._failing:
                log.warning("metrics: cannot read the event log (said once until it can be read again): %s",
                            self.config.database.redact(str(exc)))
            self._failing = True
            return [_up(0)]
        if self._failing:
            log.warning("metrics: the event log can be read again")
        self._failing = False
        return [_up(1), *metrics]

    def _read(self) -> Iterator[Metric]:
        groups = read_groups(self.config, self.engine)
        rows = GaugeMetricFamily("publisher_event_log_rows", "Rows of the event log, by status and table",
                                 labels=["status", "table"])
        for (status, table), count in summed(((g.status, g.table), g.count) for g in groups).items():
            rows.add_metric([status, table], count)
        yield rows
        yield _per_perpetrator("publisher_rejected_rows", "Rows of the event log marked E (rejected), by table and "
                               "perpetrator", (g for g in groups if g.status == Status.ERROR.value))
        yield _per_perpetrator(
            "publisher_loopback_rows", "Rows of the event log the status mode passed over as loopback (S, logged by "
            "the publisher's own user), by table and perpetrator", loopback_groups(self.config, self.engine, groups))
        waiting = GaugeMetricFamily("publisher_waiting_events",
                                    "Events waiting for the status mode (N rows) or for a subscriber's next check-out",
                                    labels=["subscriber"])
        lag = GaugeMetricFamily("publisher_lag_seconds", "Age of the oldest event waiting for the status mode (the "
                                "oldest N row) or for a subscriber; 0 when none waits", labels=["subscriber"])
        if self.config.publisher.status_mode:
            new = [g for g in groups if g.status == Status.NEW.value]
            waiting.add_metric([STATUS_MODE.key], sum(g.count for g in new))
            lag.add_metric([STATUS_MODE.key], _age(min((g.oldest for g in new if g.oldest), default=None)))
        for name in sorted(self.config.subscribers):
            found = subscriber_backlog(self.config, self.engine, name)
            waiting.add_metric([name], found.waiting)
            lag.add_metric([name], _age(utc_of(found.oldest_waiting)))
        yield waiting
        yield lag
        yield from _snapshots(recorded_snapshots(self.config, self.engine))


class TriggerlessCollector(Collector):
    """A triggerless publisher's state, read at scrape time from its files (`stats.triggerless_state`):
    the generation the consumer holds, how old it is, and the rows of each table in it."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def collect(self) -> Iterator[Metric]:
        readers = [STATUS_MODE, *(Reader(name) for name in sorted(self.config.subscribers))]
        generation = GaugeMetricFamily("publisher_triggerless_generation", "The generation of the state the "
                                       "reader's consumer holds (0: none kept yet)", labels=["subscriber"])
        age = GaugeMetricFamily("publisher_triggerless_state_age_seconds",
                                "Seconds since the reader's state was last kept (a cycle published what changed)",
                                labels=["subscriber"])
        rows = GaugeMetricFamily("publisher_triggerless_rows", "Rows of each table in the reader's state (a child "
                                 "table's under its class and attribute)", labels=["subscriber", "table", "attribute"])
        for reader in readers:
            state = triggerless_state(self.config, reader)
            generation.add_metric([reader.key], state["generation"] or 0)
            if state["kept_age_seconds"] is not None:  # absent before the first state: no age to alert on
                age.add_metric([reader.key], state["kept_age_seconds"])
            for name, table in state["tables"].items():
                rows.add_metric([reader.key, name, ""], table["rows"])
                for attribute, child in table["attributes"].items():
                    rows.add_metric([reader.key, name, attribute], child["rows"])
        yield from (generation, age, rows)


def _snapshots(recorded: Iterable[RecordedSnapshot]) -> Iterator[GaugeMetricFamily]:
    """Each table's last snapshot per reader: rows logged of the rows it selected, and whether
    it is still under way."""
    labels = ["subscriber", "table"]
    logged = GaugeMetricFamily("publisher_snapshot_rows_logged", "Rows a table's last snapshot has logged so far",
                               labels=labels)
    total = GaugeMetricFamily("publisher_snapshot_rows_total", "Rows a table's last snapshot selected when it began",
                              labels=labels)
    under_way = GaugeMetricFamily("publisher_snapshot_under_way", "1 while a table's last snapshot is not finished "
                                  "(logging, or stopped before its end), else 0", labels=labels)
    for snapshot in recorded:
        key = [snapshot.reader, snapshot.table]
        logged.add_metric(key, snapshot.rows_logged)
        total.add_metric(key, snapshot.rows_total)
        under_way.add_metric(key, 1 if snapshot.under_way else 0)
    yield from (logged, total, under_way)


def _up(value: int) -> GaugeMetricFamily:
    up = GaugeMetricFamily("publisher_event_log_up", "1 if the last scrape could read the event log, else 0")
    up.add_metric([], value)
    return up


def scrape_engine(engine: Engine) -> Engine:
    """An engine for scrapes, to the same database as `engine` but sharing none of its
    connections: without a pool, so a scrape holds one connection while it reads and none
    after (with the collector's lock, at most one at a time)."""
    connect_args = dialect_of(engine).connect_args(SCRAPE_TIMEOUT)
    return create_engine(engine.url, poolclass=NullPool, connect_args=connect_args)


def _per_perpetrator(name: str, documentation: str, groups: Iterable[Group]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["table", "perpetrator"])
    for (table, perpetrator), count in summed(((g.table, g.perpetrator), g.count) for g in groups).items():
        family.add_metric([table, perpetrator], count)
    return family


def _age(time_: dt.datetime | None) -> float:
    return 0.0 if time_ is None else max(0.0, (dt.datetime.now(dt.UTC) - time_).total_seconds())


class PublisherMetrics:
    """The registry of one `publisher run`: the event log's gauges and every reader's cycle metrics."""

    def __init__(self, config: Config, engine: Engine) -> None:
        self.registry = event_log_registry(config, engine)
        labels = ["subscriber"]
        self.events = Counter("publisher_events_read", "Events read from the event log by cycles",
                              labels, registry=self.registry)
        self.operations = Counter("publisher_operations", "Operations published, by kind",
                                  [*labels, "kind"], registry=self.registry)
        self.rows = Counter("publisher_acknowledged_rows", "Rows acknowledged by cycles, by the status they were given "
                            "(E: rejected)", [*labels, "status"], registry=self.registry)
        self.documents = Counter("publisher_documents", "XDS documents written", labels, registry=self.registry)
        self.isolated = Counter("publisher_isolated_rows", "Rows a stage failed on twice, rejected so that the rows "
                                "after them publish", labels, registry=self.registry)
        self.stages = Histogram("publisher_cycle_stage_duration_seconds", "Time a cycle spent in each stage",
                                [*labels, "stage"], buckets=STAGE_BUCKETS, registry=self.registry)
        self.last_success = Gauge("publisher_last_success_timestamp_seconds",
                                  "When the last successful cycle ended (Unix time)", labels, registry=self.registry)
        self.failures = Gauge("publisher_consecutive_failures", "Cycles failed in a row since the last success",
                              labels, registry=self.registry)
        self.lock = Gauge("publisher_lock_held", "1 while this process holds the reader's lock, else 0",
                          labels, registry=self.registry)

    def reader(self, reader: Reader) -> ReaderMetrics:
        """`reader`'s series, labelled with its key ("" for the status mode)."""
        return ReaderMetrics(self, reader.key)

    @contextlib.contextmanager
    def serving(self, settings: MetricsConfig) -> Iterator[None]:
        """Listen on metrics.address:metrics.port while the block runs; however it ends, the
        server stops and its socket is closed, so the port is free again."""
        try:
            server, thread = start_http_server(settings.port, settings.address, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"metrics.port: cannot serve metrics on {settings.address}:{settings.port}: "
                              f"{exc.strerror or exc}") from None
        log.info("serving metrics on http://%s:%d/metrics", settings.address, settings.port)
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class ReaderMetrics:
    """One reader's series, labelled once; created up front so that every series reads 0
    before the first cycle rather than being absent, except the time of the last success,
    which has no value before there is one."""

    def __init__(self, metrics: PublisherMetrics, subscriber: str) -> None:
        self.metrics = metrics
        self.subscriber = subscriber
        self.events = metrics.events.labels(subscriber)
        self.operations = {kind.value: metrics.operations.labels(subscriber, kind.value) for kind in OperationKind}
        self.rows = {status.value: metrics.rows.labels(subscriber, status.value) for status in ACKNOWLEDGED}
        self.documents = metrics.documents.labels(subscriber)
        self.isolated = metrics.isolated.labels(subscriber)
        self.failures = metrics.failures.labels(subscriber)
        self.lock = metrics.lock.labels(subscriber)
        self.failures.set(0)
        self.lock.set(0)

    def cycle_succeeded(self, result: Any) -> None:
        """`result`: a cycle's, or a check-out's with its windows."""
        for window in getattr(result, "windows", [result]):
            self.events.inc(window.events)
            for kind, count in window.operation_kinds.items():
                self.operations.get(kind, self.metrics.operations.labels(self.subscriber, kind)).inc(count)
            for status, count in window.statuses.items():
                self.rows.get(status, self.metrics.rows.labels(self.subscriber, status)).inc(count)
            self.documents.inc(window.documents)
            isolation = getattr(window, "isolation", None)
            if isolation is not None:
                self.isolated.inc(len(isolation.record_ids))
            for stage, seconds in window.seconds.items():
                if "." not in stage:
                    self.metrics.stages.labels(self.subscriber, stage).observe(seconds)
        self.failures.set(0)
        # labelled at the first success only: before it the series is absent, not a misleading 0
        self.metrics.last_success.labels(self.subscriber).set(time.time())

    def cycle_failed(self, failures: int) -> None:
        self.failures.set(failures)

    def lock_held(self, held: bool) -> None:
        self.lock.set(1 if held else 0)


def event_log_registry(config: Config, engine: Engine, tolerant: bool = True) -> CollectorRegistry:
    """A registry of its own (not the process-wide default) with the event log's gauges (a
    triggerless publisher's: its state's)."""
    registry = CollectorRegistry()
    collector = TriggerlessCollector(config) if config.triggerless else EventLogCollector(config, engine, tolerant)
    registry.register(collector)
    return registry


def exposition(config: Config, engine: Engine) -> str:
    """The event log's gauges once, in the Prometheus text format (`stats --prometheus`)."""
    return generate_latest(event_log_registry(config, engine, tolerant=False)).decode("utf-8")

