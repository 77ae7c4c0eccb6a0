"""`publisher migrate`: the application's migration of published tables run so that the
application's writes wait for it instead of failing (docs: guides/migrations.md);
each statement through `service.migration`."""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from sqlalchemy import Engine

from publisher.config import Config, Reader, RetiredColumns
from publisher.database import HeldConnection
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
                    result.resynced = resync(config, result.resync)
                raise
    finally:
        log.setLevel(level)
        held.close()
    if result.resync and not dry_run:
        result.resynced = resync(config, result.resync)
    result.seconds = time.monotonic() - started
    return result


def resync_reshaped(config: Config, polled: object) -> None:
    """After a cycle that made a table's capture anew for a migration run without `migrate` (the
    application's own tool; an event trigger, `Capture.may_follow`, followed it meanwhile), publish
    the table's rows again, as `migrate` does."""
    reshaped: Sequence[str] = getattr(polled, "reshaped", ())
    if not reshaped:
        return
    names = ", ".join(map(repr, reshaped))
    log.warning("table(s) %s changed shape since their capture was installed: every row is published again", names)
    try:
        resync(config, reshaped)
    except Exception as exc:  # the cycle is done; only the consumer's settling is behind
        log.error("could not publish the rows of %s again (%s): run `publisher snapshot --table T` for each",
                  names, exc)


def resync(config: Config, tables: Sequence[str]) -> dict[str, int]:
    """Publish every row of the tables again through a snapshot (chunked, resumable, in order
    with the writes around it), so that the consumer ends with what a migration wrote itself;
    with `retired_columns = "remove"`, with the removal of each dropped or renamed-away column's
    values. For the status mode, and each subscriber whose subscription tracks the events.
    Rows logged, per table (the status mode's snapshot, or the first reader's)."""
    from publisher.capture.install import published_tables
    from publisher.config import STATUS_MODE
    from publisher.database import connect

    engine = connect(config)
    logged: dict[str, int] = {}
    try:
        published = {name.lower() for name in published_tables(config, engine).names}
        still = [table for table in tables if table.lower() in published]  # not dropped later in the migration
        changes = _shape_changes(config, engine, still)
        readers = [STATUS_MODE] if config.publisher.status_mode else []
        readers += [Reader(name) for name in config.subscribers]
        for reader in readers:
            for table, events in changes.items():
                for name, rows in _resync_one(config, engine, table, reader, events).items():
                    logged.setdefault(name, rows)
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
        taken = snapshot(config, engine, [table], reader=reader, progress=ProgressLines(), events=events)
    except SnapshotError as exc:  # a subscription that does not track the table (or the events)
        log.info("%s: not published again for %s: %s", table, reader, exc)
        return {}
    return {name: part.rows for name, part in taken.tables.items()}


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
