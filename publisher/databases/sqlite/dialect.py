"""SQLite."""
from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from typing import Any

from sqlalchemy import ColumnElement, LargeBinary, case, cast, func, literal_column, null, select, text
from sqlalchemy import types as sqltypes
from sqlalchemy.engine import URL, Connection, Engine

from publisher.dialects.base import Dialect

_ISO_DATE = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*"
"""An event_time is read as a time only when it starts as an ISO date (YYYY-MM-DD); then
julianday() reads the rest, taking a `Z` or an `+HH:MM` offset into account. This keeps out what
julianday() would also take but is no event time: 'now', bare day numbers, times without a date."""
_NO_TIME = -1.0
"""Below every Julian day number of a four-digit year: rows that are not a time come first."""

_ENCODINGS = {"UTF-8": "utf-8", "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}


class SQLite(Dialect):
    """One file, one writer at a time, any value in any column. A statement takes at most 999
    parameters (query-back's CHUNK stays under it)."""

    name = "sqlite"
    title = "SQLite"
    capture = "publisher.databases.sqlite.capture.SQLiteCapture"
    workshop = "publisher.databases.sqlite.workshop.SQLiteWorkshop"
    gives_way_message = "database is locked"

    def keys_spelled_by_type(self) -> bool:
        """No: a column stores the value as given, whatever its declared type (a TEXT column may be
        read as a BLOB's bytes or an INTEGER's int, published from what they are; a primary key
        that is not INTEGER may hold NULL: no object, not read, and counted). The triggers and
        the rows read back spell a value alike, so only integer keys are spelled by kind."""
        return False

    def matched_as_text(self, sql_type: Any) -> bool:
        """A REAL or NUMERIC column's, and one of no declared type: a REAL's text is not exact, so
        the value a trigger logged may not compare equal to the stored one; and a column with no
        type keeps each value's own storage class (an integer never equals, nor is greater than,
        the text a key is spelled in)."""
        return isinstance(sql_type, (sqltypes.Numeric, sqltypes.Float, sqltypes.NullType))

    def begin_alone(self) -> list[str]:
        """As the writer: one writer at a time, for the whole database. A snapshot's chunk is the
        one writer from its read to its commit; a read of the whole event log (a metrics
        scrape's) holds a read lock that delays a cycle's acknowledgement."""
        return ["BEGIN IMMEDIATE"]

    def serves_subscribers(self) -> bool:
        """By record_id: one writer commits at a time, so commit order is record_id order and a
        snapshot is the highest record_id (a check-in's transaction begins alone, `begin_alone`)."""
        return True

    def environment_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.OperationalError,)

    def script_calls(self, script: str) -> list[str]:
        """A statement a call: the driver runs one statement per call, where the PostgreSQL driver
        runs a whole script statement by statement. Cut where a statement is complete by SQLite's
        own rule, which knows its strings and trigger bodies (`model.statements`)."""
        from publisher.model.statements import Lexis, split_statements

        return [statement.text for statement in split_statements(script, Lexis(complete=sqlite3.complete_statement))]

    def ids_given_again(self, conn: Connection, table: str) -> bool:
        """Without AUTOINCREMENT SQLite gives the highest id again once its row is deleted (as
        purge and delete_processed_rows do)."""
        sql = conn.execute(select(literal_column("sql")).select_from(text("sqlite_master")).where(
            literal_column("type") == "table", literal_column("name") == table)).scalar()
        return sql is not None and not re.search(r"\bAUTOINCREMENT\b", str(sql), re.IGNORECASE)

    def holds_any(self, column: ColumnElement[Any], characters: str) -> ColumnElement[bool]:
        """By GLOB: SQLite has no REGEXP unless the application defines one."""
        return column.op("GLOB")(f"*{characters}*")

    def stored_encoding(self, conn: Connection) -> tuple[str, str]:
        """The text encoding the database file stores."""
        name = str(conn.exec_driver_sql("PRAGMA encoding").scalar())
        return _ENCODINGS.get(name, "utf-8"), name

    def catalog_version(self, engine: Engine, schema: str | None) -> str | None:
        """The file's counter of schema changes, which a change undone still moves, with a digest
        of the schema's own statements, which another file at the same path cannot share unless
        its schema is the same (an attached database's is not asked)."""
        if schema is not None:
            return None
        with engine.connect() as conn:
            counter = conn.exec_driver_sql("PRAGMA schema_version").scalar()
            rows = conn.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").all()
        return f"{counter}:{hashlib.sha256(repr(rows).encode('utf-8')).hexdigest()}"

    def table_schema(self, configured: str | None) -> str | None:
        """None, whatever is configured: SQLite has no schemas, and its trigger bodies must not
        qualify a name (`Capture.qualify`)."""
        return None

    def default_schema(self, engine: Engine) -> str:
        """The main database's name, which stands for a schema in SQLAlchemy's reflection."""
        return "main"

    def connect_args(self, timeout: float) -> dict[str, Any]:
        """Wait on a locked file instead of failing at once."""
        return {"timeout": timeout}

    def url(self, url: URL) -> URL:
        """A relative path made absolute: Spark's executors do not share the driver's directory."""
        database = url.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            return url
        return url.set(database=os.path.abspath(database))

    def readable_time(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """As a Julian day number (whole milliseconds). SQLite stores whatever text it was given,
        and compared as text '2026-11-23T01:00:00Z' sorts after every '2026-11-23 …' of that day
        whatever its offset."""
        return case((column.op("GLOB")(_ISO_DATE), func.julianday(column)), else_=null())

    def time_key(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """julianday() alone, evaluated on every row the sort sees: the ISO check of
        `readable_time` would double the sort's cost. What julianday() reads besides ('now', a
        bare day number, a time without a date) is ordered by what it reads, and rejected when
        read."""
        return func.coalesce(func.julianday(column), _NO_TIME)

    def statement_mark(self, event_time: ColumnElement[Any]) -> ColumnElement[Any] | None:
        """The event_time: 'now' is fixed within a statement, and one writer at a time logs a
        statement's rows one after the other."""
        return event_time

    def time_now(self) -> ColumnElement[Any]:
        return func.julianday("now")

    def exact(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """As bytes: text may hold any bytes, which the driver fails to decode."""
        return cast(column, LargeBinary)

    def text_as_read(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """As bytes, decoded row by row: text may hold any bytes, which the driver fails to decode."""
        return cast(column, LargeBinary)

    def event_time_as_read(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """As bytes, as every text: an event_time comes back as text, written in UTC."""
        return cast(column, LargeBinary)

    def event_time_apart(self, column: ColumnElement[Any],
                         readable: ColumnElement[Any]) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        """Its time as `readable_time` gives it (a Julian day number), since the event_time is read
        as its text (bytes), which is also what a rejection shows."""
        return readable, null()

    def octets(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.coalesce(func.length(cast(column, LargeBinary)), 0)

    def prepare_reading(self, driver_connection: Any) -> None:
        """A TEXT column may hold a BLOB (SQLite keeps any value in any column), whose CAST to
        TEXT gives bytes that are no UTF-8: hand those over as bytes, which are published as a
        string attribute's binary value is (base64), instead of the whole read failing."""
        driver_connection.text_factory = _lenient_text

    def value_text_sql(self, ref: str, binary: bool, sql_type: str) -> str:
        """`CAST(... AS TEXT)`, which is what storing into the event log's TEXT columns does; a
        binary value is read as bytes (SQLite has no base64), and query-back encodes it in
        Python. `CAST(... AS BLOB)`: a BLOB column may hold text or a number, whose bytes
        (UTF-8) are its binary value, never a text to be taken for base64."""
        if binary:
            return f"CAST({ref} AS BLOB)"
        return super().value_text_sql(ref, binary, sql_type)


def _lenient_text(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data
