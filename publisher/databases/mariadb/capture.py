"""MariaDB and MySQL capture: three row triggers per table (see `rows`), logging what the
PostgreSQL and SQLite triggers log for the same changes. They check keys row by row, as SQLite's
do, but log binary values as base64 (no query-backs, but for large ones: below). Their
transaction_id names the statement, not the transaction (no transaction id a trigger can read is
reliable here): the cycle's window keeps it together, as it keeps PostgreSQL's transactions.

What these databases do otherwise, and how capture meets it:

- Identifiers are quoted with backticks, which mean an identifier whatever the sql_mode
  (`ANSI_QUOTES` makes double quotes identifiers too); string literals never hold a backslash,
  whose meaning `NO_BACKSLASH_ESCAPES` changes, and concatenation is CONCAT, never `||`.
- A TIMESTAMP's text depends on the session's time_zone: the triggers log it in UTC.
- A value's text is utf8mb4 whatever the column's character set (latin1, utf8mb3) or the
  changing session's; "did the column change" compares those texts' bytes, as a collation
  (case-insensitive, or PAD SPACE, as utf8mb4_bin is) would call 'a' and 'A ' equal.
- Foreign key actions (ON DELETE CASCADE, ON UPDATE SET NULL, ...) change rows without firing
  their triggers, so a table whose rows they change is refused, but for a child table's cascade
  from its parent: the parent's delete is logged, and takes the object's values with it.
- A column whose value has no text (BIT, spatial and other types SQLAlchemy does not know) is
  refused.
- Trigger statements commit one by one, so a table's shape row (`capture.shape_history`) is taken
  before them.
- DDL commits implicitly, so `execute` undoes a failed install by hand (`restore`), finding the
  capture table it made by its quoted name (`capture.shape`).
- A column dropped or renamed after `install` makes the triggers fail the application's writes
  until the next cycle's reinstall (`capture.shape`).
- TO_BASE64 breaks its text every 76 characters, and REPLACE takes the breaks out in time that
  grows with the square of the text's length: a binary value of more than 64 KiB is logged as
  a field query-back (7 or 8), as SQLite logs every binary value, and published as read.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

from sqlalchemy import Connection, Engine, text

from publisher.capture.resyncs import RESYNCS_TABLE_SUFFIX
from publisher.capture.rows import ROW_TRIGGER_SUFFIXES, RowTriggers
from publisher.capture.shape import CAPTURE_TABLE_SUFFIX
from publisher.capture.shape_history import SHAPES_TABLE_SUFFIX
from publisher.capture.tables import CaptureError, Column, Table
from publisher.databases.mariadb.dialect import MYSQL_TIME_ZONE
from publisher.dialects.reflection import reflection
from publisher.model.column_types import textless_column, type_name
from publisher.model.statements import Lexis
from publisher.model.values import ValueType

LOCK_WAIT_TIMEOUT = 1205
TABLE_USED_BY_STATEMENT = 1442
"""The server's error for a lock not granted in time (at once, with NOWAIT)."""
MARIADB_NAME_CHARACTERS = 64
"""The longest trigger name MariaDB and MySQL accept."""
CHANGING_ACTIONS = ("CASCADE", "SET NULL", "SET DEFAULT")
"""Foreign key actions that change the referencing rows, without firing their triggers."""


STATEMENT_ID_CHARS = 47
"""CONCAT(CONNECTION_ID(), '@', NOW(6)): a connection id of up to 20 digits, '@' and 26 characters."""

LOGGED_BINARY_BYTES = 64 << 10
"""The longest binary value the triggers log as base64: REPLACE's time on its text (about 1 ms)."""


def mariadb_trigger_name(table: str, suffix: str) -> str:
    """`<table>_publisher_<suffix>`; where that is too long, the table's name is cut and marked
    with a digest of the whole, so that two long tables sharing a prefix keep their triggers."""
    name = f"{table}_publisher_{suffix}"
    if len(name) <= MARIADB_NAME_CHARACTERS:
        return name
    marked = f"_{hashlib.sha256(table.encode('utf-8')).hexdigest()[:8]}_publisher_{suffix}"
    return table[: MARIADB_NAME_CHARACTERS - len(marked)] + marked


def mariadb_trigger_names(table: str) -> set[str]:
    return {mariadb_trigger_name(table, s) for s in ROW_TRIGGER_SUFFIXES.values()}


