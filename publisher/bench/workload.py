"""The benchmark's backlog: tables, capture triggers and events made through real DML.

`usr` carries field-style triggers (one event per changed column), `grp` row-style ones (query-back
events 5 and 6). The triggers of this project never write field query-back events on PostgreSQL
(7, 8) nor malformed rows, so those are inserted into the event log directly; loopback rows are
real DML attributed afterwards to the publisher's own user, as if its account had made them.
Everything is set-based (generate_series on PostgreSQL, executemany batches on SQLite), and the
events come in rounds, so one object's events spread over the backlog as they do at a site.
"""
from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import enum
import hashlib
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from publisher.capture.install import install_capture
from publisher.config import Config, DatabaseConfig, OutputConfig, PublisherSettings, SparkConfig
from publisher.database import connect
from publisher.model.events import EventType

Dialect = Literal["postgresql", "sqlite"]
DIALECTS: tuple[Dialect, ...] = ("postgresql", "sqlite")
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_SCHEMA = "bench"
PUBLISHER_USER = "idm"
"""The publisher's own user; the DML runs as another one, so only rows attributed to it are loopback."""
USR_COLUMNS = ("photo", "fname", "lname", "email", "age", "score", "active", "born")
"""The non-key columns of `usr`: a field-style insert logs one event for each."""
FIELD_QUERY_BACK_COLUMNS = ("fname", "lname", "email", "photo")
ROUNDS = 20
BATCH = 10_000
MIN_ROWS = 10
MIN_EVENTS = 100
MARKER_TABLE = "bench_workload"
"""Marks a SQLite file as made by the benchmark, so that only such a file is ever replaced."""
_EPOCH = dt.datetime(2000, 1, 1)
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_EVENT_LOG = "event_log"
_SPREAD = 7919
"""A prime stride that scatters field query-back keys over the table."""


class WorkloadError(ValueError):
    """The workload cannot be made as asked: sizes, URL or target database."""


@dataclass(frozen=True)
class Mix:
    """Each kind's share of the events; per-field updates of `usr` take what the others leave."""

    usr_inserts: float = 0.20
    usr_deletes: float = 0.02
    grp_inserts: float = 0.03
    grp_updates: float = 0.05
    grp_deletes: float = 0.02
    field_query_backs: float = 0.05
    loopback: float = 0.05
    malformed: float = 0.001


class Backlog(str, enum.Enum):
    """What the generated backlog is made to hold before the drain."""

    MIX = "mix"
    """The events as the triggers logged them (the mix above)."""
    REJECTED = "rejected"
    """Every row names a table that is not published: every row E."""
    GONE = "gone"
    """Every row a row query-back (type 6) of a grp key no row has: every row W."""


_GONE_KEYS = 1_000_000_000
"""Added to a row's record_id to make a grp key that no row has."""
_REWRITES = {
    Backlog.REJECTED: "table_name = 'not_published', perpetrator = NULL",
    Backlog.GONE: (
        f"event_type = {int(EventType.UPDATE_ROW_QUERY_BACK)}, table_name = 'grp', "
        f"table_key = 'gid=' || (record_id + {_GONE_KEYS}), column_name = NULL, old_value = NULL, "
        "new_value = NULL, perpetrator = NULL"
    ),
}


@dataclass(frozen=True)
class Plan:
    """Exact event counts per kind; `usr_insert_rows` rows log one event per `usr` column each."""

    usr_insert_rows: int
    usr_updates: int
    usr_deletes: int
    grp_inserts: int
    grp_updates: int
    grp_deletes: int
    field_query_backs: int
    loopback: int
    malformed: int

    @property
    def events(self) -> int:
        counts = dataclasses.asdict(self)
        return sum(counts.values()) + (len(USR_COLUMNS) - 1) * self.usr_insert_rows


