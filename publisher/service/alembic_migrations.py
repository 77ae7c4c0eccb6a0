"""Alembic migrations with what `publisher migrate` guarantees (docs: guides/migrations.md): in an
`env.py`, around `context.run_migrations()`,

    with published_migrations(connection, "publisher.toml"):
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()

Every statement Alembic runs on that connection passes SQLAlchemy's cursor events: one that names
a published table is run as `publisher migrate` runs it (`service.migration`): its tables taken
from the application first (`Capture.begin_migration_sql`: a lock of the tables where DDL commits
on its own, else Alembic's own transaction, or one begun where the driver has Alembic's DDL run
outside any), the capture of each table
whose shape it changed made anew right after it on the same connection, then the tables given
back. Once the block has ended (Alembic's transaction committed), the rows of every table that
gained, renamed or retyped a column are published again, as `migrate` does. `examples/alembic/env.py`
is such an env.py.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event

from publisher.config import Config
from publisher.database import HeldConnection
from publisher.model.statements import Statement
from publisher.service.migrate import ensure_owed_resyncs, resync
from publisher.service.migration import Migration, MigrationResult, Step

log = logging.getLogger("publisher")


class _Hook:
    """The cursor events of one Alembic connection."""

    def __init__(self, migration: Migration) -> None:
        self.migration = migration
        self.step: Step | None = None
        self.taken: float | None = None
        self.began = False
        self.number = 0

    def before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> tuple[str, Any]:
        self.number += 1
        captures = self.migration.captures_of(statement)
        if not captures:
            return statement, parameters
        migration = self.migration
        self.step = migration.current = Step(self.number, Statement(statement, 1), captures)
        if migration.dialect.transactional_ddl:
            if not getattr(migration.held.dbapi, "in_transaction", True):  # a driver outside a transaction
                migration.execute(migration.dialect.begin_migration_sql(migration.tables_of(captures)))
                self.began = True
        else:
            self.taken = migration.take(migration.tables_of(captures))
        if not migration.before(statement, captures):
            return "SELECT 1", ()
        return statement, parameters

    def after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        step, self.step = self.step, None
        if step is None:
            return
        self.migration.after(step.statement.text, step.captures)
        self.migration.ran.append(step)
        self.give_back(commit=True)

    def failed(self, context: Any) -> None:
        if self.step is not None:
            self.step = None
            self.give_back(commit=False)

    def give_back(self, commit: bool) -> None:
        if self.taken is not None:
            self.migration.give_back(self.taken)
            self.taken = None
        if self.began:
            self.began = False
            if commit:
                self.migration.held.commit()
            else:
                self.migration.held.rollback()


@contextlib.contextmanager
def published_migrations(connection: Connection, config: Config | str | Path) -> Iterator[MigrationResult]:
    """Run the block's statements on `connection` as `publisher migrate` runs them; what they
    did is in the result once the block ends. `config`: the publisher's configuration, or its
    file."""
    from publisher.config.loading import load_config

    if not isinstance(config, Config):
        config = load_config(str(config))
    ensure_owed_resyncs(config)
    held = HeldConnection(connection.engine.url, connection.connection.dbapi_connection)
    hook = _Hook(Migration(config, held))
    level = log.level
    log.setLevel(logging.ERROR)
    event.listen(connection, "before_cursor_execute", hook.before, retval=True)
    event.listen(connection, "after_cursor_execute", hook.after)
    event.listen(connection.engine, "handle_error", hook.failed)
    try:
        yield hook.migration.result
    finally:
        event.remove(connection, "before_cursor_execute", hook.before)
        event.remove(connection, "after_cursor_execute", hook.after)
        event.remove(connection.engine, "handle_error", hook.failed)
        log.setLevel(level)
        held.close()
    result = hook.migration.result
    if result.resync:  # Alembic's transaction has committed: the rows are published as they are now
        result.resynced = resync(config)
