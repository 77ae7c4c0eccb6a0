"""The workload's tables and statements: the same rows and the same events on every database,
each database writing them the way it takes them fastest (its backlog, `Workbench.backlog`)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

DEFAULT_SCHEMA = "bench"


FIELD_QUERY_BACK_COLUMNS = ("fname", "lname", "email", "photo")


BATCH = 10_000


EVENT_LOG = "event_log"


SPREAD = 7919
"""A prime stride that scatters field query-back keys over the table."""


def _malformed(index: int, rows: int) -> tuple[int, str, str, str | None, str | None]:
    """A rejected row of one of three kinds: a bad event type, a non-integer key, a key that does not parse."""
    kind = index % 3
    if kind == 0:
        return 9, "usr", f"idu={1 + index % rows}", "fname", None
    if kind == 1:
        return 2, "usr", f"idu=x{index}", "fname", "a"
    return 2, "usr", 'idu="unterminated', "fname", "a"


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


class Writer:
    """The workload's statements on one database; ids are always integers this module made.
    What the databases spell differently, `backlog` (the database's) writes."""

    def __init__(self, backlog: Any) -> None:
        self.backlog = backlog
        self.schema: str | None = backlog.schema
        self.app_user: str = backlog.app_user
        """SQL for the perpetrator of rows inserted directly: whoever the triggers would record."""

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    def create(self, conn: Connection, rows: int, events: int) -> None:
        self.create_usr(conn, rows, events)
        conn.exec_driver_sql(_GRP_DDL.format(grp=self.table("grp")))

    def create_usr(self, conn: Connection, rows: int = 0, events: int = 0) -> None:
        """The database's ground afresh (a schema, a marked file), holding an empty `usr`."""
        self.backlog.prepare(conn, rows, events)
        conn.exec_driver_sql(_USR_DDL.format(usr=self.table("usr"), binary=self.backlog.binary_type))

    def insert_usr(self, conn: Connection, lo: int, hi: int) -> None:
        self.backlog.insert_usr(conn, self.table("usr"), lo, hi)

    def insert_grp(self, conn: Connection, lo: int, hi: int) -> None:
        self.backlog.insert_grp(conn, self.table("grp"), lo, hi)

    def usr_update(self, column: str, generation: int) -> str:
        """A new value for `column` that differs from the current one."""
        if column == "photo":
            return str(self.backlog.new_photo(generation))
        if column == "born":
            return str(self.backlog.later("born"))
        return _TEXT_UPDATES[column].format(g=generation)

    def grp_update(self) -> str:
        return f"members = members + 1, changed = {self.backlog.later('changed')}"

    def log_field_query_backs(self, conn: Connection, lo: int, hi: int, rows: int) -> None:
        """Events lo..hi name keys spread over all original rows, so some name deleted ones (status W)."""
        self.backlog.log_field_query_backs(conn, self.table(EVENT_LOG), lo, hi, rows, FIELD_QUERY_BACK_COLUMNS,
                                           SPREAD)

    def analyze(self, conn: Connection) -> None:
        self.backlog.analyze(conn, [self.table(EVENT_LOG), self.table("usr"), self.table("grp")])

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