def grp_rows(rows: int) -> int:
    """Groups are fewer than users."""
    return max(MIN_ROWS, rows // 2)


def plan_events(events: int, rows: int, mix: Mix = Mix()) -> Plan:
    """Split `events` by `mix`; deletes never take more than half of a table, so updates find rows."""
    if rows < MIN_ROWS:
        raise WorkloadError(f"rows: expected at least {MIN_ROWS}, got {rows}")
    if events < MIN_EVENTS:
        raise WorkloadError(f"events: expected at least {MIN_EVENTS}, got {events}")

    def share(fraction: float) -> int:
        return int(events * fraction)

    plan = Plan(
        usr_insert_rows=share(mix.usr_inserts) // len(USR_COLUMNS),
        usr_updates=0,
        usr_deletes=min(share(mix.usr_deletes), rows // 2),
        grp_inserts=share(mix.grp_inserts),
        grp_updates=share(mix.grp_updates),
        grp_deletes=min(share(mix.grp_deletes), grp_rows(rows) // 2),
        field_query_backs=share(mix.field_query_backs),
        loopback=share(mix.loopback),
        malformed=max(1, share(mix.malformed)),
    )
    updates = events - plan.events
    if updates < 0:
        raise WorkloadError("the mix's shares add up to more than all events")
    return dataclasses.replace(plan, usr_updates=updates)


@dataclass(frozen=True)
class Workload:
    """A generated backlog: where it is and what it holds."""

    dialect: Dialect
    url: str
    schema: str | None
    rows: int
    plan: Plan
    events: int
    """New rows in the event log, counted after generation."""
    by_type: dict[str, int]
    loopback: int
    load_seconds: float
    """Creating and filling the tables, before the triggers exist."""
    generate_seconds: float
    """Making the events through the triggers."""
    backlog: Backlog = Backlog.MIX

    def config(self, output: Path, query_limit: int, batch_size: int = 128, master: str = "local[*]") -> Config:
        """The publisher's configuration for this backlog."""
        return bench_config(self.url, self.schema, output, query_limit, batch_size, master)

    def summary(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "rows": self.rows,
            "events": self.events,
            "by_type": self.by_type,
            "loopback": self.loopback,
            "plan": dataclasses.asdict(self.plan),
            "load_seconds": round(self.load_seconds, 3),
            "generate_seconds": round(self.generate_seconds, 3),
            "backlog": self.backlog.value,
            "events_per_second": round(self.events / self.generate_seconds, 1) if self.generate_seconds else None,
        }


def bench_config(
    url: str, schema: str | None, output: Path, query_limit: int, batch_size: int = 128, master: str = "local[*]"
) -> Config:
    """The publisher as a site would configure it for these tables; it publishes the triggered ones."""
    return Config(
        database=DatabaseConfig(url=url, user=PUBLISHER_USER, schema=schema),
        publisher=PublisherSettings(query_limit=query_limit, batch_size=batch_size),
        output=OutputConfig(directory=str(output)),
        spark=SparkConfig(master=master),
    )


def generate(
    dialect: Dialect, url: str, rows: int, events: int, schema: str = DEFAULT_SCHEMA, mix: Mix = Mix(),
    backlog: Backlog = Backlog.MIX,
) -> Workload:
    """Make the tables afresh (PostgreSQL: drop and recreate `schema`), then `events` events,
    rewritten in place as `backlog` says."""
    plan = plan_events(events, rows, mix)
    _check_url(dialect, url)
    if dialect == "postgresql" and not _IDENTIFIER.fullmatch(schema):
        raise WorkloadError(f"schema: expected a lower-case SQL identifier, got {schema!r}")
    if dialect == "sqlite":
        _clear_sqlite_file(url)
    writer = _writer(dialect, schema)
    config = bench_config(url, writer.schema, Path("."), query_limit=1)
    engine = connect(config)
    try:
        started = time.perf_counter()
        with engine.begin() as conn:
            writer.create(conn, rows, events)
            writer.insert_usr(conn, 1, rows)
            writer.insert_grp(conn, 1, grp_rows(rows))
        install_capture(config, engine, ["usr"], "field")
        install_capture(config, engine, ["grp"], "row")
        load_seconds = time.perf_counter() - started
        started = time.perf_counter()
        _make_events(engine, writer, plan, rows)
        generate_seconds = time.perf_counter() - started
        with engine.begin() as conn:
            if backlog is not Backlog.MIX:
                conn.execute(text(f"UPDATE {writer.table(_EVENT_LOG)} SET {_REWRITES[backlog]} WHERE status = 'N'"))
            writer.analyze(conn)
            by_type = {
                str(t): int(n)
                for t, n in conn.execute(text(
                    f"SELECT event_type, COUNT(*) FROM {writer.table(_EVENT_LOG)} "
                    "WHERE status = 'N' GROUP BY event_type ORDER BY event_type"
                ))
            }
            loopback = conn.execute(
                text(f"SELECT COUNT(*) FROM {writer.table(_EVENT_LOG)} WHERE status = 'N' AND perpetrator = :user"),
                {"user": PUBLISHER_USER},
            ).scalar_one()
    finally:
        engine.dispose()
    return Workload(
        dialect=dialect,
        url=url,
        schema=writer.schema,
        rows=rows,
        plan=plan,
        events=sum(by_type.values()),
        by_type=by_type,
        loopback=int(loopback),
        load_seconds=load_seconds,
        generate_seconds=generate_seconds,
        backlog=backlog,
    )


def _check_url(dialect: Dialect, url: str) -> None:
    try:
        backend = make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        raise WorkloadError(f"url: {url!r} is not a SQLAlchemy URL") from None
    if backend != dialect:
        raise WorkloadError(f"url: a {dialect} URL is needed, got a {backend} one")


def _clear_sqlite_file(url: str) -> None:
    """Remove an earlier benchmark database; refuse a file that holds anything else."""
    database = make_url(url).database
    if not database or database == ":memory:":
        raise WorkloadError("url: the SQLite workload needs a file, e.g. sqlite:///bench.db")
    path = Path(database)
    if path.exists():
        try:
            with closing(sqlite3.connect(path)) as db:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError:
            raise WorkloadError(f"{path} is not a SQLite database; the benchmark only replaces its own") from None
        if tables and MARKER_TABLE not in tables:
            raise WorkloadError(f"{path} holds other tables; the benchmark only replaces a database it made")
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)


class _Cursor:
    """Walks the ids lo..hi round and round, handing out contiguous ranges."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi, self.next = lo, hi, lo

    def take(self, count: int, most: int) -> Iterator[tuple[int, int]]:
        while count > 0:
            n = min(count, most, self.hi - self.next + 1)
            yield self.next, self.next + n - 1
            count -= n
            self.next = self.next + n if self.next + n <= self.hi else self.lo


def _split(total: int, parts: int) -> list[int]:
    share, extra = divmod(total, parts)
    return [share + (1 if i < extra else 0) for i in range(parts)]


def _make_events(engine: Engine, writer: _Writer, plan: Plan, rows: int) -> None:
    """Interleave the kinds in rounds, one transaction each; updates only touch rows no round deletes."""
    usr_alive = rows - plan.usr_deletes
    grp_total = grp_rows(rows)
    grp_alive = grp_total - plan.grp_deletes
    usr_updated, grp_updated = _Cursor(1, usr_alive), _Cursor(1, grp_alive)
    queried_back = _Cursor(1, rows)
    usr_chunk, grp_chunk = max(1, usr_alive // 4), max(1, grp_alive // 4)
    next_usr, next_grp = rows + 1, grp_total + 1
    next_usr_deleted, next_grp_deleted = usr_alive + 1, grp_alive + 1
    rounds = {f.name: _split(getattr(plan, f.name), ROUNDS) for f in dataclasses.fields(plan)}
    generation = 0
    malformed = 0
    for r in range(ROUNDS):
        with engine.begin() as conn:
            for lo, hi in usr_updated.take(rounds["usr_updates"][r], usr_chunk):
                generation += 1
                writer.update_usr(conn, USR_COLUMNS[generation % len(USR_COLUMNS)], lo, hi, generation)
            if n := rounds["usr_insert_rows"][r]:
                writer.insert_usr(conn, next_usr, next_usr + n - 1)
                next_usr += n
            for lo, hi in queried_back.take(rounds["field_query_backs"][r], BATCH):
                writer.log_field_query_backs(conn, lo, hi, rows)
            for lo, hi in grp_updated.take(rounds["grp_updates"][r], grp_chunk):
                writer.update_grp(conn, lo, hi)
            if n := rounds["grp_inserts"][r]:
                writer.insert_grp(conn, next_grp, next_grp + n - 1)
                next_grp += n
            if rounds["loopback"][r]:
                last = writer.last_record_id(conn)
                for lo, hi in usr_updated.take(rounds["loopback"][r], usr_chunk):
                    generation += 1
                    writer.update_usr(conn, USR_COLUMNS[generation % len(USR_COLUMNS)], lo, hi, generation)
                writer.attribute(conn, last, PUBLISHER_USER)
            if n := rounds["usr_deletes"][r]:
                writer.delete(conn, "usr", "idu", next_usr_deleted, next_usr_deleted + n - 1)
                next_usr_deleted += n
            if n := rounds["grp_deletes"][r]:
                writer.delete(conn, "grp", "gid", next_grp_deleted, next_grp_deleted + n - 1)
                next_grp_deleted += n
            if n := rounds["malformed"][r]:
                writer.log_malformed(conn, malformed, n, rows)
                malformed += n


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


def _writer(dialect: Dialect, schema: str | None) -> _Writer:
    return _PostgreSQL(schema or DEFAULT_SCHEMA) if dialect == "postgresql" else _SQLite()


class _Writer(abc.ABC):
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
        return int(conn.execute(text(f"SELECT COALESCE(MAX(record_id), 0) FROM {self.table(_EVENT_LOG)}")).scalar_one())

    def attribute(self, conn: Connection, after: int, user: str) -> None:
        conn.execute(
            text(f"UPDATE {self.table(_EVENT_LOG)} SET perpetrator = :user WHERE record_id > :after"),
            {"user": user, "after": after},
        )

    def log_malformed(self, conn: Connection, first: int, count: int, rows: int) -> None:
        conn.execute(
            text(
                f"INSERT INTO {self.table(_EVENT_LOG)} "
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


class _PostgreSQL(_Writer):
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
                f"INSERT INTO {self.table(_EVENT_LOG)} (event_type, perpetrator, table_name, table_key, column_name) "
                f"SELECT 7 + g % 2, session_user, 'usr', 'idu=' || (1 + g * {_SPREAD} % {rows}), "
                f"(ARRAY[{columns}])[1 + g % {len(FIELD_QUERY_BACK_COLUMNS)}] "
                "FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def analyze(self, conn: Connection) -> None:
        conn.exec_driver_sql(f"ANALYZE {self.table(_EVENT_LOG)}, {self.table('usr')}, {self.table('grp')}")


class _SQLite(_Writer):
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
            f"INSERT INTO {_EVENT_LOG} (event_type, perpetrator, table_name, table_key, column_name) "
            "VALUES (?, NULL, 'usr', ?, ?)",
            ((7 + g % 2, f"idu={1 + g * _SPREAD % rows}", columns[g % len(columns)]) for g in range(lo, hi + 1)),
        )

    def analyze(self, conn: Connection) -> None:
        conn.exec_driver_sql("ANALYZE")


def load_usr(engine: Engine, schema: str, rows: int) -> None:
    """PostgreSQL: `schema` afresh with `usr` alone, rows 1..`rows` as the workload inserts them,
    a transaction per BATCH * 10 rows, no trigger: a table that holds rows and no event."""
    if not _IDENTIFIER.fullmatch(schema):
        raise WorkloadError(f"schema: expected a lower-case SQL identifier, got {schema!r}")
    writer = _PostgreSQL(schema)
    with engine.begin() as conn:
        writer.create_usr(conn)
    for lo, hi in _Cursor(1, rows).take(rows, BATCH * 10):
        with engine.begin() as conn:
            writer.insert_usr(conn, lo, hi)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {writer.table('usr')}")


def change_rows(engine: Engine, workload: Workload, count: int, serial: int) -> None:
    """Update `fname` of `count` rows through the triggers in one transaction: `count` new events.

    `serial` makes the values new, so that every update changes its row and logs an event.
    """
    writer = _writer(workload.dialect, workload.schema)
    rows = _Cursor(1, workload.rows - workload.plan.usr_deletes)
    with engine.begin() as conn:
        for part, (lo, hi) in enumerate(rows.take(count, count)):
            conn.execute(
                text(f"UPDATE {writer.table('usr')} SET fname = 'first' || idu || '.latency{serial}.{part}' "
                     "WHERE idu BETWEEN :lo AND :hi"),
                {"lo": lo, "hi": hi},
            )


def discard(workload: Workload) -> None:
    """Remove a workload's tables: its schema on PostgreSQL, its file on SQLite."""
    if workload.dialect == "sqlite":
        _clear_sqlite_file(workload.url)
        return
    config = bench_config(workload.url, workload.schema, Path("."), query_limit=1)
    engine = connect(config)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {_writer(workload.dialect, workload.schema).schema} CASCADE")
    finally:
        engine.dispose()
