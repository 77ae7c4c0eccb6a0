"""`publisher bench`: which benchmark the arguments ask for, on which database, and its report.

A bad choice of arguments is a BenchArgumentError (exit 2); a database the benchmark cannot
use, a BenchUnavailableError (exit 1).
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


class BenchArgumentError(ValueError):
    """The arguments ask for a benchmark that cannot run as asked."""


class BenchUnavailableError(RuntimeError):
    """The database the benchmark needs cannot be used."""


def run(args: argparse.Namespace) -> int:
    from publisher.workshop.bench.mix import Backlog, WorkloadError
    from publisher.workshop.bench.report import format_report
    from publisher.workshop.bench.run import BenchOptions, run_benchmark
    from publisher.workshop.databases import draining, names

    chosen = [name for name in ("targets", "capture", "snapshot", "triggerless") if getattr(args, name)]
    if len(chosen) > 1:
        raise BenchArgumentError(f"bench: --{' and --'.join(chosen)} measure different things; choose one")
    _check_broker(args, chosen)
    if args.targets:
        return _bench_targets(args)
    if args.triggerless:
        return _bench_triggerless(args)
    if args.capture:
        return _bench_capture(args)
    if args.snapshot_logged and not args.snapshot:
        raise BenchArgumentError("bench: --snapshot-logged measures a snapshot's logged path; it needs --snapshot")
    if args.snapshot:
        return _bench_snapshot(args)
    able = names(draining())
    database = args.database or _database_of_url(args.url, able[0])
    if database not in able:
        raise BenchArgumentError(f"bench: --database {database} measures only --capture")
    options = BenchOptions(
        database=database, url=args.url, rows=args.rows or 100_000, events=args.events, query_limit=args.query_limit,
        latency_cycles=args.latency_cycles, reference_sample=args.reference_sample, master=args.master,
        cluster=args.cluster, formats=args.formats, backlog=Backlog(args.backlog), subscribers=args.subscribers,
        cold=args.cold, small_cycle_events=args.small_cycle_events, broker=args.broker,
        encoding=args.encoding or "json", broker_pairs=args.repeat, transaction_events=args.transaction_events,
    )
    try:
        report = run_benchmark(options)
    except WorkloadError as exc:
        raise BenchArgumentError(str(exc)) from None
    print(json.dumps(report.summary()) if args.json else format_report(report))
    return 0


def _check_broker(args: argparse.Namespace, chosen: list[str]) -> None:
    """--broker measures the drain's messages sent to Kafka: it needs --formats and a kafka:// URL."""
    from publisher.config.brokers import KAFKA_URL
    from publisher.config.database import mask_url

    if args.encoding and not args.broker:
        raise BenchArgumentError("bench --encoding: the encoding of the messages sent to a broker; it needs --broker")
    if args.repeat != 1 and not args.broker:
        raise BenchArgumentError("bench --repeat: repeats the pairs of drains that --broker times; it needs --broker")
    if not args.broker:
        return
    if chosen:
        raise BenchArgumentError(f"bench --broker: measures the drain's messages sent to a broker, not --{chosen[0]}")
    if not args.formats:
        raise BenchArgumentError("bench --broker: the messages it sends are those of --formats; add --formats")
    if not KAFKA_URL.match(args.broker):
        raise BenchArgumentError(
            f"bench --broker: expected kafka://host:port[,host:port], got {mask_url(args.broker)!r}")


def _bench_capture(args: argparse.Namespace) -> int:
    from publisher.workshop.bench.capture import CaptureOptions, format_capture_report, run_capture_bench
    from publisher.workshop.bench.capture_mix import CaptureBenchError
    from publisher.workshop.databases import mixing, names

    able = names(mixing())
    database = args.database or _database_of_url(args.url, able[0])
    if database not in able:
        raise BenchArgumentError(
            f"bench --capture: {database} has no concurrent writers to measure; use {' or '.join(able)}")
    options = CaptureOptions(database=database, url=args.url, seconds=args.seconds, rounds=args.rounds)
    try:
        report = run_capture_bench(options)
    except CaptureBenchError as exc:
        raise BenchUnavailableError(str(exc)) from None
    print(json.dumps(report.summary()) if args.json else format_capture_report(report))
    return 0


def _bench_snapshot(args: argparse.Namespace) -> int:
    from publisher.workshop.bench.snapshot import SnapshotOptions, format_snapshot_report, run_snapshot_bench

    _require_copying(args, "--snapshot")
    options = SnapshotOptions(url=args.url, rows=args.rows or 1_000_000, query_limit=args.query_limit,
                              master=args.master, direct=not args.snapshot_logged,
                              small_cycle_events=args.small_cycle_events)
    return _report(args, lambda: run_snapshot_bench(options), format_snapshot_report)


def _bench_targets(args: argparse.Namespace) -> int:
    from publisher.workshop.bench.capture_mix import CaptureBenchError
    from publisher.workshop.bench.targets import TargetsOptions, format_targets_report, run_targets

    _require_copying(args, "--targets")
    options = TargetsOptions(url=args.url, rows=args.rows, events=args.events, query_limit=args.query_limit,
                             seconds=args.seconds, rounds=args.rounds, master=args.master,
                             small_cycle_events=args.small_cycle_events)
    try:
        return _report(args, lambda: run_targets(options), format_targets_report)
    except CaptureBenchError as exc:
        raise BenchUnavailableError(str(exc)) from None


def _bench_triggerless(args: argparse.Namespace) -> int:
    from publisher.workshop.bench.triggerless import (
        TriggerlessOptions,
        format_triggerless_report,
        run_triggerless_bench,
    )

    _require_copying(args, "--triggerless")
    options = TriggerlessOptions(url=args.url, rows=args.rows or 1_000_000, master=args.master, cluster=args.cluster)
    return _report(args, lambda: run_triggerless_bench(options), format_triggerless_report)


def _require_copying(args: argparse.Namespace, flag: str) -> None:
    """The whole-table benchmarks run where the database sends a table as COPY does."""
    from publisher.workshop.databases import copying, names

    able = names(copying())
    if (args.database or _database_of_url(args.url, able[0])) not in able:
        raise BenchArgumentError(f"bench {flag}: measured on {' or '.join(able)} only")


def _database_of_url(url: str | None, default: str) -> str:
    """The name of the database a --url is for; `default` without one."""
    from publisher.workshop.databases import of_url

    if url is None:
        return default
    try:
        found = of_url(url)
    except ValueError as exc:
        raise BenchArgumentError(f"bench: --url: {exc}") from None
    return str(found.name)


def _report(args: argparse.Namespace, run: Callable[[], Any], formatted: Callable[[Any], str]) -> int:
    """Run a benchmark; print its report, or its summary as JSON with --json."""
    from publisher.workshop.bench.mix import WorkloadError

    try:
        report = run()
    except WorkloadError as exc:
        raise BenchArgumentError(str(exc)) from None
    print(json.dumps(report.summary()) if args.json else formatted(report))
    return 0
