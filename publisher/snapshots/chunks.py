"""A snapshot's chunks: a table's rows read in key order under a share lock that gives way to
the application, and logged as events together with the snapshot's progress (`snapshot_state`)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Select,
    Text,
    bindparam,
    insert,
    literal_column,
    not_,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import NullType, TypeEngine

from publisher.capture.install import logged_transaction_sql
from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects import Dialect, dialect_of
from publisher.model.canonical import bound_value, canonical_key_of, key_values
from publisher.model.catalog import TableInfo
from publisher.model.events import EventType, Status
from publisher.model.keys import KeyPart, format_key, parse_key
from publisher.pipeline.event_log import event_log_table_of, logged_transaction_column
from publisher.pipeline.row_reading import RowReading
from publisher.snapshots.state import TablePart


class EventLogger:
    """Writes a snapshot's (or a repair's) events: one event per key, in the given order.

    A call's keys go as the database inserts a list of values in order (`ValueLists.rows_in_order`):
    one INSERT per key, as one executemany, or where it can, one statement of them all."""

    def __init__(self, config: Config, engine: Engine, perpetrator: str) -> None:
        schema = table_schema(config, engine)
        names = config.event_log.columns
        transaction = logged_transaction_column(engine, config, schema)
        expression = logged_transaction_sql(config, engine)
        extra = {transaction: expression} if transaction is not None and expression is not None else {}
        log = event_log_table_of(config.event_log.table, (*names.in_order(), *extra), schema)
        self.roles = {role: log.c[getattr(names, role)] for role in
                      ("status", "event_type", "perpetrator", "table_name", "table_key", "column_name")}
        self.record_id = log.c[names.record_id]
        computed: dict[Column[Any], ColumnElement[Any]] = {log.c[c]: literal_column(e) for c, e in extra.items()}
        self.single = insert(log).values(computed)
        shared = {self.roles[role]: kind for role, kind in _SHARED.items()}
        self.rows = dialect_of(engine).value_lists().rows_in_order(log, self.roles["table_key"], shared, computed)
        self.perpetrator = perpetrator

    def log(self, conn: Connection, table: str, keys: Iterable[str],
            event_type: EventType = EventType.INSERT_ROW_QUERY_BACK, column: str | None = None) -> int:
        keys = list(keys)
        if not keys:
            return 0
        fixed = {"status": Status.NEW.value, "event_type": int(event_type), "perpetrator": self.perpetrator,
                 "table_name": table, "column_name": column}
        self.rows.insert(conn, {self.roles[role].key: value for role, value in fixed.items()}, keys)
        return len(keys)


    def mark(self, conn: Connection, table: str, key: str) -> int:
        """One event, S already, whose record_id numbers a chunk the snapshot published itself
        (`snapshot_direct`): the log shows the chunk, and its operations' event-ids are unique."""
        row = {"status": Status.SUCCESS.value, "event_type": int(EventType.INSERT_ROW_QUERY_BACK),
               "perpetrator": self.perpetrator, "table_name": table, "table_key": key}
        values = {self.roles[role].key: value for role, value in row.items()}
        if conn.dialect.insert_returning:
            return int(conn.execute(self.single.returning(self.record_id), values).scalar_one())
        return int(conn.execute(self.single, values).lastrowid)


_SHARED: dict[str, TypeEngine[Any]] = {
    "status": Text(), "event_type": Integer(), "perpetrator": Text(), "table_name": Text(), "column_name": Text()}
"""The event log's columns every event of a call shares, with their types."""


@dataclass(frozen=True)
class ChunkEvents:
    """What a chunk logs for each of its rows: the row's query-back (a snapshot); and, where a
    migration's resync tells the consumer that columns are gone (`retired_columns = "remove"`),
    a removal of all values of each column in `removed`."""

    removed: tuple[str, ...] = ()

    @property
    def event_types(self) -> frozenset[EventType]:
        removing = [EventType.UPDATE_FIELD_REMOVE_ALL] if self.removed else []
        return frozenset({EventType.INSERT_ROW_QUERY_BACK, *removing})

    def log(self, logger: EventLogger, conn: Connection, table: str, keys: Sequence[str]) -> None:
        logger.log(conn, table, keys)
        for name in self.removed:
            logger.log(conn, table, keys, EventType.UPDATE_FIELD_REMOVE_ALL, name)


ROWS = ChunkEvents()


