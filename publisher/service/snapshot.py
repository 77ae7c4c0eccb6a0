"""Snapshots: every current row of the published tables, published as its row query-back.

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
from pathlib import Path
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
    begun = _begin(engine, state, subscriber or "", condition, counts)
    for name, table in chosen.items():
        result.tables[name] = _snapshot_one(
            engine, state, logger, table, condition, subscriber or "", counts[name], chunk_rows, progress,
            begun[name])
    result.seconds = time.perf_counter() - started
    return result


def _chosen_tables(
    config: Config, engine: Engine, names: Sequence[str], subscriber: str | None,
) -> dict[str, TableInfo]:
    schema = table_schema(config, engine)
    catalog = reflect_catalog(engine, schema, published_tables(config, engine), config.classes)
    available = catalog.tables
    if subscriber is not None:
        from publisher.pipeline.checkout import require_check_outs
        from publisher.pipeline.subscribers import tracked
        from publisher.rules.subscription import tracked_tables

        config.subscriber(subscriber)
        require_check_outs(engine.dialect.name)
        subscription = tracked(config, subscriber, catalog)
        if EventType.INSERT_ROW_QUERY_BACK not in subscription.event_types:
            raise SnapshotError(f"--subscriber {subscriber}: its subscription does not track inserts, and a snapshot "
                                "logs each row as the row query-back of an insert (type 5), which it would pass over")
        available = tracked_tables(catalog, subscription)
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
        self.locked = not table.is_view
        """A row is read with a share lock: a writer's delete not yet committed, whose event took
        its record_id already, is waited for (and the row then passed over), and one that comes
        later waits for the chunk, so its events follow the snapshot's. Otherwise the snapshot's
        event could land between a delete and the insert of the same key and be published, as
        the row inserted again, ahead of that insert's <add>."""

    def chunk(self, conn: Connection, after: Sequence[Any] | None, rows: int) -> list[tuple[str, tuple[Any, ...]]]:
        """Up to `rows` (canonical key, bound key values) after `after`, in key order."""
        query = select(*self.texts).select_from(self.reading.sql_table)
        if self.condition:
            query = query.where(text(f"({self.condition})"))
        if after is not None:
            query = query.where(self._after(after))
        query = query.order_by(*self.compared).limit(rows)
        if self.locked:
            query = query.with_for_update(read=True)
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
    total: int, chunk_rows: int, progress: Progress | None, begun: _Begun,
) -> TableSnapshot:
    order = _KeyOrder(table, state.schema, engine, condition)
    last_key, before, finished = begun
    done = TableSnapshot(total=total, resumed_after=last_key)
    if finished:
        return done
    after = None if last_key is None else order.values_of_key(last_key)
    began = time.perf_counter()
    while True:
        chunk = _log_chunk(engine, order, logger, state, reader, table.name, last_key, after, chunk_rows)
        finished = len(chunk) < chunk_rows
        if chunk:
            last_key = chunk[-1][0]
            after = _bound_after(order, chunk[-1])
        done.rows += len(chunk)
        failpoints.reached("snapshot_chunk")
        if progress is not None:
            progress(table.name, before + done.rows, total, time.perf_counter() - began)
        if finished:
            return done


LOCK_RETRIES = 100
"""Tries of one chunk whose share lock waited too long for a writer, before the snapshot fails."""


def _log_chunk(
    engine: Engine, order: _KeyOrder, logger: EventLogger, state: Table, reader: str, table: str,
    last_key: str | None, after: Sequence[Any] | None, chunk_rows: int,
) -> list[tuple[str, tuple[Any, ...]]]:
    """One chunk's rows read and logged, and the snapshot's progress, in one transaction. The
    chunk's share locks give way to the application: a lock waited for too long (or a deadlock)
    rolls the chunk back, and it is tried again a little later."""
    for attempt in range(LOCK_RETRIES):
        try:
            with engine.connect() as conn:
                _begin_chunk(conn)
                chunk = order.chunk(conn, after, chunk_rows)
                logger.log(conn, table, (key for key, _ in chunk))
                _advance(conn, state, reader, table, chunk[-1][0] if chunk else last_key, len(chunk),
                         len(chunk) < chunk_rows)
                conn.commit()
                return chunk
        except DBAPIError as exc:
            if not _gave_way(exc) or attempt == LOCK_RETRIES - 1:
                raise
        time.sleep(min(0.05 * (attempt + 1), 1.0))
    raise AssertionError("unreachable")  # pragma: no cover


CHUNK_LOCK_WAIT = "200ms"
"""How long a chunk waits for a writer's lock on PostgreSQL: well under deadlock_timeout (1 s
by default), so that in a deadlock with the application the chunk gives way, never the
application's transaction. MariaDB picks the transaction with less to undo, the chunk's."""


def _begin_chunk(conn: Connection) -> None:
    dialect = conn.dialect.name
    if dialect == "sqlite":  # the one writer from the read to the commit
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif dialect == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{CHUNK_LOCK_WAIT}'")
    for statement in settings_sql(dialect, local=True):
        conn.exec_driver_sql(statement)


_LOCK_CODES = {"55P03", "40P01", "1205", "1213"}
"""PostgreSQL's lock_not_available and deadlock_detected; MariaDB's lock wait timeout and deadlock."""


def _gave_way(exc: DBAPIError) -> bool:
    """Whether a chunk failed only because it met a writer's lock."""
    original = exc.orig
    args = getattr(original, "args", None) or (None,)
    codes = {getattr(original, "sqlstate", None), getattr(original, "pgcode", None), args[0]}
    return bool({str(code) for code in codes} & _LOCK_CODES) or "database is locked" in str(original)


