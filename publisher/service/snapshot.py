"""Snapshots: every current row of the published tables, published as an `<add>`.

A snapshot publishes nothing itself. It logs each current row in the event log as a row
query-back (type 5), a chunk of rows in key order per transaction, and the cycles publish them
as they publish the triggers' events: each is read back when it is published, as the row is
then, in record_id order with the changes around it. That is why a snapshot is consistent with
the writers that change the tables while it runs (README, "Snapshots"): whatever a row's events
before or after its snapshot event, the consumer ends where the table is, as it does for any
query-back. A snapshot for a subscriber is logged with a perpetrator that names it
(`rules.classify.snapshot_perpetrator`): the other readers pass its events over.

Each chunk's events and how far the snapshot has come are committed together in
`<event_log>_snapshot`, so a snapshot started again after a crash continues after its last
chunk: no row is logged twice, none is left out.
"""
from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Insert,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    cast,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import NullType

from publisher.capture.install import logged_transaction_sql, published_tables
from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects import is_mysql
from publisher.errors import root_cause
from publisher.model.catalog import Catalog, TableInfo, reflect_catalog
from publisher.model.events import EventType, Status
from publisher.model.keys import KeyPart, bound_value, canonical_key_of, format_key, key_values
from publisher.model.valuetext import settings_sql
from publisher.pipeline import failpoints
from publisher.pipeline.queryback import RowReading
from publisher.pipeline.window import event_log_table_of, logged_transaction_column
from publisher.rules.classify import snapshot_perpetrator

CHUNK_ROWS = 1_000
"""Rows logged per transaction: small enough that a window of `query_limit` rows ends near a
chunk's end (a window keeps a transaction's events together), large enough that the statements
cost little per row."""
PROGRESS_EVERY = 5.0
"""Seconds between two progress lines on stderr."""


class SnapshotError(ValueError):
    """A snapshot asked for what cannot be: an unknown table, a condition the database refuses."""


def snapshot_table(log: str, schema: str | None, metadata: MetaData | None = None) -> Table:
    """`<event_log>_snapshot`: per reader ('' for the status mode) and table, how far its last
    snapshot has come; `last_key` is the canonical table_key of the last row logged."""
    return Table(
        f"{log}_snapshot", metadata or MetaData(),
        Column("reader", String(255), primary_key=True),
        Column("table_name", String(255), primary_key=True),
        Column("condition", Text, nullable=False),
        Column("last_key", Text),
        Column("rows_logged", BigInteger, nullable=False),
        Column("rows_total", BigInteger, nullable=False),
        Column("started_at", String(32), nullable=False),
        Column("updated_at", String(32), nullable=False),
        Column("finished_at", String(32)),
        schema=schema,
    )


@dataclass
class TableSnapshot:
    """One table's part of a snapshot, as the summary reports it."""

    rows: int = 0
    """Rows logged by this run (a resumed snapshot: since it resumed)."""
    total: int = 0
    """Rows the condition selected when the snapshot began."""
    resumed_after: str | None = None
    """The table_key after which a snapshot started again continued; None: from the first row."""


@dataclass
class SnapshotResult:
    reader: str | None
    dry_run: bool
    tables: dict[str, TableSnapshot] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        if self.dry_run:
            return {"snapshot": self.reader or "status mode", "dry_run": True,
                    "rows": {name: t.total for name, t in self.tables.items()}}
        return {
            "snapshot": self.reader or "status mode",
            "events": sum(t.rows for t in self.tables.values()),
            "tables": {name: {"rows": t.rows, "total": t.total, "resumed_after": t.resumed_after}
                       for name, t in self.tables.items()},
            "seconds": round(self.seconds, 3),
        }


Progress = Callable[[str, int, int, float], None]
"""(table, rows logged, rows total, seconds since the table began)."""


def snapshot(
    config: Config, engine: Engine, tables: Sequence[str] = (), where: str | None = None,
    subscriber: str | None = None, dry_run: bool = False, chunk_rows: int = CHUNK_ROWS,
    progress: Progress | None = None,
) -> SnapshotResult:
    """Log every current row of `tables` (default: every published table; a subscriber's:
    every table its subscription tracks) that `where` selects, for the status mode or
    `subscriber`; with `dry_run`, only count them."""
    started = time.perf_counter()
    chosen = _chosen_tables(config, engine, tables, subscriber)
    condition = (where or "").strip()
    result = SnapshotResult(subscriber, dry_run)
    counts = {name: _count(engine, config, table, condition) for name, table in chosen.items()}
    if dry_run:
        result.tables = {name: TableSnapshot(total=count) for name, count in counts.items()}
        return result
    state = snapshot_table(config.event_log.table, table_schema(config, engine))
    state.create(engine, checkfirst=True)
    logger = EventLogger(config, engine, snapshot_perpetrator(subscriber))
    for name, table in chosen.items():
        result.tables[name] = _snapshot_one(
            engine, state, logger, table, condition, subscriber or "", counts[name], chunk_rows, progress)
    result.seconds = time.perf_counter() - started
    return result


