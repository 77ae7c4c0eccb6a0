"""The workload's tables and statements on each database: the same rows and the same events,
written the way each database takes them fastest."""
from __future__ import annotations

import abc
import datetime as dt
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from sqlalchemy import Connection, text

Dialect = Literal["postgresql", "sqlite"]


DEFAULT_SCHEMA = "bench"


FIELD_QUERY_BACK_COLUMNS = ("fname", "lname", "email", "photo")


BATCH = 10_000


MARKER_TABLE = "bench_workload"
"""Marks a SQLite file as made by the benchmark, so that only such a file is ever replaced."""


_EPOCH = dt.datetime(2000, 1, 1)


EVENT_LOG = "event_log"


_SPREAD = 7919
"""A prime stride that scatters field query-back keys over the table."""


def _malformed(index: int, rows: int) -> tuple[int, str, str, str | None, str | None]:
    """A rejected row of one of three kinds: a bad event type, a non-integer key, a key that does not parse."""
    kind = index % 3
    if kind == 0:
        return 9, "usr", f"idu={1 + index % rows}", "fname", None
    if kind == 1:
        return 2, "usr", f"idu=x{index}", "fname", "a"
    return 2, "usr", 'idu="unterminated', "fname", "a"


def usr_values(idu: int) -> tuple[Any, ...]:
    """The row a bulk insert writes, the same on both dialects."""
    born = _EPOCH + dt.timedelta(minutes=idu)
    return (
        idu,
        hashlib.md5(str(idu).encode()).digest(),
        f"first{idu}",
        f"last{idu}",
        f"user{idu}@example.com",
        20 + idu % 50,
        idu % 1000,
        idu % 2 == 0,
        born.strftime("%Y-%m-%d %H:%M:%S"),
    )


def grp_values(gid: int) -> tuple[Any, ...]:
    changed = _EPOCH + dt.timedelta(hours=gid)
    return gid, f"group{gid}", f"description of group {gid}", gid % 100, changed.strftime("%Y-%m-%d %H:%M:%S")


def writer_for(dialect: Dialect, schema: str | None) -> Writer:
    return PostgreSQLWriter(schema or DEFAULT_SCHEMA) if dialect == "postgresql" else SQLiteWriter()


class Writer(abc.ABC):
    """The SQL that differs by dialect; ids are always integers this module made."""

    schema: str | None
    app_user: str
    """SQL for the perpetrator of rows inserted directly: whoever the triggers would record."""

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    @abc.abstractmethod
    def create(self, conn: Connection, rows: int, events: int) -> None: ...

    @abc.abstractmethod
    def insert_usr(self, conn: Connection, lo: int, hi: int) -> None: ...

    @abc.abstractmethod
    def insert_grp(self, conn: Connection, lo: int, hi: int) -> None: ...

    @abc.abstractmethod
    def usr_update(self, column: str, generation: int) -> str:
        """A new value for `column` that differs from the current one."""

    @abc.abstractmethod
    def grp_update(self) -> str: ...

    @abc.abstractmethod
    def log_field_query_backs(self, conn: Connection, lo: int, hi: int, rows: int) -> None:
        """Events lo..hi name keys spread over all original rows, so some name deleted ones (status W)."""

    @abc.abstractmethod
    def analyze(self, conn: Connection) -> None: ...

    def update_usr(self, conn: Connection, column: str, lo: int, hi: int, generation: int) -> None:
        conn.execute(
            text(f"UPDATE {self.table('usr')} SET {column} = {self.usr_update(column, generation)} "
                 "WHERE idu BETWEEN :lo AND :hi"),
            {"lo": lo, "hi": hi},
        )

    def update_grp(self, conn: Connection, lo: int, hi: int) -> None:
        conn.execute(
            text(f"UPDATE {self.table('grp')} SET {self.grp_update()} WHERE gid BETWEEN :lo AND :hi"),
            {"lo": lo, "hi": hi},
        )

    def delete(self, conn: Connection, table: str, key: str, lo: int, hi: int) -> None:
        conn.execute(text(f"DELETE FROM {self.table(table)} WHERE {key} BETWEEN :lo AND :hi"), {"lo": lo, "hi": hi})

    def last_record_id(self, conn: Connection) -> int:
        return int(conn.execute(text(f"SELECT COALESCE(MAX(record_id), 0) FROM {self.table(EVENT_LOG)}")).scalar_one())

    def attribute(self, conn: Connection, after: int, user: str) -> None:
        conn.execute(
            text(f"UPDATE {self.table(EVENT_LOG)} SET perpetrator = :user WHERE record_id > :after"),
            {"user": user, "after": after},
        )

    def log_malformed(self, conn: Connection, first: int, count: int, rows: int) -> None:
        conn.execute(
            text(
                f"INSERT INTO {self.table(EVENT_LOG)} "
                "(event_type, perpetrator, table_name, table_key, column_name, new_value) "
                f"VALUES (:type, {self.app_user}, :table, :key, :column, :new)"
            ),
            [
                dict(zip(("type", "table", "key", "column", "new"), _malformed(i, rows), strict=True))
                for i in range(first, first + count)
            ],
        )


_USR_DDL = (
    "CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, photo {binary}, fname VARCHAR(64), lname VARCHAR(64), "
    "email VARCHAR(128), age INTEGER, score INTEGER, active BOOLEAN, born TIMESTAMP)"
)


