"""`publisher migrate`: the application's migration run with its capture brought along, so that
the application's writes wait for it instead of failing (README, "Migrations of published tables").

Triggers name the columns they log: between a statement that drops or renames a published column
and the capture made anew for the new shape, every write of the table would fail on MariaDB and
MySQL (SQLite refuses the drop itself). So each statement that may change a published table runs
where its writers cannot: in one transaction on PostgreSQL and SQLite (DDL is transactional
there; the tables it alters stay locked until it commits), under `LOCK TABLES … WRITE` of the
table's capture (its class's tables too) and the event log on MariaDB and MySQL, whose DDL commits
on its own but keeps the locks. Right after the statement, before anything else runs, the capture
of each table whose shape changed is made anew and the new shape recorded, on the same
connection. A TRUNCATE, which no trigger sees but PostgreSQL's, is preceded by a DELETE whose
triggers log each row's delete. Statements on no published table pass through as they are.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from publisher.capture.install import capture_of, follow_shapes
from publisher.capture.shape import recorded_families
from publisher.config import Config
from publisher.database import HeldConnection, table_schema
from publisher.dialects.reflection import reflection
from publisher.model.logical import class_config
from publisher.model.statements import (
    Statement,
    is_ddl,
    names_in,
    split_statements,
    truncated_tables,
    words_in,
)

log = logging.getLogger("publisher")

TAKE_SECONDS = 60.0
"""How long a migration tries to take its tables from the application's transactions."""


class MigrationError(RuntimeError):
    """A statement the database refused, or one the publisher refuses before running anything:
    which, why, and what had already run."""


@dataclass(frozen=True)
class Step:
    """One statement of the migration and the captures (by the name each was installed as, in
    lower case) of the published tables it may change."""

    number: int
    statement: Statement
    captures: tuple[str, ...]

    def where(self) -> str:
        return f"statement {self.number} (line {self.statement.line})"


@dataclass
class MigrationResult:
    """What `publisher migrate` did, as its summary line says it."""

    statements: int = 0
    passed_through: int = 0
    tables: list[str] = field(default_factory=list)
    """The published tables (as installed) a statement may have changed."""
    shapes_recorded: list[str] = field(default_factory=list)
    """The tables whose capture was made anew for a new shape, and the shape recorded."""
    truncated: list[str] = field(default_factory=list)
    seconds: float = 0.0
    waited_for_writers: float = 0.0
    """How long the migration waited for the application's transactions to let go of its tables."""
    writers_held: float = 0.0
    """The longest time the migrated tables' writers had to wait for it (its tables locked)."""
    dry_run: bool = False
    sql: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        found = dataclasses.asdict(self)
        del found["sql"]
        for name in ("seconds", "waited_for_writers", "writers_held"):
            found[name] = round(found[name], 3)
        return found


def migrate(config: Config, sql: str, dry_run: bool = False) -> MigrationResult:
    """Run the migration `sql` (statements cut at `;`), each statement that may change a
    published table with the table's writers held and its capture made anew right after it.
    `dry_run`: where DDL is transactional, everything runs and is rolled back, so the SQL
    printed is exactly what would run; on MariaDB and MySQL nothing runs."""
    started = time.monotonic()
    held = HeldConnection(config)
    level = log.level
    log.setLevel(logging.ERROR)  # the capture's own words on what it made anew: the summary says it, once committed
    try:
        dialect = capture_of(config, held.engine)
        families = recorded_families(config, held.engine)
        steps = plan(config, split_statements(sql, dialect.lexis), families)
        result = MigrationResult(statements=len(steps), dry_run=dry_run)
        result.tables = sorted({capture for step in steps for capture in step.captures})
        result.passed_through = sum(1 for step in steps if not step.captures)
        run = Runner(held, result)
        if dry_run and not dialect.transactional_ddl:
            run.dry(steps, families)
        else:
            for segment in segments(steps, dialect.transactional_ddl):
                run.segment(config, segment, families, dry_run)
        result.seconds = time.monotonic() - started
        return result
    finally:
        log.setLevel(level)
        held.close()


def plan(config: Config, statements: Sequence[Statement], families: dict[str, tuple[str, ...]]) -> list[Step]:
    """Each statement with the captures of the published tables it names, any of their tables;
    a statement that would give a class's table a column named like one of its multi-valued
    attributes is refused before anything runs."""
    member_of = {table.lower(): capture for capture, tables in families.items() for table in tables}
    member_of.update({capture: capture for capture in families})
    steps = []
    for number, statement in enumerate(statements, 1):
        named = names_in(statement.text)
        captures = tuple(sorted({member_of[name] for name in named if name in member_of}))
        step = Step(number, statement, captures)
        _refuse_attribute_names(config, step)
        steps.append(step)
    return steps


def _refuse_attribute_names(config: Config, step: Step) -> None:
    """A column of a class's table named like one of its multi-valued attributes or references
    would publish two values under one name: refused before anything runs."""
    words = {word.lower() for word in words_in(step.statement.text)}
    for capture in step.captures:
        found = class_config(config.classes, capture)
        if found is None:
            continue
        attributes = {name.lower() for name in found.multi_valued}
        clash = sorted(words & attributes)
        if clash and _renames_or_adds(step.statement.text):
            raise MigrationError(
                f"{step.where()} may give table {capture!r} a column named {clash[0]!r}, which is the name of one of "
                f"its class's multi-valued attributes (classes.{capture}.multi_valued): rename the attribute in the "
                f"configuration first, or choose another name; nothing has run")


