"""`publisher run`: poll at the interval or times of day, keep Spark warm, stop cleanly on a signal.

Loop policy lives here; the work of one cycle lives in `cycle.run_cycle`.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from publisher.config import STATUS_MODE, Config, Reader
from publisher.config.checks import parse_time_of_day
from publisher.errors import TransientError, root_cause
from publisher.model.xds import build_heartbeat
from publisher.outputs.cycle_files import document_name, next_cycle_number
from publisher.outputs.durable import write_atomically
from publisher.pipeline.cycle import SparkProvider, run_cycle
from publisher.service.loopback import LoopbackWatch, loopback_said
from publisher.service.migrate import resync_after_cycle

if TYPE_CHECKING:
    from publisher.locking.lock import PublisherLock
    from publisher.service.metrics import PublisherMetrics, ReaderMetrics

log = logging.getLogger("publisher")
MAX_BACKOFF_SECONDS = 300.0


def seconds_until_next(config: Config, now: dt.datetime) -> float:
    """Idle time before the next cycle: the interval, or until the next configured time of day."""
    times = config.publisher.time_of_day
    if not times:
        return config.publisher.polling_interval
    candidates = []
    for text in times:
        at = dt.datetime.combine(now.date(), parse_time_of_day(text))
        if at <= now:
            at += dt.timedelta(days=1)
        candidates.append(at)
    return (min(candidates) - now).total_seconds()


def backoff_seconds(config: Config, failures: int) -> float:
    """The polling interval, doubled per consecutive failure, at most MAX_BACKOFF_SECONDS."""
    doublings = min(max(failures - 1, 0), 64)  # past that the bound holds; 2 ** 1024 is no float
    return float(min(config.publisher.polling_interval * 2 ** doublings, MAX_BACKOFF_SECONDS))


def publish_heartbeat(directory: Path) -> str:
    """A heartbeat document, named like any other so it sorts in publication order."""
    name = document_name(next_cycle_number(directory), 0)
    write_atomically(directory / name, build_heartbeat())
    return name


def install_stop_handlers(stops: list[threading.Event]) -> None:
    """SIGINT and SIGTERM ask the loop to stop after the current cycle instead of killing it.

    Every event in `stops` (which may change while the process runs) is set.
    """

    def handler(signum: int, _frame: object) -> None:
        log.info("received %s: finishing the current cycle", signal.Signals(signum).name)
        for stop in list(stops):
            stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


class Polled(Protocol):
    """What one turn of the loop did: a cycle, or a subscriber's check-out."""

    @property
    def idle(self) -> bool: ...

    @property
    def events(self) -> int: ...

    def summary(self) -> dict[str, Any]: ...


def run_forever(
    spark: SparkProvider,
    engine: Engine,
    config: Config,
    stop: threading.Event,
    cycle: Callable[[SparkProvider, Engine, Config], Polled] = run_cycle,
    output: Path | None = None,
    metrics: ReaderMetrics | None = None,
    reader: Reader | None = None,
) -> None:
    """Poll until `stop` is set; a failing cycle acknowledges nothing and is retried with backoff.
    `output`: where heartbeats go (default: output.directory); `metrics`: told of each cycle;
    `reader`: whose lock is held, paid after each cycle what a migration owes it (none where
    nothing is captured)."""
    output = output or Path(config.output.directory)
    heartbeat = config.publisher.heartbeat_interval * 60
    last_publication = time.monotonic()
    failures = 0
    loopback = LoopbackWatch()
    while not stop.is_set():
        try:
            result = cycle(spark, engine, config)
        except (TransientError, SQLAlchemyError, OSError) as exc:
            failures += 1
            if metrics is not None:
                metrics.cycle_failed(failures)
            wait = backoff_seconds(config, failures)
            log.error("cycle failed, nothing acknowledged, retrying in %.0f s: %s", wait, root_cause(exc))
            stop.wait(wait)
            continue
        failures = 0
        if reader is not None:
            resync_after_cycle(config, engine, reader)
        if metrics is not None:
            metrics.cycle_succeeded(result)
        if not result.idle:
            last_publication = time.monotonic()
            kind = "check-out" if hasattr(result, "windows") else "cycle"
            summary = result.summary()
            log.info("%s %s", kind, json.dumps(summary), extra={"brief": kind, "fields": summary})
            passed = loopback.after(result)
            if passed:
                cycles = len(loopback.recent)
                of = f"of {loopback.events()} read by the last {cycles} {'cycle' if cycles == 1 else 'cycles'}"
                log.warning("%s", loopback_said(config, engine, passed, of))
        elif heartbeat and time.monotonic() - last_publication >= heartbeat:
            log.info("heartbeat %s", publish_heartbeat(output))
            last_publication = time.monotonic()
        if result.events >= config.publisher.query_limit:
            continue
        stop.wait(seconds_until_next(config, dt.datetime.now()))


