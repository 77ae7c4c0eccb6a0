"""`publisher migrate`: the application's migration of published tables run so that the
application's writes wait for it instead of failing (docs: guides/migrations.md);
each statement through `service.migration`."""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from publisher.capture.resyncs import RESYNCS_TABLE_SUFFIX, owed_resyncs, readers_of, resync_done
from publisher.config import Config, Reader, RetiredColumns
from publisher.database import HeldConnection
from publisher.errors import root_cause
from publisher.locking.backends import LockScope
from publisher.model.shapes import last_change, shape_change
from publisher.model.statements import split_statements
from publisher.service.migration import Migration, MigrationError, MigrationResult, Step
from publisher.snapshots.chunks import ROWS, ChunkEvents

log = logging.getLogger("publisher")

__all__ = ["MigrationError", "MigrationResult", "migrate"]


def migrate(config: Config, sql: str, dry_run: bool = False) -> MigrationResult:
    """Run the migration `sql` (statements cut at `;`), each statement that may change a
    published table with the table's writers held and its capture made anew right after it.
    `dry_run`: where DDL is transactional, everything runs and is rolled back, so the SQL
    printed is exactly what would run; where it is not (`Capture.transactional_ddl`) nothing runs."""
    started = time.monotonic()
    ensure_owed_resyncs(config)
    held = HeldConnection.of(config)
    level = log.level
    log.setLevel(logging.ERROR)  # the capture's own words on what it made anew: the summary says it, once committed
    try:
        migration = Migration(config, held)
        steps = migration.plan(split_statements(sql, migration.dialect.lexis))
        result = migration.result
        result.statements, result.dry_run = len(steps), dry_run
        result.tables = sorted({capture for step in steps for capture in step.captures})
        result.passed_through = sum(1 for step in steps if not step.captures)
        if dry_run and not migration.dialect.transactional_ddl:
            dry(migration, steps)
        else:
            try:
                for segment in segments(steps, migration.dialect.transactional_ddl):
                    run_segment(migration, segment, dry_run)
            except MigrationError:
                if result.resync and not migration.dialect.transactional_ddl:  # what ran is kept: its rows too
                    result.resynced = resync(config)
                raise
    finally:
        log.setLevel(level)
        held.close()
    if result.resync and not dry_run:
        result.resynced = resync(config)
    result.seconds = time.monotonic() - started
    return result


def resync_owed(config: Config, engine: Engine, reader: Reader, announce: bool = True) -> dict[str, int]:
    """Publish again, for `reader` (the caller holds its resyncs' lock, `LockScope.RESYNCS`),
    every row of each table whose resync a migration owes it (`capture.resyncs`: owed in the
    transaction that made the table's capture anew, by `migrate` or by a cycle that followed the
    application's own tool), so that the consumer ends with what the migration wrote itself; with
    `retired_columns = "remove"`, with the removal of each dropped or renamed-away column's
    values. The debt is paid once the table's snapshot (chunked, in order with the writes around
    it, begun anew each time) has finished: a process killed before that leaves it to the next
    payer. Rows logged, per table. `announce`: say what is published again (a warning; else
    for the debug log only, where a failure to publish it has been said)."""
    from publisher.capture.install import published_tables

    owed = owed_resyncs(config, engine, reader)
    if not owed:
        return {}
    log.log(logging.WARNING if announce else logging.DEBUG,
            "table(s) %s changed shape since their capture was installed: every row is published again for %s",
            ", ".join(map(repr, owed)), reader)
    published = {name.lower() for name in published_tables(config, engine).names}
    changes = _shape_changes(config, engine, [table for table in owed if table.lower() in published])
    logged: dict[str, int] = {}
    for table, last in owed.items():
        if table in changes:  # else dropped since, by the migration or a later one
            for name, rows in _resync_one(config, engine, table, reader, changes[table]).items():
                logged.setdefault(name, rows)
        resync_done(config, engine, reader, table, last)
    return logged


def resync_after_cycle(config: Config, engine: Engine, reader: Reader) -> None:
    """After a cycle of `reader`: what migrations owe it, unless another process (a `migrate`) is
    publishing it now. A failure is said, once for the same debt, and left to the next cycle: a
    publisher's user without the owner's rights (a resync reads the rows under a share lock and
    logs them in the event log) is told which command publishes them."""
    from publisher.locking.lock import PublisherLock

    owed: dict[str, int] = {}
    lock: PublisherLock | None = None
    said: tuple[str, str | None, str, tuple[tuple[str, int], ...]] = (str(engine.url), config.database.schema,
                                                                      str(reader), ())
    try:
        owed = owed_resyncs(config, engine, reader)
        if not owed:
            return
        said = (*said[:3], tuple(sorted(owed.items())))
        lock = PublisherLock(config, reader=reader, scope=LockScope.RESYNCS)
        if lock.acquire_if_free():
            resync_owed(config, engine, reader, announce=said not in _FAILURES_SAID)
    except Exception as exc:  # the cycle is done; only the consumer's settling is behind
        level = logging.DEBUG if said in _FAILURES_SAID else logging.ERROR
        _FAILURES_SAID.add(said)
        log.log(level, "could not publish the rows of migrated table(s) %s again for %s: %s. The next cycle tries "
                "again; where the publisher's user may not (a resync reads the rows under a share lock and logs them "
                "in the event log), run `publisher migrate --resync-owed` as the tables' owner",
                ", ".join(map(repr, owed)), reader, config.database.redact(str(root_cause(exc))))
    finally:
        if lock is not None:
            lock.release()


