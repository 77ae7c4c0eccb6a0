"""Each command's work, given its configuration and arguments: what it prints and its exit code."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from publisher.cli.errors import UnavailableError, UsageError
from publisher.cli.inspection import plural
from publisher.config import STATUS_MODE, Config, ConfigError, Reader

if TYPE_CHECKING:
    from publisher.locking.lock import PublisherLock


def parse_key_command(text: str) -> int:
    from publisher.model.keys import KeySyntaxError, format_key, parse_key

    try:
        parts = parse_key(text)
    except KeySyntaxError as exc:
        print(f"publisher: {exc}\n  {text}\n  {' ' * exc.position}^", file=sys.stderr)
        return 2
    print(json.dumps({
        "parts": [{"column": p.column, "value": p.value} for p in parts],
        "canonical": format_key(parts),
    }, ensure_ascii=False))
    return 0


def install_command(config: Config, args: argparse.Namespace) -> int:
    from publisher.capture.install import install_capture
    from publisher.database import connect
    from publisher.dialects import dialect_of
    from publisher.model.logical import installed_children

    engine = connect(config)
    if args.check:
        return _check_capture(config, engine, args.config)
    tables = args.table or list(config.publisher.tables)  # the tables it publishes, when none is named
    statements = install_capture(config, engine, tables, args.style, args.dry_run, args.native)
    if args.dry_run:
        print(dialect_of(engine).client_script(statements), end="")
    else:
        names = ", ".join(tables) or "no tables (name them with --table, or as [publisher] tables)"
        children = [f"{child} (values of {table}.{attribute})" for table, attribute, child in
                    installed_children(config.classes, tables)]
        native = "native " if args.native else ""
        print(f"installed the event log {config.event_log.table} and the {native}{args.style or 'capture'} triggers "
              f"of {names}"
              + (f"; child tables: {', '.join(children)}" if children else ""), file=sys.stderr)
        for problem in _untrackable(config, engine):
            print(f"publisher: warning: {problem}", file=sys.stderr)
        _resync_after_install(config)
    return 0


def _resync_after_install(config: Config) -> None:
    """A table whose shape changed since its capture was installed (a migration `migrate` did
    not run) is owed every reader's resync by its reinstall: published again here, by the
    tables' owner, as `migrate` publishes its own."""
    from publisher.capture.resyncs import owed_resyncs, readers_of
    from publisher.database import connect
    from publisher.service.migrate import resync

    engine = connect(config)
    try:
        owed = any(owed_resyncs(config, engine, reader) for reader in readers_of(config))
    finally:
        engine.dispose()
    if owed:
        for table, rows in resync(config).items():
            print(f"publisher: {table!r} changed shape since its capture was installed: its {rows} row(s) are "
                  "published again", file=sys.stderr)


def _untrackable(config: Config, engine: Any) -> list[str]:
    """Why each subscriber whose subscription names what the database does not publish (yet:
    tables may be installed one at a time) cannot check out."""
    from publisher.capture.install import published_tables
    from publisher.database import table_schema
    from publisher.model.catalog import reflect_catalog
    from publisher.pipeline.subscribers import tracked

    if not config.subscribers:
        return []
    catalog = reflect_catalog(engine, table_schema(config, engine), published_tables(config, engine), config.classes)
    problems = []
    for name in config.subscribers:
        try:
            tracked(config, name, catalog)
        except ConfigError as exc:
            problems.append(f"subscriber {name} cannot check out until this is put right: {exc}")
    return problems


def snapshot_command(config: Config, args: argparse.Namespace) -> int:
    from publisher.database import connect
    from publisher.snapshots.ranges import PARALLEL_ROWS
    from publisher.snapshots.snapshot import CHUNK_ROWS, ProgressLines, snapshot, snapshot_directly

    if args.parallel_rows is not None and not args.direct:
        raise UsageError("snapshot --parallel-rows: only a snapshot written directly (--direct) is taken in key "
                         "ranges; add --direct, or leave --parallel-rows out")
    reader = Reader(args.subscriber)
    engine = connect(config)
    if args.direct and not args.dry_run:
        from publisher.pipeline.spark import get_spark

        result = snapshot_directly(config, engine, args.table, args.where, reader, args.chunk_rows, ProgressLines(),
                                   spark=lambda: get_spark(config.spark),
                                   parallel_rows=args.parallel_rows or PARALLEL_ROWS)
    else:
        result = snapshot(config, engine, args.table, args.where, reader, args.dry_run,
                          args.chunk_rows or CHUNK_ROWS, ProgressLines())
    print(json.dumps(result.summary()))
    if not args.dry_run:
        by = "run or poll" if args.subscriber is None else f"poll --subscriber {args.subscriber}"
        summary = result.summary()
        published = f"published {summary['published']} rows; " if result.direct else ""
        before = sum(t.before for t in result.tables.values() if t.resumed_after is not None)
        earlier = f" (after {before} the snapshot it resumed logged)" if before else ""
        print(f"{published}logged {summary['events']} row query-backs{earlier}; {by} publishes them", file=sys.stderr)
        for name, taken in result.tables.items():
            if taken.null_keys:
                rows = "1 row" if taken.null_keys == 1 else f"{taken.null_keys} rows"
                print(f"{name}: {rows} with a NULL key column not published: no object has "
                      "their key", file=sys.stderr)
    return 0