def start_said(config: Config, config_path: str, readers: Sequence[Reader]) -> str:
    """What `run` says before anything that takes time: Spark's start alone takes seconds."""
    spark = "Spark starts before the first cycle" if not config.triggerless else "Spark starts when a cycle needs it"
    return (f"starting: configuration {config_path or '(defaults)'}, database {config.database.display_url()}, "
            f"for {', '.join(map(str, readers))}; {spark}")


def serve(
    spark: Callable[[], Any], engine: Engine, config: Config, stop: threading.Event, reader: Reader = STATUS_MODE,
    metrics: ReaderMetrics | None = None, started: float | None = None,
) -> None:
    """Publish while holding `reader`'s lock (the event log's, or a subscriber's check-outs'); a lost lock
    (say, the database restarted) pauses publishing until the lock is ours again, instead of
    ending. Several of these run side by side in one process, one per reader of the log.
    `metrics`: this reader's, told of the lock and of each cycle; `started`: when the process
    started (`time.monotonic`), to say how long the start took before the first cycle."""
    from publisher.locking.lock import PublisherLock
    from publisher.service.checkouts import check_out

    output = Path(reader.output(config))
    subscriber = reader.subscriber
    cycle: Callable[[SparkProvider, Engine, Config], Polled] = run_cycle
    if subscriber is not None:
        def cycle(provider: SparkProvider, engine: Engine, config: Config) -> Polled:
            return check_out(provider, engine, config, subscriber)
    failures = 0
    while not stop.is_set():
        session = _following(stop)
        try:
            with PublisherLock(config, session, reader=reader) as lock:
                if lock.held:
                    failures = 0
                    session_spark = spark()
                    took = "" if started is None else f"; the first cycle starts, {time.monotonic() - started:.1f} s " \
                        "after the start"
                    started = None
                    log.info("publishing %s from %s for %s to %s%s", config.event_log.table,
                             config.database.display_url(), reader, output, took)
                    if config.publisher.initial_snapshot:
                        _initial_snapshot(engine, config, output, reader, lock, session_spark)
                    if metrics is not None:
                        metrics.lock_held(True)
                    try:
                        run_forever(session_spark, engine, config, session, cycle, output, metrics, reader)
                    finally:
                        if metrics is not None:
                            metrics.lock_held(False)
        except SQLAlchemyError as exc:
            failures += 1
            wait = backoff_seconds(config, failures)
            log.error("cannot take the lock of %s, retrying in %.0f s: %s", reader, wait, root_cause(exc))
            stop.wait(wait)
            continue
        if not lock.lost:
            break
        log.warning("publishing for %s paused until its lock is ours again", reader)


def _initial_snapshot(engine: Engine, config: Config, output: Path, reader: Reader, lock: PublisherLock,
                      spark: Any) -> None:
    from publisher.snapshots.snapshot import ProgressLines, initial_snapshot

    done = initial_snapshot(config, engine, output, reader, ProgressLines(log.info), lambda: lock.lost, lambda: spark)
    if done is not None:
        rows = sum(t.rows for t in done.tables.values())
        written = sum(t.published for t in done.tables.values())
        log.info("initial snapshot for %s: %d rows of %d tables, %d written directly, %d logged", reader, rows,
                 len(done.tables), written, rows - written)