def _chosen_tables(config: Config, engine: Engine, names: Sequence[str],
                   subscriber: str | None) -> dict[str, TableInfo]:
    schema = table_schema(config, engine)
    catalog = reflect_catalog(engine, schema, published_tables(config, engine), config.classes)
    available = catalog.tables
    if subscriber is not None:
        from publisher.pipeline.subscribers import tracked
        from publisher.rules.subscription import tracked_tables

        config.subscriber(subscriber)
        available = tracked_tables(catalog, tracked(config, subscriber, catalog))
    if not names:
        return dict(sorted(available.items()))
    chosen = {}
    for name in names:
        table = _named(catalog, available, name, subscriber)
        chosen[table.name] = table
    return chosen


def _named(catalog: Catalog, available: dict[str, TableInfo], name: str, subscriber: str | None) -> TableInfo:
    table = catalog.lookup(name)
    if table is None:
        raise SnapshotError(f"--table {name}: {catalog.refusal(name)}")
    if table.name not in available:
        raise SnapshotError(f"--table {name}: subscriber {subscriber}'s subscription does not track it")
    return available[table.name]


def _count(engine: Engine, config: Config, table: TableInfo, condition: str) -> int:
    """The rows `condition` selects; a condition the database refuses is a SnapshotError with
    its reason, before anything is logged."""
    reading = RowReading(table, table_schema(config, engine), engine.dialect)
    query = select(func.count()).select_from(reading.sql_table)
    if condition:
        query = query.where(text(f"({condition})"))
    try:
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
    except DBAPIError as exc:
        if not condition or exc.connection_invalidated:
            raise
        raise SnapshotError(f"--where {condition!r} on table {table.name}: {root_cause(exc)}") from None


class EventLogger:
    """Writes a snapshot's (or a repair's) events: one event per key, in the given order.

    PostgreSQL takes a call's keys as one array in one statement, numbered in their order by the
    ORDER BY of its INSERT … SELECT; the others take one INSERT per key, as one executemany."""

    def __init__(self, config: Config, engine: Engine, perpetrator: str) -> None:
        schema = table_schema(config, engine)
        names = config.event_log.columns
        transaction = logged_transaction_column(engine, config, schema)
        expression = logged_transaction_sql(config, engine)
        extra = {transaction: expression} if transaction is not None and expression is not None else {}
        log = event_log_table_of(config.event_log.table, (*names.in_order(), *extra), schema)
        self.roles = {role: log.c[getattr(names, role)] for role in
                      ("status", "event_type", "perpetrator", "table_name", "table_key")}
        self.statement = insert(log).values({log.c[c]: literal_column(e) for c, e in extra.items()})
        self.arrays = engine.dialect.name == "postgresql"
        if self.arrays:
            self.statement = _insert_array(log, self.roles, extra)
        self.perpetrator = perpetrator

    def log(self, conn: Connection, table: str, keys: Iterable[str],
            event_type: EventType = EventType.INSERT_ROW_QUERY_BACK) -> int:
        keys = list(keys)
        if not keys:
            return 0
        fixed = {"status": Status.NEW.value, "event_type": int(event_type), "perpetrator": self.perpetrator,
                 "table_name": table}
        if self.arrays:
            conn.execute(self.statement, {**fixed, "table_key": keys})
        else:
            conn.execute(self.statement, [{self.roles[role].key: value for role, value in
                                           {**fixed, "table_key": key}.items()} for key in keys])
        return len(keys)


def _insert_array(log: Table, roles: dict[str, Column[Any]], extra: dict[str, str]) -> Insert:
    """INSERT … SELECT from the `table_key` array WITH ORDINALITY ORDER BY its ordinal: one row
    per key, their record_ids in the array's order."""
    keys = func.unnest(bindparam("table_key", type_=ARRAY(Text))).table_valued(
        "key", with_ordinality="ordinal").render_derived()
    values: list[ColumnElement[Any]] = [
        cast(bindparam("status"), Text), cast(bindparam("event_type"), Integer),
        cast(bindparam("perpetrator"), Text), cast(bindparam("table_name"), Text), keys.c.key,
        *(literal_column(e) for e in extra.values())]
    columns = [roles[r] for r in ("status", "event_type", "perpetrator", "table_name", "table_key")]
    columns += [log.c[c] for c in extra]
    return insert(log).from_select(columns, select(*values).select_from(keys).order_by(keys.c.ordinal))