@dataclass(frozen=True)
class ChunkExtent:
    """Where a chunk ends: the (canonical key, key texts) of its last row in key order (None: no
    row is left), and whether it is the table's (or key range's) last chunk."""

    last: tuple[str, tuple[Any, ...]] | None
    finished: bool


class KeyOrder:
    """A table's rows in key order, a chunk at a time, each with its canonical table_key; the
    key compared as query-back compares it (typed, or as its text where that is not exact)."""

    def __init__(self, table: TableInfo, schema: str | None, engine: Engine, condition: str,
                 upto: str | None = None) -> None:
        self.reading = RowReading(table, schema, engine.dialect)
        self.keys = self.reading.keys
        self.compared = [self.reading.texts[c.name] if c.matched_as_text else self.reading.sql_table.c[c.name]
                         for c in self.keys]
        self.texts = [self.reading.texts[c.name] for c in self.keys]
        self.condition = condition
        self.dialect = dialect_of(engine)
        self.upto = None if upto is None else self.values_of_key(upto)
        """The last key this order reads (a key range's end), or None: to the table's last row."""
        self.locked = not table.is_view
        """A row is read with a share lock: a writer's delete not yet committed, whose event took
        its record_id already, is waited for (and the row then passed over), and one that comes
        later waits for the chunk, so its events follow the snapshot's. Otherwise the snapshot's
        event could land between a delete and the insert of the same key and be published, as
        the row inserted again, ahead of that insert's <add>."""

    def extent(self, conn: Connection, after: Sequence[Any] | None, rows: int) -> ChunkExtent:
        """Where a chunk of up to `rows` rows after `after` ends, read without a lock: the
        `rows`th row, or where there are fewer, the last (no key but that one is sent). Its rows
        are then read up to that key, under the lock (`locked`): a LIMIT under the lock would
        let a database hand back, in a row it waited for, the key a writer just gave it, out
        of order and far ahead, and the rows in between would be passed over."""
        found = conn.execute(self.query(select(*self.texts), after, 1).offset(rows - 1)).fetchall()
        if found:
            return ChunkExtent(self.keyed(found)[0], False)
        found = conn.execute(self.query(select(*self.texts), after, 1, descending=True)).fetchall()
        return ChunkExtent(self.keyed(found)[0] if found else None, True)

    def chunk(self, conn: Connection, after: Sequence[Any] | None,
              rows: int) -> tuple[ChunkExtent, list[tuple[str, tuple[Any, ...]]]]:
        """The extent of a chunk of up to `rows` rows after `after`, and its rows' (canonical key,
        key texts) in key order, read under the lock."""
        extent = self.extent(conn, after, rows)
        if extent.last is None:
            return extent, []
        return extent, self.locked_keys(conn, after, extent)

    def locked_keys(self, conn: Connection, after: Sequence[Any] | None,
                    extent: ChunkExtent) -> list[tuple[str, tuple[Any, ...]]]:
        """(canonical key, key texts) of a chunk's rows in key order, read under the lock."""
        return self.keyed(conn.execute(self.rows_upto(select(*self.texts), after, extent)))

    def rows_upto(self, columns: Select[Any], after: Sequence[Any] | None, extent: ChunkExtent,
                  lock: bool = True) -> Select[Any]:
        """`columns` of a chunk's rows, after `after` up to its extent's last key: under its lock,
        or with `lock` False as last committed (the direct path, which locks only the rows it
        logs)."""
        assert extent.last is not None
        query = self.query(columns, after, None).where(not_(self._after(bound_after(self, extent.last), "last")))
        return query.with_for_update(read=True) if lock and self.locked else query

    def query(self, columns: Select[Any], after: Sequence[Any] | None, rows: int | None,
              descending: bool = False) -> Select[Any]:
        """`columns` of up to `rows` rows (None: all) after `after`, in key order (the last
        first, `descending`), without a lock. A row with a NULL key column (where a key allows it, or a
        view) names no object: none is read (the snapshot counts them apart)."""
        query = columns.select_from(self.reading.sql_table)
        query = query.where(*(self.reading.sql_table.c[c.name].is_not(None) for c in self.keys))
        if self.condition:
            query = query.where(text(f"({self.condition})"))
        if after is not None:
            query = query.where(self._after(after, "after"))
        if self.upto is not None:
            query = query.where(not_(self._after(self.upto, "upto")))
        query = query.order_by(*(c.desc() for c in self.compared) if descending else self.compared)
        return query if rows is None else query.limit(rows)

    def keyed(self, records: Iterable[Sequence[Any]]) -> list[tuple[str, tuple[Any, ...]]]:
        """(canonical key, key texts) of records of the key columns."""
        out = []
        for record in records:
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
        """A table_key as bound values (a snapshot resumed after it, a key range's end). One that
        has no canonical form (a key value the published text cannot hold, such as a date BC,
        which `keyed` spells as read) is bound as the texts it was read as, as `bound_after` does."""
        try:
            values = key_values(key, self.reading.spelling)
        except ValueError:
            parts = {part.column.lower(): part.value for part in parse_key(key)}
            return tuple(parts[name.lower()] for name, _ in self.reading.spelling)
        return tuple(bound_value(c.key_kind, v) for c, v in zip(self.keys, values, strict=True))

    def _after(self, after: Sequence[Any], name: str) -> ColumnElement[bool]:
        params = [bindparam(f"{name}{i}", value, type_=NullType()) for i, value in enumerate(after)]
        if len(params) == 1:
            return self.compared[0] > params[0]
        return self.dialect.keys_after(self.compared, params)