_FAILURES_SAID: set[tuple[str, str | None, str, tuple[tuple[str, int], ...]]] = set()
"""The resyncs a cycle could not publish and has said so: each debt is said once per process."""


def resync(config: Config) -> dict[str, int]:
    """After a migration (or `migrate --resync-owed`): the resyncs owed to each reader, published
    by this process, which runs as the tables' owner, beside any running publisher's cycles. A
    reader's resyncs are one process's at a time: this waits for one a running publisher is
    publishing, then publishes what is still owed. Rows logged per table (the first reader's)."""
    from publisher.database import connect
    from publisher.locking.lock import PublisherLock

    engine = connect(config)
    logged: dict[str, int] = {}
    try:
        for reader in readers_of(config):
            lock = PublisherLock(config, reader=reader, scope=LockScope.RESYNCS)
            lock.acquire(wait=True)
            try:
                for name, rows in resync_owed(config, engine, reader).items():
                    logged.setdefault(name, rows)
            finally:
                lock.release()
    finally:
        engine.dispose()
    return logged


def _shape_changes(config: Config, engine: Engine, tables: Sequence[str]) -> dict[str, ChunkEvents]:
    """What each table's rows log after its change of shape: the row, and the removal of its
    retired columns' values (`model.shapes.shape_change`) where those are removed."""
    from publisher.capture.install import published_tables
    from publisher.capture.shape_history import recorded_shapes
    from publisher.database import table_schema
    from publisher.model.catalog import reflect_catalog

    catalog = reflect_catalog(engine, table_schema(config, engine), published_tables(config, engine), config.classes)
    records = {name.lower(): shapes for name, shapes in recorded_shapes(config, engine).items()}
    removing = config.publisher.retired_columns is RetiredColumns.REMOVE
    found: dict[str, ChunkEvents] = {}
    for name in tables:
        table = catalog.lookup(name)
        shapes = records.get(name.lower(), ())
        change = shape_change(last_change(shapes, table.columns) if table is not None else None,
                              table.columns if table is not None else ())
        removed = change.retired if removing and table is not None and not table.is_logical else ()
        found[name] = ChunkEvents(removed) if removed else ROWS
    return found


def _resync_one(config: Config, engine: Engine, table: str, reader: Reader, events: ChunkEvents) -> dict[str, int]:
    from publisher.snapshots.snapshot import ProgressLines, SnapshotError, snapshot

    try:
        # anew: chunks an interrupted resync logged may predate a migration owed since
        taken = snapshot(config, engine, [table], reader=reader, progress=ProgressLines(), events=events, anew=True)
    except SnapshotError as exc:  # a subscription that does not track the table (or the events)
        log.info("%s: not published again for %s: %s", table, reader, exc)
        return {}
    return {name: part.rows for name, part in taken.tables.items()}


def ensure_owed_resyncs(config: Config) -> None:
    """The table of owed resyncs, made before the migration holds any table (an event log
    installed before it has none, and creating it under the migration's locks could wait on them)."""
    from publisher.capture.resyncs import ensure_resyncs_table
    from publisher.database import connect

    engine = connect(config)
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as exc:
        engine.dispose()
        raise MigrationError(f"cannot connect to the database ({root_cause(exc)}); nothing ran") from None
    try:
        ensure_resyncs_table(config, engine)
    except SQLAlchemyError as exc:
        raise MigrationError(f"cannot create {config.event_log.table}{RESYNCS_TABLE_SUFFIX}, where a migration "
                             f"records the resyncs it owes ({root_cause(exc)}): run the migration as the tables' "
                             "owner, or `publisher install --table T` as the owner first; nothing ran") from None
    finally:
        engine.dispose()


def segments(steps: Sequence[Step], transactional: bool) -> list[list[Step]]:
    """Where DDL is transactional, the whole migration in one transaction; elsewhere each run of
    statements on published tables under one lock, and each other statement alone."""
    if transactional:
        return [list(steps)] if steps else []
    found: list[list[Step]] = []
    for step in steps:
        if step.captures and found and found[-1][0].captures:
            found[-1].append(step)
        else:
            found.append([step])
    return found


def run_segment(migration: Migration, steps: list[Step], dry_run: bool) -> None:
    """Steps run with their tables taken (if they name published ones), then committed (or,
    `dry_run`, rolled back); a failure undone where DDL is transactional, and said."""
    captures = sorted({capture for step in steps for capture in step.captures})
    migration.current = steps[0]
    holds = bool(captures) or migration.dialect.transactional_ddl  # DDL may commit on its own without it
    try:
        taken = migration.take(migration.tables_of(captures)) if holds else None
        for step in steps:
            migration.step(step)
        if taken is not None:
            migration.give_back(taken)
        if dry_run:
            migration.held.rollback()
        else:
            migration.held.commit()
    except MigrationError:
        migration.abandon(holds)
        raise
    except Exception as exc:
        migration.abandon(holds)
        raise migration.refused(exc) from exc


def dry(migration: Migration, steps: Sequence[Step]) -> None:
    """What a migration would run where it cannot be rolled back: its statements, with where
    the capture is made anew (its SQL is the new shape's, known only then)."""
    for step in steps:
        migration.result.sql.append(step.statement.text)
        for capture in step.captures:
            migration.result.sql.append(f"-- then, if its shape changed, the capture of {capture!r} is made anew "
                                        f"(`publisher install --table {capture} --dry-run` shows it for the shape now)")