def _following(stop: threading.Event) -> threading.Event:
    """An event of its own (a lock sets it when lost) that is also set once `stop` is."""
    session = threading.Event()

    def follow() -> None:
        stop.wait()
        session.set()

    threading.Thread(target=follow, name="publisher-stop", daemon=True).start()
    return session


def serve_readers(
    config: Config, engine: Engine, readers: Sequence[Reader], metrics: PublisherMetrics | None = None,
    started: float | None = None,
) -> list[str]:
    """Serve every reader (the status mode, subscribers) side by side until a signal
    stops them, sharing one Spark session started when the first needs it; one failing does not
    stop the others. Returns why each reader that failed stopped."""
    def serve_reader(reader: Reader, spark: Callable[[], Any], stop: threading.Event) -> None:
        serve(spark, engine, config, stop, reader, None if metrics is None else metrics.reader(reader), started)

    return side_by_side(config, readers, serve_reader)


def serve_triggerless(config: Config, engine: Engine, readers: Sequence[Reader],
                      metrics: PublisherMetrics | None = None) -> list[str]:
    """Compare the tables for each reader (the status mode, subscribers: a state each, in its
    output directory) at the interval or times of day until a signal stops them, each holding
    its state's lock; one failing does not stop the others. Returns why each that failed stopped.
    `metrics`: told of the locks and of each cycle."""
    def serve_reader(reader: Reader, spark: Callable[[], Any], stop: threading.Event) -> None:
        _compare_forever(config, engine, reader, spark, stop, None if metrics is None else metrics.reader(reader))

    return side_by_side(config, readers, serve_reader)


def side_by_side(config: Config, readers: Sequence[Reader],
                 serve_reader: Callable[[Reader, Callable[[], Any], threading.Event], None]) -> list[str]:
    """`serve_reader` of each reader on a thread of its own until a signal stops them, sharing
    one Spark session started when the first needs it; one failing does not stop the others.
    Returns why each reader that failed stopped."""
    from publisher.pipeline.spark import get_spark

    stop = threading.Event()
    install_stop_handlers([stop])
    started = threading.Lock()
    spark: list[Any] = []

    def warm_spark() -> Any:
        with started:
            if not spark:
                spark.append(get_spark(config.spark))
            return spark[0]

    failed: list[str] = []

    def serve_one(reader: Reader) -> None:
        try:
            serve_reader(reader, warm_spark, stop)
        except Exception as exc:  # one reader's failure must not end the others
            reason = config.database.redact(str(exc))
            log.error("%s stopped: %s", reader, reason)
            failed.append(reason if len(readers) == 1 else f"{reader} stopped: {reason}")

    threads = [threading.Thread(target=serve_one, args=(reader,), name=f"publisher-{reader.subscriber or 'status'}",
                                daemon=True) for reader in readers]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=0.5)
    return failed


def _compare_forever(config: Config, engine: Engine, reader: Reader, spark: Callable[[], Any],
                     stop: threading.Event, metrics: ReaderMetrics | None) -> None:
    from publisher.triggerless.cycle import run_comparison_cycle
    from publisher.triggerless.state import state_lock

    output = Path(reader.output(config))
    with state_lock(output, config.publisher.when_locked == "wait"):
        log.info("publishing %s from %s by comparing them, for %s to %s", ", ".join(config.publisher.tables),
                 config.database.display_url(), reader, output)
        if metrics is not None:
            metrics.lock_held(True)
        try:
            run_forever(spark, engine, config, stop,
                        lambda _spark, e, c: run_comparison_cycle(spark, e, c, reader), output, metrics)
        finally:
            if metrics is not None:
                metrics.lock_held(False)
