"""A migration of published tables, statement by statement, on a held connection (docs:
guides/migrations.md): which captures a statement may change, how their tables are
taken from the application and given back, and the captures made anew right after it.
`publisher migrate` (`service.migrate`) and the Alembic hook (`service.alembic_migrations`) both
run their statements through it.

Triggers name the columns they log: between a statement that drops or renames a published column
and the capture made anew for the new shape, every write of the table would fail, or the database
refuses the drop itself (`Capture.before_migration_sql`). So each statement that may change a
published table runs where its writers cannot: in one transaction where DDL is transactional
(`Capture.transactional_ddl`: the tables it alters stay locked until it commits), else under a
lock of the table's capture (its class's tables too) and the event log that DDL keeps though it
commits on its own (`Capture.begin_migration_sql`). Right after the statement, before anything
else runs, the capture of each table whose shape changed is made anew and the new shape recorded,
on the same connection. A TRUNCATE, which only a truncate trigger sees, is run as its family's
capture says (`Capture.truncate_sql`): where none sees it, a DELETE whose triggers log each row's
delete. Statements on no published table pass through as they are.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from publisher.capture.following import follow_shapes
from publisher.capture.install import capture_of
from publisher.capture.shape import recorded_families
from publisher.config import Config
from publisher.database import HeldConnection, table_schema
from publisher.dialects.reflection import reflection
from publisher.model.logical import class_config
from publisher.model.statements import (
    Statement,
    TableName,
    altered_tables,
    changes_rows,
    controls_transaction,
    is_ddl,
    is_truncate,
    words_in,
)

log = logging.getLogger("publisher")

TAKE_SECONDS = 60.0
"""How long a migration tries to take its tables from the application's transactions."""

RETAKES = 3
"""How often a statement the database refused for the lock it ran under (`Capture.lock_gone_stale`)
runs again, each time with the tables taken anew."""


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
    resync: list[str] = field(default_factory=list)
    """The tables whose rows are published again once the migration is committed: whose shape
    it changed. A column added has its default in every row, a renamed one its values under the
    new name, a retyped one its values as the new type spells them; and events logged before
    the migration for a column it took away are rejected, so an object whose insert logged only
    such values would be missing."""
    resynced: dict[str, int] = field(default_factory=dict)
    """Rows logged for each by the snapshot that publishes them again."""
    seconds: float = 0.0
    waited_for_writers: float = 0.0
    """How long the migration waited for the application's transactions to let go of its tables."""
    writers_held: float = 0.0
    """The longest time the migrated tables' writers had to wait for it (its tables locked)."""
    retaken: int = 0
    """How often a statement the database refused for the lock it ran under ran again, the tables
    taken anew (`Migration.execute_taken`)."""
    dry_run: bool = False
    sql: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        found = dataclasses.asdict(self)
        del found["sql"]
        for name in ("seconds", "waited_for_writers", "writers_held"):
            found[name] = round(found[name], 3)
        return found