def _renames_or_adds(statement: str) -> bool:
    words = [word.upper() for word in words_in(statement)]
    return words[:2] == ["ALTER", "TABLE"] and any(w in ("RENAME", "ADD", "CHANGE") for w in words)


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


class Runner:
    """Runs a migration's segments on the held connection, and says what ran when one fails."""

    def __init__(self, held: HeldConnection, result: MigrationResult) -> None:
        self.held = held
        self.result = result
        self.ran: list[Step] = []

    def execute(self, statements: Sequence[str]) -> None:
        for statement in statements:
            self.held.run(statement)
            self.result.sql.append(statement)

    def take(self, dialect: Any, statements: Sequence[str]) -> None:
        """Take the migration's tables from the application (`begin_migration_sql`), trying
        again while its transactions hold them, for at most TAKE_SECONDS."""
        deadline = time.monotonic() + TAKE_SECONDS
        pause = 0.001
        while True:
            try:
                self.execute(statements)
                return
            except Exception as exc:
                if not dialect.migration_lock_busy(exc):
                    raise
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the application's transactions held its tables for {TAKE_SECONDS:.0f} s "
                                       "without a moment's pause (try again at a quieter time)") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    def segment(self, config: Config, steps: list[Step], families: dict[str, tuple[str, ...]], dry_run: bool) -> None:
        dialect = capture_of(config, self.held.engine)
        captures = sorted({capture for step in steps for capture in step.captures})
        tables = existing(config, self.held, [t for capture in captures for t in families[capture]])
        started = time.monotonic()
        try:
            self.take(dialect, dialect.begin_migration_sql(tables) if captures else [])
            locked = time.monotonic()
            self.result.waited_for_writers += locked - started
            for step in steps:
                self.step(config, step, families)
            self.execute(dialect.end_migration_sql() if captures else [])
            if dry_run:
                self.held.rollback()
            else:
                self.held.commit()
            if captures:
                self.result.writers_held = max(self.result.writers_held, time.monotonic() - locked)
        except MigrationError:
            self._abandon(dialect, bool(captures))
            raise
        except Exception as exc:
            self._abandon(dialect, bool(captures))
            raise MigrationError(self._refused(exc, dialect.transactional_ddl)) from exc

    def step(self, config: Config, step: Step, families: dict[str, tuple[str, ...]]) -> None:
        dialect = capture_of(config, self.held.engine)
        self.current = step
        tables = existing(config, self.held, [t for capture in step.captures for t in families[capture]])
        statement = step.statement.text
        truncated = truncated_tables(statement)
        reshaping = bool(step.captures) and is_ddl(statement)
        if reshaping:
            self.execute(dialect.before_migration_sql(tables))
        if truncated is not None and step.captures:
            emptied = [t for t in tables if t.lower() in {name.lower() for name in truncated}]
            self.result.truncated += emptied
            self.execute(dialect.truncate_sql(statement, emptied))
        else:
            self.execute([statement])
        if reshaping:
            stale = follow_shapes(config, self.held.engine, set(step.captures), self.execute)
            self.result.shapes_recorded += [f.published_as for f in stale if f.published_as not in
                                            self.result.shapes_recorded]
        self.ran.append(step)

    def dry(self, steps: Sequence[Step], families: dict[str, tuple[str, ...]]) -> None:
        """What a migration would run where it cannot be rolled back: its statements, with where
        the capture is made anew (its SQL is the new shape's, known only then)."""
        for step in steps:
            self.result.sql.append(step.statement.text)
            for capture in step.captures:
                self.result.sql.append(f"-- then, if its shape changed, the capture of {capture!r} is made anew "
                                       f"(`publisher install --table {capture} --dry-run` shows it for the shape now)")

    def _abandon(self, dialect: Any, locked: bool) -> None:
        try:
            self.held.rollback()
            for statement in dialect.end_migration_sql() if locked else []:
                self.held.run(statement)
        except Exception:  # the connection is gone: its locks went with it
            log.debug("could not end the migration's locks", exc_info=True)

    def _refused(self, exc: Exception, transactional: bool) -> str:
        from publisher.errors import root_cause

        step = getattr(self, "current", None)
        where = step.where() if step else "the migration"
        if transactional:
            done = "nothing of the migration was kept (it ran in one transaction, rolled back)"
        elif self.ran:
            done = (f"statements {', '.join(str(s.number) for s in self.ran)} had run and are kept (each DDL "
                    f"statement commits on its own), with the capture of their tables made anew")
        else:
            done = "no statement of the migration had run"
        text = step.statement.text if step else ""
        shown = text if len(text) <= 200 else text[:200] + "…"
        return f"{where} failed: {root_cause(exc)}\n  {shown}\n{done}"


def existing(config: Config, held: HeldConnection, tables: Sequence[str]) -> list[str]:
    """The tables that exist, as the database names them, each once (with the event log's
    helper tables, when they are asked for)."""
    schema = table_schema(config, held.engine)
    names = {name.lower(): name for name in reflection(held.engine, schema).get_table_names(schema=schema)}
    return list(dict.fromkeys(names[t.lower()] for t in tables if t.lower() in names))