class MariaDBCapture(RowTriggers):
    """Every event is one INSERT in an IF of its condition, in a trigger that logs in UTC."""

    name = "mariadb"

    def carriers(self, conn: Connection, any_trigger: bool) -> tuple[str, ...]:
        return tuple(sorted({table for _, table in triggered(conn, self.schema)}))

    def triggers(self, conn: Connection) -> list[tuple[str, str]]:
        return [(trigger, table) for trigger, table, _ in _schema_triggers(conn, self.schema)]

    def execute(self, statements: Sequence[str]) -> None:
        execute(self.engine, self.schema, statements)

    def quote(self, name: str) -> str:
        return str(self.preparer.quote_identifier(name))

    lexis = Lexis(hash_comments=True, backslash_escapes=True)
    """MariaDB and MySQL: `#` comments, and backslash escapes in quoted text."""
    transactional_ddl = False
    """Each DDL statement commits on its own: a migration holds its tables with LOCK TABLES
    instead, which DDL and trigger statements keep (the locks go with UNLOCK TABLES alone), so
    no write of the application runs between a statement and the capture made anew for it."""

    def begin_migration_sql(self, tables: Sequence[str]) -> list[str]:
        """The tables, the event log and its helpers locked at once, or not at all (MariaDB's
        NOWAIT; `migration_lock_busy`): a LOCK TABLES that waited, holding the event log, for an
        application transaction that read the table and is about to write it would be a deadlock
        whose victim the server picks among the application's transactions, never the lock."""
        nowait = " NOWAIT" if getattr(self.engine.dialect, "is_mariadb", False) else ""
        return ["LOCK TABLES " + ", ".join(f"{name} WRITE" for name in self._locked(tables)) + nowait]

    def _locked(self, tables: Sequence[str]) -> list[str]:
        log = self.config.event_log.table
        helpers = (log, f"{log}{CAPTURE_TABLE_SUFFIX}", f"{log}{SHAPES_TABLE_SUFFIX}", f"{log}{RESYNCS_TABLE_SUFFIX}")
        return [self.qualify(name) for name in dict.fromkeys([*tables, *helpers])]

    def migration_lock_busy(self, error: Exception) -> bool:
        return bool(error.args) and error.args[0] == LOCK_WAIT_TIMEOUT

    def lock_gone_stale(self, error: Exception) -> bool:
        """Now and then, with the application writing, a DELETE under LOCK TABLES has its
        trigger's INSERT refused ("Can't update table 'event_log' in stored function/trigger
        because it is already used by statement which invoked this stored function/trigger"),
        again after UNLOCK TABLES and LOCK TABLES on the same connection: an instance of the
        table the server keeps open still counts as used by an earlier statement. The
        statement is undone; `retake_sql` closes and reopens the locked tables."""
        return bool(error.args) and error.args[0] == TABLE_USED_BY_STATEMENT

    def retake_sql(self, tables: Sequence[str]) -> list[str]:
        """FLUSH TABLES of write-locked tables closes and reopens them, the locks kept."""
        return ["FLUSH TABLES " + ", ".join(self._locked(tables))]

    def end_migration_sql(self) -> list[str]:
        return ["UNLOCK TABLES"]

    def truncate_sql(self, statement: str, tables: Sequence[str]) -> list[str]:
        """No trigger fires on TRUNCATE: a DELETE of every row instead, whose triggers log each.
        Not the TRUNCATE after it: it would commit the DELETE before failing where it fails (a
        table a foreign key references), and it resets AUTO_INCREMENT, which the DELETE leaves."""
        return [f"DELETE FROM {self.qualify(table)}" for table in tables]

    def event_log_ddl(self) -> list[str]:
        """The event log and its index, but where the index exists already (see the template)."""
        table, index = super().event_log_ddl()
        inspector = reflection(self.engine, self.schema)
        name = f"{self.config.event_log.table}_status_idx"
        if not inspector.has_table(self.config.event_log.table, schema=self.schema):
            return [table, index]
        self._check_statement_column()
        indexes = inspector.get_indexes(self.config.event_log.table, schema=self.schema)
        if any(found["name"] == name for found in indexes):
            return [table]
        return [table, index]

    def _check_statement_column(self) -> None:
        """An event log made before (or by a site) must hold the triggers' statement id (see
        log_event.sql), or every write to a published table would fail on it."""
        log, column = self.config.event_log.table, self.config.event_log.columns.transaction_id
        with self.engine.connect() as conn:
            found = conn.execute(
                text("SELECT DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, COLUMN_TYPE FROM information_schema.COLUMNS "
                     "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
                     "AND COLUMN_NAME = :column"),
                {"schema": self.schema, "table": log, "column": column},
            ).first()
        fix = f"ALTER TABLE {log} {{}} {column} VARCHAR(64)"
        if found is None:
            raise CaptureError(f"event log {log!r} has no column {column!r}, where the triggers log the statement's "
                               f"id: {fix.format('ADD')}")
        data_type, length, column_type = found
        if data_type.lower() not in ("varchar", "char", "text", "tinytext", "mediumtext", "longtext") or (
            length is not None and length < STATEMENT_ID_CHARS
        ):
            raise CaptureError(
                f"event log {log!r}: column {column!r} is {column_type}, which cannot hold the statement id the "
                f"triggers log there (up to {STATEMENT_ID_CHARS} characters, as '308@2026-11-25 15:38:14.441742'); "
                f"the application's writes would fail on it: {fix.format('MODIFY')}"
            )

    def literal(self, text: str) -> str:
        """A utf8mb4 hex literal where the text holds a backslash, which the server's sql_mode
        would otherwise decide the meaning of."""
        if "\\" in text:
            return f"_utf8mb4 X'{text.encode('utf-8').hex()}'"
        return "'" + text.replace("'", "''") + "'"

    def trigger_name(self, table: str, suffix: str) -> str:
        return mariadb_trigger_name(table, suffix)

    def render(self, template: str, **values: str) -> str:
        if template == "create_trigger":
            replace = "OR REPLACE " if self._replaces_in_place() else ""
            values = {**values, "time_zone": self.literal(MYSQL_TIME_ZONE), "or_replace": replace}
        return super().render(template, **values)

    def replacing(self, trigger: str, create: str) -> list[str]:
        """MariaDB replaces a trigger in one statement. DDL commits on its own here, so a DROP
        then a CREATE would leave a moment in which the table's changes are not logged; MySQL
        has no CREATE OR REPLACE TRIGGER, and keeps that moment (docs: guides/mariadb.md)."""
        return [create] if self._replaces_in_place() else super().replacing(trigger, create)

    def _replaces_in_place(self) -> bool:
        """MariaDB, not MySQL: the dialect knows which once it has connected."""
        if self.engine.dialect.server_version_info is None:
            self.engine.connect().close()
        return bool(getattr(self.engine.dialect, "is_mariadb", False))

    def _published(self, row: str, column: Column) -> str:
        """What tells two values' published texts apart: the text's bytes; a binary value's own
        bytes, which its base64 spells one to one."""
        ref = self.ref(row, column)
        if column.value_type is ValueType.OCTET:
            return ref
        return f"CAST({self.as_text(ref, column)} AS BINARY)"

    def transaction_sql(self) -> str:
        return "CONCAT(CONNECTION_ID(), '@', NOW(6))"

    def logged_bytes(self, column: Column) -> int | None:
        """A binary value of more than LOGGED_BINARY_BYTES is logged as a field query-back:
        its base64 goes through REPLACE, whose time grows with the square of its length (an
        UPDATE of a 6 MB value took 7.5 s with the triggers, against 0.12 s without)."""
        return LOGGED_BINARY_BYTES if column.value_type is ValueType.OCTET else None

    def changed(self, column: Column, old: str, new: str) -> str:
        return f"NOT ({self.same(column, old, new)})"

    def same(self, column: Column, old: str, new: str) -> str:
        return f"{self._published(old, column)} <=> {self._published(new, column)}"

    def key_sql(self, table: Table, row: str) -> str:
        parts = []
        for name, column in table.logged_key:
            value = self.as_text(self.ref(row, column), column)
            if column.value_type is not ValueType.INT:
                value = self.render("key_value", value=value)
            parts.append(f"{self.literal(name + '=')}, {value}")
        return "CONCAT(" + ", '+', ".join(parts) + ")"

    def check(self, table: Table) -> None:
        for column in (*table.key, *table.values):
            problem = textless_column("mysql", table.name, column.name, type_name(column.sql_type))
            if problem is not None:
                raise CaptureError(problem)
        self._check_reflected(table)
        self._check_foreign_keys(table)

    def _check_reflected(self, table: Table) -> None:
        """SQLAlchemy reads a MySQL table from SHOW CREATE TABLE, which under ANSI_QUOTES writes
        a name's double quotes doubled, and it keeps them so: a trigger would name no column."""
        query = text(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table"
        )
        with self.engine.connect() as conn:
            names = set(conn.execute(query, {"schema": self.schema, "table": table.name}).scalars())
        for column in (*table.key, *table.values):
            if column.name not in names:
                raise CaptureError(
                    f"table {table.name!r}: column {column.name!r} was misread (its table has no such column); "
                    "with ANSI_QUOTES in the installing session's sql_mode, a name holding a double quote is "
                    "read wrong: install from a session without it"
                )

    def _check_foreign_keys(self, table: Table) -> None:
        query = text(
            "SELECT CONSTRAINT_NAME, REFERENCED_TABLE_NAME, UPDATE_RULE, DELETE_RULE "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table"
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query, {"schema": self.schema, "table": table.name}).all()
        parent = table.multi_valued.parent if table.multi_valued else None
        for name, referenced, on_update, on_delete in rows:
            actions = [f"ON UPDATE {on_update}"] if on_update in CHANGING_ACTIONS else []
            if on_delete in CHANGING_ACTIONS and not (on_delete == "CASCADE" and referenced == parent):
                actions.append(f"ON DELETE {on_delete}")
            if actions:
                raise CaptureError(
                    f"table {table.name!r}: foreign key {name!r} to {referenced!r} has {' and '.join(actions)}, "
                    "whose changes fire no trigger on MariaDB/MySQL and would never be logged"
                )


