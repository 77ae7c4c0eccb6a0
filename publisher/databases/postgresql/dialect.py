"""PostgreSQL."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal_column, null, text
from sqlalchemy.engine import Connection, Engine

from publisher.databases.postgresql.arrays import ValueArrays
from publisher.dialects.base import Dialect
from publisher.dialects.value_lists import ValueLists

TEXT_SETTINGS: tuple[tuple[str, str], ...] = (
    ("datestyle", "ISO, YMD"),
    ("intervalstyle", "postgres"),
    ("extra_float_digits", "1"),
    ("timezone", "UTC"),
)
"""Settings that change a value's text; the capture functions and query-back's sessions both
run with these, whatever the changing session set."""


VERSIONED_RELATIONS = 200
"""The most relations (tables, views, indexes, sequences) a schema may have for its catalog's
version to be read: the statement reads every one of their catalog rows, about 16 µs a
relation, while reflecting one table asks about it alone."""

_CATALOG_VERSION = text(f"""
WITH c AS (
  SELECT oid, xmin FROM pg_class
  WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = coalesce(:schema, current_schema()))
  LIMIT {VERSIONED_RELATIONS + 1}
)
SELECT CASE WHEN (SELECT count(*) FROM c) <= {VERSIONED_RELATIONS} THEN (
  SELECT md5(coalesce(string_agg(c.oid || ':' || c.xmin
      || '(' || coalesce((SELECT string_agg(a.attnum || ':' || a.xmin, ',' ORDER BY a.attnum) FROM pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attnum > 0), '')
      || ')(' || coalesce((SELECT string_agg(o.oid || ':' || o.xmin, ',' ORDER BY o.oid) FROM pg_constraint o
                           WHERE o.conrelid = c.oid), '')
      || ')(' || coalesce((SELECT string_agg(i.indexrelid || ':' || i.xmin, ',' ORDER BY i.indexrelid)
                           FROM pg_index i WHERE i.indrelid = c.oid), '')
      || ')', ' ' ORDER BY c.oid), ''))
  FROM c) END
""")
"""Every catalog row reflection reads of the schema's tables, views and indexes (their columns,
constraints and indexes), by its id and the transaction that last wrote it: DDL writes rows anew,
while ANALYZE and VACUUM update statistics in place. NULL for a schema of more than
VERSIONED_RELATIONS relations. The limit also keeps the planner's estimate of its cost low: a
high one would have it compiled (JIT), 30 ms each time."""


def function_settings_sql() -> str:
    """The SET clauses of a capture function's definition."""
    return "\n".join(f"SET {name} = '{value}'" for name, value in TEXT_SETTINGS)