def _bound_after(order: _KeyOrder, last: tuple[str, tuple[Any, ...]]) -> tuple[Any, ...]:
    key, texts = last
    try:
        return order.values_of(texts)
    except ValueError:
        return texts


_Begun = tuple[str | None, int, bool]
"""Where a table's part of a snapshot starts: the key it continues after, the rows logged
before, and whether that part is done already."""


def _begin(engine: Engine, state: Table, reader: str, condition: str, totals: dict[str, int]) -> dict[str, _Begun]:
    """Each table's start. A snapshot continues an unfinished one for the same reader when one
    of its tables was left unfinished with the same condition: that snapshot's tables continue
    after their last key and the ones it finished are done; a table it did not take is begun
    as part of it. Otherwise each table's part is recorded anew, every one before any row is
    logged, so that a snapshot killed between two tables is continued, not begun again.
    `started_at`, to the microsecond, tells one snapshot's parts from an earlier one's."""
    tables = list(totals)
    mine = and_(state.c.reader == reader, state.c.table_name.in_(tables))
    now = _now()
    with engine.begin() as conn:
        rows = {r["table_name"]: r for r in conn.execute(select(state).where(mine)).mappings()}
        unfinished = sorted(r["started_at"] for r in rows.values()
                            if r["condition"] == condition and r["finished_at"] is None)
        run = unfinished[-1] if unfinished else _now(exact=True)
        begun: dict[str, _Begun] = {}
        for name in tables:
            row = rows.get(name)
            if row is not None and row["condition"] == condition and row["started_at"] == run:
                begun[name] = (row["last_key"], int(row["rows_logged"]), row["finished_at"] is not None)
                continue
            if row is not None:
                conn.execute(state.delete().where(and_(state.c.reader == reader, state.c.table_name == name)))
            conn.execute(state.insert().values(
                reader=reader, table_name=name, condition=condition, last_key=None, rows_logged=0,
                rows_total=totals[name], started_at=run, updated_at=now, finished_at=None))
            begun[name] = (None, 0, False)
    return begun


def _advance(conn: Connection, state: Table, reader: str, table: str, last_key: str | None, logged: int,
             finished: bool) -> None:
    now = _now()
    conn.execute(state.update().where(and_(state.c.reader == reader, state.c.table_name == table)).values(
        last_key=last_key, rows_logged=state.c.rows_logged + logged, updated_at=now,
        finished_at=now if finished else None))


def _now(exact: bool = False) -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds" if exact else "seconds")


class ProgressLines:
    """Progress lines (on stderr unless `emit` says otherwise), one at most every PROGRESS_EVERY
    seconds and one when a table is done: table, rows logged of the total, rate, time left."""

    def __init__(self, emit: Callable[[str], None] | None = None) -> None:
        self.last = 0.0
        self.emit = emit or (lambda line: print(line, file=sys.stderr))

    def __call__(self, table: str, rows: int, total: int, seconds: float) -> None:
        now = time.monotonic()
        if rows < total and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        rate = rows / seconds if seconds > 0 else 0.0
        left = f", about {int((total - rows) / rate)} s left" if rate > 0 and rows < total else ""
        self.emit(f"snapshot {table}: {rows:,} of {total:,} rows, {rate:,.0f} rows/s{left}")


def initial_snapshot(config: Config, engine: Engine, output: Path, subscriber: str | None = None,
                     progress: Progress | None = None) -> SnapshotResult | None:
    """`publisher.initial_snapshot`: the snapshot a reader gets before its first cycle when its
    output holds no document and no snapshot of it is recorded; one a stop interrupted is
    continued, table by table. None when none is due."""
    from publisher.service.mirror import document_paths

    state = snapshot_table(config.event_log.table, table_schema(config, engine))
    state.create(engine, checkfirst=True)
    with engine.connect() as conn:
        recorded = {row.table_name: row.finished_at is not None for row in conn.execute(
            select(state.c.table_name, state.c.finished_at).where(state.c.reader == (subscriber or "")))}
    if not recorded and output.is_dir() and document_paths(output):
        return None
    waiting = [name for name in _chosen_tables(config, engine, (), subscriber) if not recorded.get(name)]
    if not waiting:
        return None
    return snapshot(config, engine, waiting, subscriber=subscriber, progress=progress)


@dataclass(frozen=True)
class RecordedSnapshot:
    """A table's last snapshot for a reader, as `<event_log>_snapshot` records it."""

    reader: str
    """The subscriber, or '' for the status mode."""
    table: str
    rows_logged: int
    rows_total: int
    started_at: str
    finished_at: str | None

    @property
    def under_way(self) -> bool:
        return self.finished_at is None


def recorded_snapshots(config: Config, engine: Engine) -> list[RecordedSnapshot]:
    """Every table's last snapshot per reader; none where no snapshot was ever taken."""
    from sqlalchemy import inspect

    schema = table_schema(config, engine)
    state = snapshot_table(config.event_log.table, schema)
    if not inspect(engine).has_table(state.name, schema=schema):
        return []
    with engine.connect() as conn:
        rows = conn.execute(select(state).order_by(state.c.reader, state.c.table_name)).mappings().all()
    return [RecordedSnapshot(row["reader"], row["table_name"], int(row["rows_logged"]), int(row["rows_total"]),
                             row["started_at"], row["finished_at"]) for row in rows]