class Migration:
    """A migration on a held connection, and what it did (`result`, and the steps `ran`, for the
    message when a statement fails)."""

    def __init__(self, config: Config, held: HeldConnection) -> None:
        from publisher.database import association_schema

        self.config = config
        self.held = held
        self.dialect = capture_of(config, held.engine)
        self.families = recorded_families(config, held.engine)
        self.member_of = {table.lower(): capture for capture, tables in self.families.items() for table in tables}
        self.member_of.update({capture: capture for capture in self.families})
        self.schema = association_schema(config, held.engine).lower()
        self.result = MigrationResult()
        self.ran: list[Step] = []
        self.current: Step | None = None
        self.taken: list[str] | None = None
        """The tables `take` holds, until `give_back`."""

    def captures_of(self, statement: str) -> tuple[str, ...]:
        """The captures (by the name each was installed as, in lower case) of the published
        tables whose shape the statement may change or whose rows it empties; none for any other
        statement, whose rows' changes the triggers capture as any application's."""
        found = {self.member_of[name.name.lower()] for name in altered_tables(statement, self.dialect.lexis)
                 if self._here(name) and name.name.lower() in self.member_of}
        return tuple(sorted(found))

    def _here(self, name: TableName) -> bool:
        return name.schema is None or name.schema.lower() == self.schema

    def plan(self, statements: Sequence[Statement]) -> list[Step]:
        """Each statement with the captures it may change. Refused before anything runs: a
        statement of transaction control (the migration's transaction is its own), and one that
        would give a class's table a column named like one of its multi-valued attributes."""
        steps = [Step(number, statement, self.captures_of(statement.text))
                 for number, statement in enumerate(statements, 1)]
        for step in steps:
            if controls_transaction(step.statement.text, self.dialect.lexis):
                raise MigrationError(
                    f"{step.where()}: {step.statement.text.split()[0]} controls a transaction; migrate runs the "
                    "migration in its own (leave out BEGIN, COMMIT, ROLLBACK and the like); nothing has run")
            _refuse_attribute_names(self.config, step)
            self._refuse_loopback(step)
        return steps

    def _refuse_loopback(self, step: Step) -> None:
        """A statement whose changes the triggers would log as the publisher's own user: the
        deletes of a TRUNCATE of a published table, the rows a data statement naming one changes.
        The cycle would pass them over as loopback, published nowhere: refused before anything
        runs, naming the way out."""
        from publisher.database import publisher_user
        from publisher.rules.classify import is_loopback

        if self.config.publisher.allow_loopback:
            return
        own = publisher_user(self.config, self.held.engine)
        if not is_loopback(self.held.engine.url.username, own):
            return
        text, lexis = step.statement.text, self.dialect.lexis
        if is_truncate(text, lexis) and step.captures:
            what = "the deletes of this TRUNCATE"
        elif changes_rows(text, lexis) and any(word.lower() in self.member_of for word in words_in(text, lexis)):
            what = "the rows this statement changes"
        else:
            return
        raise MigrationError(
            f"{step.where()}: {what} would be logged by {own!r}, the publisher's own user (database.user, else the "
            f"URL's user), and passed over as loopback: published nowhere. Run migrate as the application's user "
            f"(--set database.url=… with that user; PUBLISHER_DATABASE_PASSWORD its password) or set "
            f"publisher.allow_loopback = true; nothing has run")

    def tables_of(self, captures: Sequence[str]) -> list[str]:
        return existing(self.config, self.held, [t for capture in captures for t in self.families[capture]])

    def execute(self, statements: Sequence[str]) -> None:
        for statement in statements:
            self.held.run(statement)
            self.result.sql.append(statement)

    def take(self, tables: Sequence[str]) -> float:
        """Take the tables from the application (`begin_migration_sql`), trying again while its
        transactions hold them, for at most TAKE_SECONDS; when they were taken."""
        statements = self.dialect.begin_migration_sql(tables)
        started = time.monotonic()
        pause = 0.001
        while True:
            try:
                self.execute(statements)
                break
            except Exception as exc:
                if not self.dialect.migration_lock_busy(exc):
                    raise
                if time.monotonic() > started + TAKE_SECONDS:
                    raise TimeoutError(f"the application's transactions held its tables for {TAKE_SECONDS:.0f} s "
                                       "without a moment's pause (try again at a quieter time)") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        taken = time.monotonic()
        self.result.waited_for_writers += taken - started
        self.taken = list(tables)
        return taken

    def give_back(self, taken: float) -> None:
        self.execute(self.dialect.end_migration_sql())
        self.taken = None
        self.result.writers_held = max(self.result.writers_held, time.monotonic() - taken)

    def execute_taken(self, statements: Sequence[str]) -> None:
        """Statements run one by one with the tables taken. One the database refused for the
        lock it ran under (`Capture.lock_gone_stale`; nothing of it done) runs again, up to
        RETAKES times, with the tables taken anew (`Capture.retake_sql`)."""
        for statement in statements:
            for retake in range(RETAKES + 1):
                try:
                    self.execute([statement])
                    break
                except Exception as exc:
                    if self.taken is None or retake == RETAKES or not self.dialect.lock_gone_stale(exc):
                        raise
                    self.result.retaken += 1
                    self._retake(statement, exc)

    def _retake(self, statement: str, refusal: Exception) -> None:
        from publisher.errors import root_cause

        try:
            self.execute(self.dialect.retake_sql(self.taken or []))
        except Exception as exc:
            raise RuntimeError(
                f"the database refused {statement.split()[0]} under the migration's lock ({root_cause(refusal)}), "
                f"and taking the tables anew was refused too ({root_cause(exc)}): grant what that names to the "
                "migration's user, or run the migration again") from None

    def before(self, statement: str, captures: Sequence[str]) -> bool:
        """Run what goes before a statement on published tables (`before_migration_sql`), and
        instead of a TRUNCATE the DELETE whose triggers log it where no trigger sees a TRUNCATE.
        Whether the statement itself is still to run."""
        lexis = self.dialect.lexis
        self.execute(self.dialect.before_migration_sql(statement, self.tables_of(captures)))
        if not is_truncate(statement, lexis):
            return True
        named = {name.name.lower() for name in altered_tables(statement, lexis) if self._here(name)}
        emptied = [t for t in self.tables_of(captures) if t.lower() in named]
        self.result.truncated += emptied
        instead = self.dialect.truncate_sql(statement, emptied)
        self.execute_taken([s for s in instead if s != statement])
        return statement in instead

    def after(self, statement: str, captures: Sequence[str]) -> None:
        """The capture of each table whose shape the statement changed, made anew and recorded;
        one that cannot be captured any more fails the statement (undone where DDL is)."""
        if not is_ddl(statement, self.dialect.lexis):
            return
        stale = follow_shapes(self.config, self.held.engine, set(captures), self.execute, strict=True)
        for found in stale:
            if found.published_as not in self.result.shapes_recorded:
                self.result.shapes_recorded.append(found.published_as)
            if found.published_as not in self.result.resync:
                self.result.resync.append(found.published_as)

    def step(self, step: Step) -> None:
        self.current = step
        statement = step.statement.text
        if not step.captures or self.before(statement, step.captures):
            self.execute([statement])
        if step.captures:
            self.after(statement, step.captures)
        self.ran.append(step)

    def abandon(self, taken: bool) -> None:
        """After a failure: the transaction rolled back, the tables given back."""
        try:
            self.held.rollback()
            for statement in self.dialect.end_migration_sql() if taken else []:
                self.held.run(statement)
        except Exception:  # the connection is gone: its locks went with it
            log.debug("could not end the migration's locks", exc_info=True)

    def refused(self, exc: Exception) -> MigrationError:
        """What the failure of the current step says: which statement, why, and what had run."""
        from publisher.errors import root_cause

        step = self.current
        where = step.where() if step else "the migration"
        if self.dialect.transactional_ddl:
            done = "nothing of the migration was kept (it ran in one transaction, rolled back)"
        elif self.ran:
            done = (f"statements {', '.join(str(s.number) for s in self.ran)} had run and are kept (each DDL "
                    f"statement commits on its own), with the capture of their tables made anew")
        else:
            done = "no statement of the migration had run"
        text = step.statement.text if step else ""
        shown = text if len(text) <= 200 else text[:200] + "…"
        return MigrationError(f"{where} failed: {root_cause(exc)}\n  {shown}\n{done}")


def _refuse_attribute_names(config: Config, step: Step) -> None:
    """A column of a class's table named like one of its multi-valued attributes or references
    would publish two values under one name: refused before anything runs."""
    words = {word.lower() for word in words_in(step.statement.text)}  # a name as written, in any case
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


def existing(config: Config, held: HeldConnection, tables: Sequence[str]) -> list[str]:
    """The tables that exist, as the database names them, each once (with the event log's
    helper tables, when they are asked for)."""
    schema = table_schema(config, held.engine)
    names = {name.lower(): name for name in reflection(held.engine, schema).get_table_names(schema=schema)}
    return list(dict.fromkeys(names[t.lower()] for t in tables if t.lower() in names))