class PostgreSQL(Dialect):
    """A text holds at most 1 GiB (`config.checks.MAX_ROW_BYTES_CEILING`); octet_length() reads its
    length from the TOAST header, without reading the value out (`Dialect.octets`); a timestamp
    may be ±infinity, which no driver hands over (`Dialect.readable_time`). psycopg reads % as a
    placeholder even without parameters: `Capture.execute` doubles it."""

    name = "postgresql"
    title = "PostgreSQL"
    capture = "publisher.databases.postgresql.capture.PostgreSQLCapture"
    workshop = "publisher.databases.postgresql.workshop.PostgreSQLWorkshop"
    visibility = "publisher.databases.postgresql.visibility.TransactionSnapshots"
    status_writing = "publisher.pipeline.planning.WrittenBeside"
    """An open UPDATE of the event log's rows holds back no insert of the application's triggers."""
    copy_reader = "publisher.databases.postgresql.copy_read"
    lock = "publisher.databases.postgresql.lock.AdvisoryLock"
    gives_way_codes = frozenset({"55P03", "40P01"})
    """lock_not_available (lock_timeout) and deadlock_detected."""
    analyze_needs = "MAINTAIN on it (PostgreSQL 17 and later; before that only its owner may)"

    def analyze(self, table: str, columns: Sequence[str] = ()) -> str:
        """Of `columns` only: the event log's statistics a cycle's plans need are its status's
        and record_id's, and the texts of its old and new values took half of a whole ANALYZE's
        time (0.1 of 0.2 s on 1M events); reltuples is counted all the same."""
        return f"ANALYZE {table} ({', '.join(columns)})" if columns else f"ANALYZE {table}"

    @contextmanager
    def skipped_warnings(self, conn: Connection) -> Iterator[list[str]]:
        """ANALYZE skips a table its user may not analyze (not its owner; from version 17, one
        without MAINTAIN on it) with a WARNING ("skipping ..."), which psycopg hands to a notice
        handler and SQLAlchemy logs at INFO. The transaction has the server send warnings
        whatever the user's client_min_messages; other warnings (an extended statistics object
        on columns not analysed) are not skips."""
        said: list[str] = []
        driver = conn.connection.driver_connection

        def heard(diagnostic: Any) -> None:
            message = str(diagnostic.message_primary)
            if diagnostic.severity_nonlocalized == "WARNING" and "skipping" in message:
                said.append(message)

        conn.exec_driver_sql("SET LOCAL client_min_messages = warning")
        driver.add_notice_handler(heard)  # type: ignore[union-attr]
        try:
            yield said
        finally:
            driver.remove_notice_handler(heard)  # type: ignore[union-attr]

    def serves_subscribers(self) -> bool:
        """By transaction: the triggers log the transaction's id, and a snapshot shows which
        transactions it holds (`visibility`)."""
        return True

    def value_lists(self) -> ValueLists:
        """A chunk of ids or keys as one array (`arrays.ValueArrays`)."""
        return ValueArrays()

    def environment_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.OperationalError,)

    def refused_for_rights(self, exc: BaseException | None) -> bool:
        """SQLSTATE 42501 (insufficient_privilege: "permission denied", "must be owner")."""
        return getattr(exc, "sqlstate", None) == "42501"

    def try_lock_sql(self) -> str:
        """An advisory lock on the 64-bit `:key`."""
        return "SELECT pg_try_advisory_lock(:key)"

    def lock_holder_sql(self) -> str:
        """The holder's application name, backend pid and client address, by the halves of the
        key (`:high`, `:low`) as pg_locks shows an advisory lock's."""
        return ("SELECT a.application_name, a.pid, a.client_addr FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid::bigint = :high AND l.objid::bigint = :low")

    def copy_out_sql(self, query: str) -> str:
        return f"COPY ({query}) TO STDOUT (FORMAT csv)"

    def copy_encoding(self, conn: Connection) -> str:
        """The server reports its encoding when the session starts (psycopg 3 keeps it), so asking
        costs no round trip (query-back asks for every chunk of keys)."""
        driver = conn.connection.driver_connection
        encoding = driver.info.parameter_status("server_encoding")  # type: ignore[union-attr]
        if encoding is None:
            encoding = conn.exec_driver_sql("SHOW server_encoding").scalar()
        return str(encoding)

    def schema_first_sql(self, schema: str) -> str | None:
        """The schema put before the session's search_path (which it keeps after it)."""
        name = '"' + schema.replace('"', '""') + '"'
        literal = "'" + name.replace("'", "''") + "'"
        return f"SELECT set_config('search_path', {literal} || ', ' || current_setting('search_path'), false)"

    def catalog_version(self, engine: Engine, schema: str | None) -> str | None:
        with engine.connect() as conn:
            version = conn.execute(_CATALOG_VERSION, {"schema": schema}).scalar_one()
        return None if version is None else str(version)

    def time_key(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """+infinity first, with the rows that are no time; a time in a year after 9999 waits
        for it, and is never read."""
        infinite: ColumnElement[Any] = literal_column("'infinity'")
        return func.coalesce(case((column != infinite, column), else_=null()), literal_column("'-infinity'"))

    def next_record_id_sql(self, log: str, record_id: str, record_id_name: str) -> str:
        """Also one above the last value the event log's sequence handed out: it counts the events
        a repeatable-read snapshot does not see and those deleted once processed."""
        names = ", ".join("'" + text.replace("'", "''") + "'" for text in (log, record_id_name))
        return (f"(GREATEST(COALESCE(pg_sequence_last_value(pg_get_serial_sequence({names})::regclass), 0), "
                f"(SELECT COALESCE(MAX({record_id}), 0) FROM {log})) + 1)")

    def value_text_sql(self, ref: str, binary: bool, sql_type: str) -> str:
        """Binary as base64 without line breaks, everything else its `::text`. The breaks go by
        replace(): translate() takes each character apart, 0.3 s more per 1M short values."""
        if binary:
            return f"replace(encode({ref}, 'base64'), E'\\n', '')"
        return f"{ref}::text"

    def settings_sql(self, local: bool) -> list[str]:
        scope = "SET LOCAL" if local else "SET"
        return [f"{scope} {name} = '{value}'" for name, value in TEXT_SETTINGS]

    def key_lookups_sql(self) -> list[str]:
        """Query-back looks rows up by key, up to 500 keys a statement. The default costs
        (random_page_cost 4, for pages that are not cached) make a scan of a table of 100k rows
        look cheaper than 500 probes of its key's index, and the scan took 5-10 ms a statement
        where the probes took 0.3 ms. Off only discourages a scan: a table or view without an
        index on the key is still scanned."""
        return ["SET enable_seqscan = off"]

    def begin_reading_rows(self, lock_wait: str) -> list[str]:
        """lock_timeout, well under deadlock_timeout (1 s by default): the reader gives way, never the
        writer. A LIMIT under that lock could hand back, in a row it waited for, the key a writer just
        gave it, out of order and far ahead (`snapshots.chunks`)."""
        return [f"SET LOCAL lock_timeout = '{lock_wait}'", *self.settings_sql(local=True)]