_GRP_DDL = (
    "CREATE TABLE {grp} (gid INTEGER PRIMARY KEY, name VARCHAR(64), descr VARCHAR(128), members INTEGER, "
    "changed TIMESTAMP)"
)


_TEXT_UPDATES = {
    "fname": "'first' || idu || '.{g}'",
    "lname": "'last' || idu || '.{g}'",
    "email": "'user' || idu || '.{g}@example.com'",
    "age": "age + 1",
    "score": "score + 7",
    "active": "NOT active",
}


class PostgreSQLWriter(Writer):
    app_user = "session_user"

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def create(self, conn: Connection, rows: int, events: int) -> None:
        self.create_usr(conn)
        conn.exec_driver_sql(_GRP_DDL.format(grp=self.table("grp")))

    def create_usr(self, conn: Connection) -> None:
        """The schema afresh, holding an empty `usr`."""
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {self.schema}")
        conn.exec_driver_sql(_USR_DDL.format(usr=self.table("usr"), binary="BYTEA"))

    def insert_usr(self, conn: Connection, lo: int, hi: int) -> None:
        conn.execute(
            text(
                f"INSERT INTO {self.table('usr')} (idu, photo, fname, lname, email, age, score, active, born) "
                "SELECT g, decode(md5(g::text), 'hex'), 'first' || g, 'last' || g, 'user' || g || '@example.com', "
                "20 + g % 50, g % 1000, g % 2 = 0, timestamp '2000-01-01' + g * interval '1 minute' "
                "FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def insert_grp(self, conn: Connection, lo: int, hi: int) -> None:
        conn.execute(
            text(
                f"INSERT INTO {self.table('grp')} (gid, name, descr, members, changed) "
                "SELECT g, 'group' || g, 'description of group ' || g, g % 100, "
                "timestamp '2000-01-01' + g * interval '1 hour' "
                "FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def usr_update(self, column: str, generation: int) -> str:
        if column == "photo":
            return f"decode(md5(idu::text || '.{generation}'), 'hex')"
        if column == "born":
            return "born + interval '1 second'"
        return _TEXT_UPDATES[column].format(g=generation)

    def grp_update(self) -> str:
        return "members = members + 1, changed = changed + interval '1 second'"

    def log_field_query_backs(self, conn: Connection, lo: int, hi: int, rows: int) -> None:
        columns = ", ".join(f"'{c}'" for c in FIELD_QUERY_BACK_COLUMNS)
        conn.execute(
            text(
                f"INSERT INTO {self.table(EVENT_LOG)} (event_type, perpetrator, table_name, table_key, column_name) "
                f"SELECT 7 + g % 2, session_user, 'usr', 'idu=' || (1 + g * {_SPREAD} % {rows}), "
                f"(ARRAY[{columns}])[1 + g % {len(FIELD_QUERY_BACK_COLUMNS)}] "
                "FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def analyze(self, conn: Connection) -> None:
        conn.exec_driver_sql(f"ANALYZE {self.table(EVENT_LOG)}, {self.table('usr')}, {self.table('grp')}")


class SQLiteWriter(Writer):
    schema = None
    app_user = "NULL"

    def create(self, conn: Connection, rows: int, events: int) -> None:
        conn.exec_driver_sql(f"CREATE TABLE {MARKER_TABLE} (rows INTEGER, events INTEGER)")
        conn.exec_driver_sql(f"INSERT INTO {MARKER_TABLE} VALUES (?, ?)", (rows, events))
        conn.exec_driver_sql(_USR_DDL.format(usr="usr", binary="BLOB"))
        conn.exec_driver_sql(_GRP_DDL.format(grp="grp"))

    def _insert_many(self, conn: Connection, sql: str, rows: Iterator[Sequence[Any]]) -> None:
        batch: list[Sequence[Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == BATCH:
                conn.exec_driver_sql(sql, batch)
                batch = []
        if batch:
            conn.exec_driver_sql(sql, batch)

    def insert_usr(self, conn: Connection, lo: int, hi: int) -> None:
        self._insert_many(
            conn,
            "INSERT INTO usr (idu, photo, fname, lname, email, age, score, active, born) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (usr_values(i) for i in range(lo, hi + 1)),
        )

    def insert_grp(self, conn: Connection, lo: int, hi: int) -> None:
        self._insert_many(
            conn,
            "INSERT INTO grp (gid, name, descr, members, changed) VALUES (?, ?, ?, ?, ?)",
            (grp_values(i) for i in range(lo, hi + 1)),
        )

    def usr_update(self, column: str, generation: int) -> str:
        if column == "photo":
            return "randomblob(16)"
        if column == "born":
            return "datetime(born, '+1 second')"
        return _TEXT_UPDATES[column].format(g=generation)

    def grp_update(self) -> str:
        return "members = members + 1, changed = datetime(changed, '+1 second')"

    def log_field_query_backs(self, conn: Connection, lo: int, hi: int, rows: int) -> None:
        columns = FIELD_QUERY_BACK_COLUMNS
        self._insert_many(
            conn,
            f"INSERT INTO {EVENT_LOG} (event_type, perpetrator, table_name, table_key, column_name) "
            "VALUES (?, NULL, 'usr', ?, ?)",
            ((7 + g % 2, f"idu={1 + g * _SPREAD % rows}", columns[g % len(columns)]) for g in range(lo, hi + 1)),
        )

    def analyze(self, conn: Connection) -> None:
        conn.exec_driver_sql("ANALYZE")