def triggered(conn: Connection, schema: str | None) -> list[tuple[str, str]]:
    """(trigger, table) of the schema's triggers named as capture names them; names compared
    ignoring case where the server stores them folded (lower_case_table_names 1 or 2)."""
    found = []
    for trigger, table, folded in _schema_triggers(conn, schema):
        names = mariadb_trigger_names(table)
        if trigger in names or (folded and trigger.lower() in {n.lower() for n in names}):
            found.append((trigger, table))
    return found


def _schema_triggers(conn: Connection, schema: str | None) -> list[tuple[str, str, int]]:
    """(trigger, table, whether the server folds names) of the schema's triggers."""
    rows = conn.execute(
        text(
            "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE, @@lower_case_table_names FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = COALESCE(:schema, DATABASE())"
        ),
        {"schema": schema},
    ).all()
    return [(str(trigger), str(table), int(folded)) for trigger, table, folded in rows]


def execute(engine: Engine, schema: str | None, statements: Sequence[str]) -> None:
    """Run the statements; every DDL statement commits on its own, so if one fails, the schema's
    tables and triggers are put back as they were (`restore`) and the error raised."""
    with engine.connect() as conn:
        before = _snapshot(conn, schema)
        ran: list[str] = []
        try:
            for statement in statements:
                ran.append(statement)
                conn.exec_driver_sql(statement)
            conn.commit()
        except Exception:
            conn.rollback()
            restore(conn, schema, before, ran)
            conn.invalidate()  # restore changed its sql_mode and character set
            raise


