"""SQLite capture: three row triggers per table (see `rows`), checking keys row by row.

SQLite has no base64 function and triggers cannot use CTEs, so a binary (BLOB) column is logged
as a field query-back event (type 7 on insert, 8 on update) without values; the publisher reads
the value back and base64-encodes it. A BLOB of a logical class's child table logs a type 8 of
the attribute, one per parent an update changes. One writer at a time keeps the application's
writes out while a table's shape row (`capture.shape_history`) is taken with its triggers.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from sqlalchemy import Connection, text

from publisher.capture.base import carrying, literal
from publisher.capture.rows import ROW_TRIGGER_SUFFIXES, RowTriggers
from publisher.capture.tables import CaptureError, Column, Table
from publisher.model.keys import NULL_KEY_VALUE
from publisher.model.statements import Lexis, drops_a_column
from publisher.model.values import ValueType

SQLITE_TRIGGER_SUFFIXES = ROW_TRIGGER_SUFFIXES


def sqlite_trigger_name(table: str, suffix: str) -> str:
    return f"{table}_publisher_{suffix}"


class SQLiteCapture(RowTriggers):
    """Every event is one INSERT guarded by its condition. Trigger bodies name no schema: the
    schema is None, so `qualify` quotes the bare name."""

    name = "sqlite"

    def trigger_name(self, table: str, suffix: str) -> str:
        return sqlite_trigger_name(table, suffix)

    def logs_value(self, column: Column) -> bool:
        return column.value_type is not ValueType.OCTET

    def changed(self, column: Column, old: str, new: str) -> str:
        return self._compare_text(column, old, "IS NOT", new)

    def same(self, column: Column, old: str, new: str) -> str:
        return self._compare_text(column, old, "IS", new)

    def _compare_text(self, column: Column, old: str, operator: str, new: str) -> str:
        """`IS` on values compares 1 and 1.0 equal, and text by the column's collation (NOCASE,
        RTRIM): the texts are compared, byte for byte."""
        old_text = self.as_text(self.ref(old, column), column)
        new_text = self.as_text(self.ref(new, column), column)
        return f"{old_text} COLLATE BINARY {operator} {new_text} COLLATE BINARY"

    def carriers(self, conn: Connection, any_trigger: bool) -> tuple[str, ...]:
        return carrying(self.triggers(conn), self.capture_trigger_names)

    def triggers(self, conn: Connection) -> list[tuple[str, str]]:
        rows = conn.execute(text("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"))
        return [(str(trigger), str(table)) for trigger, table in rows]

    def execute(self, statements: Sequence[str]) -> None:
        with self.engine.connect() as conn:
            # Python's sqlite3 runs DDL outside any transaction unless one is begun explicitly.
            conn.exec_driver_sql("BEGIN")
            for statement in statements:
                conn.exec_driver_sql(statement)
            conn.commit()

    lexis = Lexis(bracket_names=True, complete=sqlite3.complete_statement)
    """SQLite: `[name]` is a quoted name, and trigger bodies hold `;`."""

    def begin_migration_sql(self, tables: Sequence[str]) -> list[str]:
        """Python's sqlite3 runs DDL outside any transaction unless one is begun explicitly; an
        immediate one makes the other writers wait (their busy timeout) rather than fail."""
        return ["BEGIN IMMEDIATE"]

    def before_migration_sql(self, statement: str, tables: Sequence[str]) -> list[str]:
        """SQLite refuses to drop a column a trigger names: before such an ALTER the capture goes,
        and comes back for the new shape right after it, in the same transaction."""
        if not drops_a_column(statement, self.lexis):
            return []
        return [sql for table in tables for sql in self.drop_capture_sql(table, table, False)]

    def truncate_sql(self, statement: str, tables: Sequence[str]) -> list[str]:
        """SQLite has no TRUNCATE: a DELETE of every row, whose triggers log each."""
        return [f"DELETE FROM {self.qualify(table)}" for table in tables]

    def check(self, table: Table) -> None:
        for _, column in table.logged_key:
            if column.value_type is ValueType.OCTET:
                raise CaptureError(
                    f"table {table.name!r}: binary key column {column.name!r} cannot be written "
                    "in a table_key on SQLite, which has no base64 function"
                )

    def key_sql(self, table: Table, row: str) -> str:
        """A NULL key column (a primary key that is not INTEGER may hold one) is written as a
        value no table_key holds, never as a NULL table_key that would fail the statement."""
        parts = []
        for name, column in table.logged_key:
            ref = self.ref(row, column)
            if column.value_type is ValueType.INT:
                value = f"CAST({ref} AS TEXT)"
            else:
                value = self.render("key_value", value=ref)
            parts.append(f"{literal(name + '=')} || COALESCE({value}, {literal(NULL_KEY_VALUE)})")
        return " || '+' || ".join(parts)
