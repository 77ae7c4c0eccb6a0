"""PostgreSQL's native capture: the triggers of a table calling one C function
(`native/postgresql/publisher_capture.c`) instead of PL/pgSQL functions written for its columns.

It logs what the PL/pgSQL capture logs (a test holds the two equal), at about a third of its cost
to the application's writes: it writes the event log's rows itself (a heap insert and its index
entries), with no INSERT statement to start per call. It reads the table's columns and key from each row, so a
migration never breaks it and needs no event trigger. It needs the library on the database
server (built there with `make native`) and a superuser to create a C function, which hosted
services do not allow: so it is chosen per table (`publisher install --native`), and the
PL/pgSQL capture stays what every site can install. A logical class's child tables keep the
PL/pgSQL capture: their rows are logged as their parent's values.
"""
from __future__ import annotations

import abc

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from publisher.capture.base import Capture, literal
from publisher.capture.tables import CaptureError, Style, Table
from publisher.databases.postgresql.names import (
    POSTGRESQL_NEW_ROWS,
    POSTGRESQL_OLD_ROWS,
    postgresql_function_names,
    postgresql_trigger_names,
)

NATIVE_LIBRARY = "publisher_capture"
"""The shared library's name, as the server finds it in its `$libdir`, and its function's."""
NATIVE_FUNCTION = "publisher_capture"
_LOGGED_COLUMNS = ("status", "event_type", "perpetrator", "table_name", "table_key", "column_name", "old_value",
                   "new_value", "transaction_id")
"""The event log's columns the function fills, in the order of its trigger arguments."""


def native_ddl(dialect: Capture) -> list[str]:
    """The C function, once per schema."""
    return [f"CREATE OR REPLACE FUNCTION {dialect.qualify(NATIVE_FUNCTION)}() RETURNS trigger LANGUAGE c "
            f"AS {literal(NATIVE_LIBRARY)}, {literal(NATIVE_FUNCTION)}"]


def check_native(dialect: Capture) -> None:
    """Refuse, saying why and what to do, where the server cannot run the native capture: the
    library is not installed there, or the user may not create C functions."""
    with dialect.engine.connect() as conn:
        try:
            for statement in native_ddl(dialect):
                conn.execute(text(statement))
        except DBAPIError as exc:
            reason = str(exc.orig).strip().splitlines()[0]
            raise CaptureError(
                f"the native capture cannot be installed: {reason}. It needs the library {NATIVE_LIBRARY!r} in the "
                f"database server's library directory (`make native` on the server) and a superuser; "
                f"without --native the PL/pgSQL capture needs neither") from None
        finally:
            conn.rollback()


def native_trigger_sql(dialect: Capture, table: Table, style: Style) -> list[str]:
    """The table's three triggers on the C function, replacing the PL/pgSQL capture's."""
    name, function = dialect.qualify(table.name), dialect.qualify(NATIVE_FUNCTION)
    row_trigger, update, truncate = postgresql_trigger_names(table.name)
    columns = dialect.config.event_log.columns
    arguments = ", ".join(literal(a) for a in (
        _event_log(dialect), table.logged_name, style, row_trigger,
        *(getattr(columns, role) or "" for role in _LOGGED_COLUMNS)))
    drops = [f"DROP TRIGGER IF EXISTS {dialect.quote(t)} ON {name}" for t in (row_trigger, update, truncate)]
    functions = map(dialect.qualify, postgresql_function_names(table.name))
    return [
        *drops,
        *(f"DROP FUNCTION IF EXISTS {f}()" for f in functions),
        f"CREATE TRIGGER {dialect.quote(row_trigger)} AFTER INSERT OR DELETE ON {name} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}({arguments})",
        f"CREATE TRIGGER {dialect.quote(update)} AFTER UPDATE ON {name} "
        f"REFERENCING OLD TABLE AS {dialect.quote(POSTGRESQL_OLD_ROWS)} NEW TABLE AS "
        f"{dialect.quote(POSTGRESQL_NEW_ROWS)} FOR EACH STATEMENT EXECUTE FUNCTION {function}({arguments})",
        f"CREATE TRIGGER {dialect.quote(truncate)} BEFORE TRUNCATE ON {name} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}({arguments})",
    ]


def _event_log(dialect: Capture) -> str:
    """The event log, schema and all: the function runs in the application's sessions, whose
    search_path is theirs."""
    schema = dialect.schema
    if schema is None:
        with dialect.engine.connect() as conn:
            schema = conn.execute(text("SELECT current_schema()")).scalar_one()
    return f"{dialect.quote(schema)}.{dialect.quote(dialect.config.event_log.table)}"


def native_tables(conn: Connection, schema: str | None) -> set[str]:
    """The tables (in lower case) whose capture triggers call the native capture: any of the
    three, as a table whose row trigger is dropped (its capture switched off) is still native,
    whatever their names (a renamed table's are named for its old name)."""
    rows = conn.execute(text(
        "SELECT c.relname, t.tgname FROM pg_catalog.pg_trigger t "
        "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid "
        "JOIN pg_catalog.pg_language l ON l.oid = p.prolang "
        "WHERE NOT t.tgisinternal AND l.lanname = 'c' AND p.proname = :function "
        "AND n.nspname = COALESCE(:schema, current_schema())"), {"function": NATIVE_FUNCTION, "schema": schema})
    return {table.lower() for table, _ in rows}


class NativeCapture(Capture, abc.ABC):
    """A capture that may be native (`PostgreSQLCapture`): the answers `Capture` leaves at
    "no native capture", given."""

    has_native_capture = True

    def native_install_sql(self) -> list[str]:
        check_native(self)
        return native_ddl(self)

    def check_native(self) -> None:
        check_native(self)

    def native_trigger_sql(self, table: Table, style: Style) -> list[str]:
        return native_trigger_sql(self, table, style)

    def native_tables(self) -> set[str]:
        with self.engine.connect() as conn:
            return native_tables(conn, self.schema)