def _check_capture(config: Config, engine: Any, config_path: str) -> int:
    from publisher.capture.install import check_capture

    found = check_capture(config, engine)
    for problem in found.problems:
        print(problem)
    if found.reinstall:
        command = shlex.join(["publisher", "install", "-c", config_path,
                              *(part for table in found.reinstall for part in ("--table", table))])
        print(f"{plural(len(found.reinstall), 'table')} to install again: {command}", file=sys.stderr)
    if found.problems:
        return 1
    print("every installed table's capture matches its columns and key", file=sys.stderr)
    return 0


def poll_command(config: Config, reader: Reader) -> int:
    from publisher.database import connect
    from publisher.locking.lock import PublisherLock
    from publisher.pipeline.cycle import run_cycle
    from publisher.pipeline.spark import get_spark
    from publisher.service.loopback import all_loopback, loopback_said
    from publisher.service.migrate import resync_after_cycle

    engine = connect(config)
    _check_reachable(engine)
    if config.triggerless:
        return _poll_triggerless(config, engine, reader)
    if reader.subscriber is None:
        _warn_unpublished(config, engine)
        with PublisherLock(config) as lock:
            result = run_cycle(lambda: get_spark(config.spark), engine, config)
            resync_after_cycle(config, engine, reader)
        print(json.dumps(result.summary()))
        if all_loopback(result):
            said = loopback_said(config, engine, result.loopback, "every row the cycle read")
            print(f"publisher: warning: {said}", file=sys.stderr)
        _check_not_lost(lock)
        return 0
    from publisher.service.checkouts import check_out

    with PublisherLock(config, reader=reader) as lock:
        results = check_out(lambda: get_spark(config.spark), engine, config, reader.subscriber)
        resync_after_cycle(config, engine, reader)
    print(json.dumps(results.summary()))
    _check_not_lost(lock)
    return 0


def _poll_triggerless(config: Config, engine: Any, reader: Reader) -> int:
    from publisher.pipeline.spark import get_spark
    from publisher.triggerless.cycle import run_comparison_cycle
    from publisher.triggerless.state import state_lock

    output = Path(reader.output(config))
    with state_lock(output, config.publisher.when_locked == "wait"):
        result = run_comparison_cycle(lambda: get_spark(config.spark), engine, config, reader)
    print(json.dumps(result.summary()))
    return 0


def refuse_triggerless(config: Config, command: str) -> None:
    """Commands that work on the triggers or the event log have nothing to work on here."""
    if config.triggerless:
        raise UsageError(f"{command}: publisher.publication_mode = \"triggerless\" has no triggers and no event log "
                         f"to {TRIGGERED_ONLY[command]}")


TRIGGERED_ONLY = {
    "install": "install", "snapshot": "log a snapshot in (its first cycle publishes every row: "
    "startup_option = \"resync\")", "purge": "purge", "requeue": "requeue", "checkin": "check in",
    "verify --repair": "repair through",
}


def purge_command(config: Config) -> int:
    from publisher.database import connect
    from publisher.pipeline.retention import purge

    purged = purge(connect(config), config)
    print(json.dumps({"deleted": purged.deleted, "waiting_for": list(purged.waiting_for)}))
    if purged.waiting_for:
        print(f"publisher: nothing deleted: {', '.join(purged.waiting_for)} never checked out, so every row may "
              "still be needed", file=sys.stderr)
    return 0


def requeue_command(config: Config, args: argparse.Namespace) -> int:
    from publisher.database import connect
    from publisher.service.requeue import DEFAULT_STATUSES, RequeueError, Selection, requeue

    statuses = tuple(dict.fromkeys(s for given in args.status for s in given)) if args.status else DEFAULT_STATUSES
    try:
        selection = Selection(statuses, args.table, args.first, args.last)
        done = requeue(config, connect(config), selection, args.reason, args.dry_run)
    except RequeueError as exc:
        raise UsageError(f"requeue: {exc}") from None
    print(json.dumps(done.summary()))
    counted = ", ".join(f"{status} {n}" for status, n in done.by_status.items()) or "none"
    if args.dry_run:
        print(f"dry run: would put {plural(done.total, 'row')} back to N ({counted}); nothing changed",
              file=sys.stderr)
    else:
        print(f"put {plural(done.total, 'row')} back to N ({counted}); recorded in {done.record}"
              + (f" with the reason: {args.reason}" if args.reason else ""), file=sys.stderr)
        if config.subscribers:
            print("publisher: subscribers read rows whatever their status: this changes what the status mode "
                  "publishes, not what they do", file=sys.stderr)
    return 0


