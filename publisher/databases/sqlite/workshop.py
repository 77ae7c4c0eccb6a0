"""SQLite in `publisher bench` and `publisher soak`: a file the workshop owns, the workload
written in executemany batches, and no server (nothing to restart, no concurrent writers for
the capture mix)."""
from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import make_url

from publisher.databases.servers import NoServer
from publisher.databases.workbench import Workbench

BATCH = 10_000
MARKER_TABLE = "bench_workload"
"""Marks a SQLite file as made by the benchmark, so that only such a file is ever replaced."""
_EPOCH = dt.datetime(2000, 1, 1)


class SQLiteWorkshop(Workbench):
    name = "sqlite"
    soak_first = True
    soak_acct_ddl = ("CREATE TABLE {t} (code TEXT NOT NULL, day DATE NOT NULL, part INTEGER NOT NULL, "
                     "name TEXT, score NUMERIC, seen TEXT, photo BLOB, note TEXT, PRIMARY KEY (code, day, part))")
    soak_styles_turned = True

    def file_url(self, path: Path) -> str:
        return f"sqlite:///{path}"

    def backlog(self, schema: str) -> Backlog:
        return Backlog()

    def soak_server(self, directory: Path) -> NoServer:
        return NoServer(self.file_url(directory / "soak.db"), self.name)

    def soak_bind(self, value: Any) -> Any:
        """sqlite3 binds no Decimal, and dates and times as the text the triggers compare."""
        if isinstance(value, dt.datetime):
            return value.isoformat(" ", "milliseconds")
        if isinstance(value, dt.date):
            return value.isoformat()
        return str(value) if isinstance(value, Decimal) else value

    def soak_session(self, engine: Engine) -> None:
        event.listen(engine, "connect", _session)


def _session(dbapi_connection: Any, _record: Any) -> None:
    """Foreign keys are off by default on SQLite; WAL lets readers and one writer overlap."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA busy_timeout = 20000")
    cursor.close()


def usr_values(idu: int) -> tuple[Any, ...]:
    """The row PostgreSQL's set-based insert makes, here in Python."""
    born = _EPOCH + dt.timedelta(minutes=idu)
    return (idu, hashlib.md5(str(idu).encode()).digest(), f"first{idu}", f"last{idu}", f"user{idu}@example.com",
            20 + idu % 50, idu % 1000, idu % 2 == 0, born.strftime("%Y-%m-%d %H:%M:%S"))


def grp_values(gid: int) -> tuple[Any, ...]:
    changed = _EPOCH + dt.timedelta(hours=gid)
    return gid, f"group{gid}", f"description of group {gid}", gid % 100, changed.strftime("%Y-%m-%d %H:%M:%S")


class Backlog:
    """The bench workload in a file of its own, which only a file the benchmark made replaces."""

    schema = None
    app_user = "NULL"
    binary_type = "BLOB"
    drop_sql = None

    def clear(self, url: str) -> None:
        """Remove an earlier benchmark database; a ValueError for a file that holds anything else."""
        database = make_url(url).database
        if not database or database == ":memory:":
            raise ValueError("url: the SQLite workload needs a file, e.g. sqlite:///bench.db")
        path = Path(database)
        if path.exists():
            try:
                with closing(sqlite3.connect(path)) as db:
                    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            except sqlite3.DatabaseError:
                raise ValueError(f"{path} is not a SQLite database; the benchmark only replaces its own") from None
            if tables and MARKER_TABLE not in tables:
                raise ValueError(f"{path} holds other tables; the benchmark only replaces a database it made")
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)

    def prepare(self, conn: Connection, rows: int, events: int) -> None:
        conn.exec_driver_sql(f"CREATE TABLE {MARKER_TABLE} (rows INTEGER, events INTEGER)")
        conn.exec_driver_sql(f"INSERT INTO {MARKER_TABLE} VALUES (?, ?)", (rows, events))

    def _insert_many(self, conn: Connection, sql: str, rows: Iterator[Sequence[Any]]) -> None:
        batch: list[Sequence[Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == BATCH:
                conn.exec_driver_sql(sql, batch)
                batch = []
        if batch:
            conn.exec_driver_sql(sql, batch)

    def insert_usr(self, conn: Connection, table: str, lo: int, hi: int) -> None:
        self._insert_many(conn, f"INSERT INTO {table} (idu, photo, fname, lname, email, age, score, active, born) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (usr_values(i) for i in range(lo, hi + 1)))

    def insert_grp(self, conn: Connection, table: str, lo: int, hi: int) -> None:
        self._insert_many(conn, f"INSERT INTO {table} (gid, name, descr, members, changed) VALUES (?, ?, ?, ?, ?)",
                          (grp_values(i) for i in range(lo, hi + 1)))

    def new_photo(self, generation: int) -> str:
        return "randomblob(16)"

    def later(self, column: str) -> str:
        return f"datetime({column}, '+1 second')"

    def log_field_query_backs(self, conn: Connection, event_log: str, lo: int, hi: int, rows: int,
                              columns: tuple[str, ...], spread: int) -> None:
        self._insert_many(
            conn,
            f"INSERT INTO {event_log} (event_type, perpetrator, table_name, table_key, column_name) "
            "VALUES (?, NULL, 'usr', ?, ?)",
            ((7 + g % 2, f"idu={1 + g * spread % rows}", columns[g % len(columns)]) for g in range(lo, hi + 1)),
        )

    def analyze(self, conn: Connection, tables: list[str]) -> None:
        conn.exec_driver_sql("ANALYZE")