class _KeyOrder:
    """A table's rows in key order, a chunk at a time, each with its canonical table_key; the
    key compared as query-back compares it (typed, or as its text where that is not exact)."""

    def __init__(self, table: TableInfo, schema: str | None, engine: Engine, condition: str) -> None:
        self.reading = RowReading(table, schema, engine.dialect)
        self.keys = self.reading.keys
        self.compared = [self.reading.texts[c.name] if c.matched_as_text else self.reading.sql_table.c[c.name]
                         for c in self.keys]
        self.texts = [self.reading.texts[c.name] for c in self.keys]
        self.condition = condition
        self.expanded = is_mysql(engine.dialect.name)
        """MariaDB uses an index for `a > x OR (a = x AND b > y)`, not for `(a, b) > (x, y)`."""

    def chunk(self, conn: Connection, after: Sequence[Any] | None, rows: int) -> list[tuple[str, tuple[Any, ...]]]:
        """Up to `rows` (canonical key, bound key values) after `after`, in key order."""
        query = select(*self.texts).select_from(self.reading.sql_table)
        if self.condition:
            query = query.where(text(f"({self.condition})"))
        if after is not None:
            query = query.where(self._after(after))
        query = query.order_by(*self.compared).limit(rows)
        out = []
        for record in conn.execute(query):
            texts = [str(value) for value in record]
            try:
                key = canonical_key_of(texts, self.reading.spelling)
            except ValueError:
                key = format_key(KeyPart(name, value) for (name, _), value in zip(self.reading.spelling, texts,
                                                                                   strict=True))
            out.append((key, tuple(texts)))
        return out

    def values_of(self, texts: Sequence[str]) -> tuple[Any, ...]:
        """A row's key as bound values, from the texts its key columns read as."""
        key = canonical_key_of(list(texts), self.reading.spelling)
        return self.values_of_key(key)

    def values_of_key(self, key: str) -> tuple[Any, ...]:
        """A canonical table_key as bound values (a snapshot resumed after it)."""
        values = key_values(key, self.reading.spelling)
        return tuple(bound_value(c.key_kind, v) for c, v in zip(self.keys, values, strict=True))

    def _after(self, after: Sequence[Any]) -> ColumnElement[bool]:
        params = [bindparam(f"after{i}", value, type_=NullType()) for i, value in enumerate(after)]
        if len(params) == 1:
            return self.compared[0] > params[0]
        if not self.expanded:
            return tuple_(*self.compared) > tuple_(*params)
        alternatives = []
        for i in range(len(params)):
            equal = [self.compared[j] == params[j] for j in range(i)]
            alternatives.append(and_(*equal, self.compared[i] > params[i]))
        return or_(*alternatives)


def _snapshot_one(
    engine: Engine, state: Table, logger: EventLogger, table: TableInfo, condition: str, reader: str,
    total: int, chunk_rows: int, progress: Progress | None,
) -> TableSnapshot:
    order = _KeyOrder(table, state.schema, engine, condition)
    last_key, before = _resume(engine, state, reader, table.name, condition, total)
    done = TableSnapshot(total=total, resumed_after=last_key)
    after = None if last_key is None else order.values_of_key(last_key)
    began = time.perf_counter()
    while True:
        with engine.begin() as conn:
            for statement in settings_sql(engine.dialect.name, local=True):
                conn.exec_driver_sql(statement)
            chunk = order.chunk(conn, after, chunk_rows)
            logged = logger.log(conn, table.name, (key for key, _ in chunk))
            finished = len(chunk) < chunk_rows
            if chunk:
                last_key = chunk[-1][0]
                after = _bound_after(order, chunk[-1])
            _advance(conn, state, reader, table.name, last_key, logged, finished)
        done.rows += logged
        failpoints.reached("snapshot_chunk")
        if progress is not None:
            progress(table.name, before + done.rows, total, time.perf_counter() - began)
        if finished:
            return done


def _bound_after(order: _KeyOrder, last: tuple[str, tuple[Any, ...]]) -> tuple[Any, ...]:
    key, texts = last
    try:
        return order.values_of(texts)
    except ValueError:
        return texts


def _resume(engine: Engine, state: Table, reader: str, table: str, condition: str,
            total: int) -> tuple[str | None, int]:
    """The key after which an unfinished snapshot of the same table and condition for the same
    reader continues, and the rows it logged; otherwise a new snapshot is recorded: (None, 0)."""
    mine = and_(state.c.reader == reader, state.c.table_name == table)
    now = _now()
    with engine.begin() as conn:
        row = conn.execute(select(state).where(mine)).mappings().first()
        if row is not None and row["finished_at"] is None and row["condition"] == condition:
            return row["last_key"], int(row["rows_logged"])
        if row is not None:
            conn.execute(state.delete().where(mine))
        conn.execute(state.insert().values(
            reader=reader, table_name=table, condition=condition, last_key=None, rows_logged=0,
            rows_total=total, started_at=now, updated_at=now, finished_at=None))
    return None, 0


def _advance(conn: Connection, state: Table, reader: str, table: str, last_key: str | None, logged: int,
             finished: bool) -> None:
    now = _now()
    conn.execute(state.update().where(and_(state.c.reader == reader, state.c.table_name == table)).values(
        last_key=last_key, rows_logged=state.c.rows_logged + logged, updated_at=now,
        finished_at=now if finished else None))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class ProgressLines:
    """Progress on stderr, a line at most every PROGRESS_EVERY seconds and one when a table is
    done: table, rows logged of the total, rate, time left."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, table: str, rows: int, total: int, seconds: float) -> None:
        now = time.monotonic()
        if rows < total and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        rate = rows / seconds if seconds > 0 else 0.0
        left = f", about {int((total - rows) / rate)} s left" if rate > 0 and rows < total else ""
        print(f"snapshot {table}: {rows:,} of {total:,} rows, {rate:,.0f} rows/s{left}", file=sys.stderr)