def _warn_unpublished(config: Config, engine: Any) -> None:
    """Say once, before publishing, which tables new rows name that a cycle would reject."""
    from publisher.service.stats import said_unpublished, unpublished_tables

    found = unpublished_tables(config, engine)
    if found:
        logging.getLogger("publisher").warning("%s", said_unpublished(found),
                                               extra={"fields": {"unpublished_tables": found}})


def checkin_command(config: Config, args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from publisher.database import connect
    from publisher.errors import root_cause
    from publisher.service.checkouts import check_in, statements_of

    config.subscriber(args.subscriber)
    engine = connect(config)
    if args.file is not None:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"-f {args.file}: {exc.strerror or exc}") from None
        statements = statements_of(text, engine.dialect.name)
    else:
        statements = list(args.execute)
    with check_in(engine, config, args.subscriber) as conn:
        for number, statement in enumerate(statements, start=1):
            try:
                conn.exec_driver_sql(statement)
            except DBAPIError as exc:
                which = f"statement {number}" if len(statements) > 1 else "the SQL"
                raise UnavailableError(
                    f"checkin: {which} failed, nothing was changed or checked in: "
                    f"{config.database.redact(root_cause(exc))}"
                ) from None
    print(f"checked in {len(statements)} statement(s) for subscriber {args.subscriber}", file=sys.stderr)
    return 0


def run_command(config: Config, subscriber: str | None, config_path: str = "") -> int:
    """Serve every reader of the event log (the status mode and each subscriber, or the one
    named) side by side, each under its own lock and at its own pace; one failing does not stop
    the others."""
    from publisher.database import connect
    from publisher.service.loop import serve_readers, start_said
    from publisher.service.loopback import own_user_said

    started = time.monotonic()
    log = logging.getLogger("publisher")
    if subscriber is not None:
        config.subscriber(subscriber)
        readers = [Reader(subscriber)]
    else:
        readers = [STATUS_MODE] if config.publisher.status_mode else []
        readers += [Reader(name) for name in sorted(config.subscribers)]
    if not readers:
        raise UsageError("nothing to run: publisher.status_mode = false and no [subscribers.NAME] is configured")
    log.info("%s", start_said(config, config_path, readers))
    if config.triggerless:
        return _run_triggerless(config, readers)
    engine = connect(config)
    _check_reachable(engine)
    if STATUS_MODE in readers:
        said = own_user_said(config, engine)
        if said:
            log.info("%s", said)
        _warn_unpublished(config, engine)
    metrics = None
    with contextlib.ExitStack() as serving:  # the metrics server stops on every way out
        if config.metrics.port:
            from publisher.service.metrics import PublisherMetrics

            metrics = PublisherMetrics(config, engine)
            serving.enter_context(metrics.serving(config.metrics))
        failed = serve_readers(config, engine, readers, metrics, started)
    log.info("stopped")
    if failed:
        raise UnavailableError("; ".join(failed))
    return 0


def _run_triggerless(config: Config, readers: list[Reader]) -> int:
    from publisher.database import connect
    from publisher.service.loop import serve_triggerless
    from publisher.triggerless.cycle import ComparisonSettings

    engine = connect(config)
    _check_reachable(engine)
    for reader in readers:  # what the configuration names that the database lacks: exit 2 before serving
        ComparisonSettings.of(config, engine, reader)
    with contextlib.ExitStack() as serving:  # the metrics server stops on every way out
        metrics = None
        if config.metrics.port:
            from publisher.service.metrics import PublisherMetrics

            metrics = PublisherMetrics(config, engine)
            serving.enter_context(metrics.serving(config.metrics))
        failed = serve_triggerless(config, engine, readers, metrics)
    logging.getLogger("publisher").info("stopped")
    if failed:
        raise UnavailableError("; ".join(failed))
    return 0


def _check_not_lost(lock: PublisherLock) -> None:
    """A publisher that lost its lock may have overlapped with another one: say so, exit 1."""
    if lock.lost:
        raise UnavailableError(
            "lost the lock of the event log while publishing: another publisher may have published the same events"
        )


def _check_reachable(engine: Any) -> None:
    """Fail fast, before Spark starts, when the database is not there."""
    with engine.connect():
        pass