_Snapshot = tuple[set[str], dict[str, tuple[str, str, str]]]


def _snapshot(conn: Connection, schema: str | None) -> _Snapshot:
    """The schema's tables, and its triggers' definitions: (statement, sql_mode, character set)."""
    where = "COALESCE(:schema, DATABASE())"
    tables = conn.execute(
        text(f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = {where}"), {"schema": schema}
    ).scalars()
    triggers = conn.execute(
        text(
            "SELECT TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, ACTION_STATEMENT, "
            f"SQL_MODE, CHARACTER_SET_CLIENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = {where}"
        ),
        {"schema": schema},
    ).all()
    definitions = {}
    for name, timing, event, table, body, sql_mode, charset in triggers:
        statement = f"CREATE TRIGGER {_q(conn, schema, name)} {timing} {event} ON {_q(conn, schema, table)} " \
                    f"FOR EACH ROW {body}"
        definitions[name] = (statement, sql_mode, charset)
    return set(tables), definitions


def restore(conn: Connection, schema: str | None, before: _Snapshot, ran: Sequence[str]) -> None:
    """Drop the tables and triggers that the statements `ran` made since `before`, and re-create
    the triggers they dropped or replaced, in the sql_mode and character set they were made in.
    What other sessions made meanwhile (a running publisher's lock table) is left alone."""
    tables, triggers = before
    now_tables, now_triggers = _snapshot(conn, schema)

    def touched(name: str) -> bool:
        return any(_q(conn, schema, name) in statement for statement in ran)

    for name, definition in now_triggers.items():
        if triggers.get(name) != definition and touched(name):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {_q(conn, schema, name)}")
    for name in sorted(now_tables - tables):
        if touched(name):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_q(conn, schema, name)}")
    for name, (statement, sql_mode, charset) in triggers.items():
        if now_triggers.get(name) != (statement, sql_mode, charset) and touched(name):
            conn.execute(text("SET SESSION sql_mode = :mode"), {"mode": sql_mode})
            conn.exec_driver_sql(f"SET NAMES {charset}")
            conn.exec_driver_sql(statement)
    conn.commit()


def _q(conn: Connection, schema: str | None, name: str) -> str:
    preparer = conn.dialect.identifier_preparer
    quoted = preparer.quote_identifier(name)
    return f"{preparer.quote_identifier(schema)}.{quoted}" if schema else quoted