LOCK_RETRIES = 100
"""Tries of one chunk whose share lock waited too long for a writer, before the snapshot fails."""


@dataclass(frozen=True)
class ChunkDone:
    """What a committed chunk took: its rows, its extent, and of its rows those the direct path
    wrote as operations (the others were logged)."""

    rows: int
    extent: ChunkExtent
    published: int = 0


def log_chunk(
    engine: Engine, order: KeyOrder, logger: EventLogger, part: TablePart, last_key: str | None,
    after: Sequence[Any] | None, chunk_rows: int, events: ChunkEvents = ROWS,
) -> ChunkDone:
    """One chunk's rows read and their `events` logged, and the snapshot's progress, in one
    transaction."""

    def work(conn: Connection) -> ChunkDone:
        extent, chunk = order.chunk(conn, after, chunk_rows)
        events.log(logger, conn, part.table, [key for key, _ in chunk])
        part.advance(conn, extent.last[0] if extent.last else last_key, len(chunk), extent.finished)
        return ChunkDone(len(chunk), extent)

    return giving_way(engine, work)


Done = TypeVar("Done")


def giving_way(engine: Engine, work: Callable[[Connection], Done]) -> Done:
    """`work` in one chunk transaction, committed. The chunk's share locks give way to the
    application: a lock waited for too long (or a deadlock) rolls the chunk back, and it is
    tried again a little later."""
    for attempt in range(LOCK_RETRIES):
        try:
            with engine.connect() as conn:
                _begin_chunk(conn)
                done = work(conn)
                conn.commit()
                return done
        except DBAPIError as exc:
            if not _gave_way(exc, dialect_of(engine)) or attempt == LOCK_RETRIES - 1:
                raise
        time.sleep(min(0.05 * (attempt + 1), 1.0))
    raise AssertionError("unreachable")  # pragma: no cover


CHUNK_LOCK_WAIT = "200ms"
"""How long a chunk waits for a writer's lock where the database lets it say
(`Dialect.begin_reading_rows`): well under its deadlock detection, so that in a deadlock with the
application the chunk gives way, never the application's transaction. Elsewhere the database
picks the chunk itself, or the chunk is the one writer from its read to its commit (`Dialect.begin_alone`)."""


def _begin_chunk(conn: Connection) -> None:
    for statement in dialect_of(conn).begin_reading_rows(CHUNK_LOCK_WAIT):
        conn.exec_driver_sql(statement)


def _gave_way(exc: DBAPIError, dialect: Dialect) -> bool:
    """Whether a chunk failed only because it met a writer's lock."""
    original = exc.orig
    args = getattr(original, "args", None) or (None,)
    codes = {getattr(original, "sqlstate", None), getattr(original, "pgcode", None), args[0]}
    if {str(code) for code in codes} & dialect.gives_way_codes:
        return True
    return dialect.gives_way_message is not None and dialect.gives_way_message in str(original)


def bound_after(order: KeyOrder, last: tuple[str, tuple[Any, ...]]) -> tuple[Any, ...]:
    key, texts = last
    try:
        return order.values_of(texts)
    except ValueError:
        return texts


