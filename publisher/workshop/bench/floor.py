"""The physical floor: what the database itself needs to read the backlog and mark it processed.

No publisher can beat it, so the publisher's time is reported as a multiple of it. It is taken
on a vacuumed copy of the event log, read in record_id order and marked in one committed UPDATE
(through COPY where the database sends rows so, else the driver's own cursor): the cheapest the
database does the work, and the backlog itself stays as it was for the publisher.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from publisher.config import EVENT_LOG_COLUMNS, Config
from publisher.database import table_schema
from publisher.dialects import Dialect, dialect_of
from publisher.model.events import Status
from publisher.workshop.databases import of_url


@dataclass(frozen=True)
class Floor:
    method: str
    rows: int
    bytes_read: int | None
    """What COPY sent; None where the driver hands over values, not bytes."""
    read_seconds: float
    marked: int
    mark_seconds: float
    indexed_mark_seconds: float | None = None
    """The same UPDATE on a vacuumed copy that has the event log's indexes (where the database
    copies a table's indexes, `indexed_copy_sql`): what
    marking the rows costs the database in this event log, whose status index each row's
    new status enters. Reported beside the floor, which the ratios keep."""

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
            "indexed_mark_seconds": None if self.indexed_mark_seconds is None else round(self.indexed_mark_seconds, 3),
            "seconds": round(self.seconds, 3),
        }


def measure_floor(config: Config, engine: Engine) -> Floor:
    """The new rows read in record_id order and marked in one committed UPDATE, on a vacuumed
    copy of the event log: the least the database itself does for the backlog."""
    table, status, record_id = event_log_names(config, engine)
    copy = _qualified(config, engine, f"{config.event_log.table}_floor")
    quote = engine.dialect.identifier_preparer.quote
    columns = ", ".join(quote(getattr(config.event_log.columns, role)) for role in EVENT_LOG_COLUMNS)
    new = f"{status} = '{Status.NEW.value}'"
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {copy}"))
        conn.execute(text(f"CREATE TABLE {copy} AS SELECT * FROM {table}"))
    try:
        vacuum(engine, copy)
        select = f"SELECT {columns} FROM {copy} WHERE {new} ORDER BY {record_id}"
        raw = engine.raw_connection()
        try:
            connection: Any = raw.driver_connection
            size: int | None
            dialect = dialect_of(engine)
            if dialect.copy_out:
                rows, size, read_seconds = copy_out(connection, select, dialect)
            else:
                rows, size, read_seconds = _read(connection, select)
            connection.commit()
            started = time.perf_counter()
            cursor = connection.cursor()
            cursor.execute(f"UPDATE {copy} SET {status} = '{Status.SUCCESS.value}' WHERE {new}")
            marked = cursor.rowcount
            connection.commit()
            mark_seconds = time.perf_counter() - started
        finally:
            raw.close()
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {copy}"))
    indexed = _indexed_mark_seconds(config, engine)
    method = "read in record_id order; one UPDATE, committed; on a vacuumed copy"
    return Floor(method, rows, size, read_seconds, int(marked), mark_seconds, indexed)


def _indexed_mark_seconds(config: Config, engine: Engine) -> float | None:
    """The floor's UPDATE on a vacuumed copy of the event log made with its indexes; None where
    the database cannot copy a table's indexes."""
    table, status, _ = event_log_names(config, engine)
    copy = _qualified(config, engine, f"{config.event_log.table}_floor_indexed")
    create = of_url(engine.url).indexed_copy_sql(copy, table)
    if create is None:
        return None
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {copy}"))
        conn.execute(text(create))
        conn.execute(text(f"INSERT INTO {copy} SELECT * FROM {table}"))
    try:
        vacuum(engine, copy)
        with engine.begin() as conn:
            started = time.perf_counter()
            conn.execute(text(f"UPDATE {copy} SET {status} = '{Status.SUCCESS.value}' "
                              f"WHERE {status} = '{Status.NEW.value}'"))
        return time.perf_counter() - started
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {copy}"))


def _read(connection: Any, select: str) -> tuple[int, int | None, float]:
    """The driver's own cursor, without SQLAlchemy in between."""
    rows = 0
    started = time.perf_counter()
    cursor = connection.cursor()
    cursor.execute(select)
    while batch := cursor.fetchmany(10_000):
        rows += len(batch)
    return rows, None, time.perf_counter() - started


def copy_out(connection: Any, select: str, dialect: Dialect) -> tuple[int, int, float]:
    """Every row of `select` through COPY … TO STDOUT, each read into Python as bytes: the rows,
    the bytes and the seconds it took. `connection` is the driver's own. The rows are taken as the
    publisher's reads take them (the database's `copy_rows`), the cheapest way Python has them."""
    reading = dialect.copy_reading()
    if reading is None:
        raise ValueError(f"{dialect.name} sends no rows through COPY")
    rows = size = 0
    started = time.perf_counter()
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY ({select}) TO STDOUT") as copy:
            for row in reading.copy_rows(copy):
                rows += 1
                size += len(row)
    return rows, size, time.perf_counter() - started


def event_log_names(config: Config, engine: Engine) -> tuple[str, str, str]:
    """The event log, its status column and its record_id column, as SQL."""
    quote = engine.dialect.identifier_preparer.quote
    names = config.event_log.columns
    return _qualified(config, engine, config.event_log.table), quote(names.status), quote(names.record_id)


def _qualified(config: Config, engine: Engine, name: str) -> str:
    preparer = engine.dialect.identifier_preparer
    schema = table_schema(config, engine)
    return f"{preparer.quote_schema(schema)}.{preparer.quote(name)}" if schema else preparer.quote(name)


def vacuum(engine: Engine, table: str) -> None:
    statement = of_url(engine.url).vacuum_sql(table)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(statement))
