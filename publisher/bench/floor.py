"""The physical floor: what the database itself needs to read the backlog and mark it processed.

No publisher can beat it, so the publisher's time is reported as a multiple of it. The mark is
rolled back, so the backlog stays for the publisher; on PostgreSQL a VACUUM then removes the dead
row versions the rolled-back UPDATE left, so the publisher does not pay for the measurement.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from publisher.config import EVENT_LOG_COLUMNS, Config
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.model.events import Status


@dataclass(frozen=True)
class Floor:
    method: str
    rows: int
    bytes_read: int | None
    """What COPY sent; SQLite hands over values, not bytes."""
    read_seconds: float
    marked: int
    mark_seconds: float

    @property
    def seconds(self) -> float:
        return self.read_seconds + self.mark_seconds

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "rows": self.rows,
            "bytes_read": self.bytes_read,
            "read_seconds": round(self.read_seconds, 3),
            "marked": self.marked,
            "mark_seconds": round(self.mark_seconds, 3),
            "seconds": round(self.seconds, 3),
        }


def measure_floor(config: Config, engine: Engine) -> Floor:
    """Read every new row in record_id order, then mark them all in one UPDATE that is rolled back."""
    schema = table_schema(config, engine)
    names = config.event_log.columns
    table = engine.dialect.identifier_preparer.quote(config.event_log.table)
    if schema:
        table = f"{engine.dialect.identifier_preparer.quote_schema(schema)}.{table}"
    columns = ", ".join(engine.dialect.identifier_preparer.quote(getattr(names, r)) for r in EVENT_LOG_COLUMNS)
    status = engine.dialect.identifier_preparer.quote(names.status)
    record_id = engine.dialect.identifier_preparer.quote(names.record_id)
    new = f"{status} = '{Status.NEW.value}'"
    select = f"SELECT {columns} FROM {table} WHERE {new} ORDER BY {record_id}"
    mark = f"UPDATE {table} SET {status} = '{Status.SUCCESS.value}' WHERE {new}"
    if not dialect_of(engine).copy_out:
        return _sqlite_floor(engine, select, mark)
    return _postgresql_floor(engine, select, mark, table)


def _postgresql_floor(engine: Engine, select: str, mark: str, table: str) -> Floor:
    """COPY … TO STDOUT through psycopg 3: the fastest way a client can take rows out of PostgreSQL."""
    raw = engine.raw_connection()
    try:
        connection: Any = raw.driver_connection
        rows, size, read_seconds = copy_out(connection, select)
        connection.rollback()
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(mark)
            marked = cursor.rowcount
        connection.rollback()
        mark_seconds = time.perf_counter() - started
        connection.autocommit = True
        try:
            connection.execute(f"VACUUM ANALYZE {table}")
        finally:
            connection.autocommit = False
    finally:
        raw.close()
    return Floor("COPY (SELECT …) TO STDOUT; one UPDATE, rolled back", rows, size, read_seconds, marked, mark_seconds)


def copy_out(connection: Any, select: str) -> tuple[int, int, float]:
    """Every row of `select` through COPY … TO STDOUT, each read into Python as bytes: the rows,
    the bytes and the seconds it took. `connection` is psycopg 3's own."""
    rows = size = 0
    started = time.perf_counter()
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY ({select}) TO STDOUT") as copy:
            for row in copy:
                rows += 1
                size += len(row)
    return rows, size, time.perf_counter() - started


def _sqlite_floor(engine: Engine, select: str, mark: str) -> Floor:
    """The sqlite3 module's own cursor, without SQLAlchemy in between."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        rows = 0
        started = time.perf_counter()
        cursor.execute(select)
        while batch := cursor.fetchmany(10_000):
            rows += len(batch)
        read_seconds = time.perf_counter() - started
        started = time.perf_counter()
        cursor.execute(mark)
        marked = cursor.rowcount
        raw.rollback()
        mark_seconds = time.perf_counter() - started
        cursor.close()
    finally:
        raw.close()
    return Floor("SELECT through sqlite3; one UPDATE, rolled back", rows, None, read_seconds, marked, mark_seconds)
