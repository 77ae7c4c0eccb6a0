"""The read on PostgreSQL through COPY: the server sends the window's rows as CSV and pyarrow
parses them into Arrow batches, so no Python runs per row. It reads the same rows as
`read.read_rows` and gives the same values (a test holds the two equal on hostile rows);
`read.read_batches` uses it where it can: PostgreSQL in UTF-8 through psycopg 3.
"""
from __future__ import annotations

import select as io_select
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from sqlalchemy import BigInteger, Connection, String, Table, case, cast, extract, null, select
from sqlalchemy.exc import DBAPIError

from publisher.config import EVENT_LOG_COLUMNS
from publisher.dialects import dialect_of
from publisher.model.arrow import arrow_schema_of
from publisher.model.events import EVENT_SCHEMA, UNREADABLE
from publisher.model.values import shown
from publisher.pipeline.event_log import event_log_table_of, role_columns
from publisher.pipeline.row_limit import oversized_reason, row_bytes, within_limit
from publisher.pipeline.window import CycleWindow, window_predicate

BLOCK_BYTES = 1 << 20
"""CSV bytes pyarrow parses at a time: about 10,000 event log rows of the usual width."""
MAX_BLOCK_BYTES = (1 << 31) - 1
"""pyarrow's block size is a 32-bit number: a block holds less (a longer row fails to parse)."""
_TEXT_ROLES = EVENT_LOG_COLUMNS[4:]
_NAMES = ("record_id", "status", "event_type", "micros", *_TEXT_ROLES, "transaction_id", "time_text", "size")
_TYPES = {
    "record_id": pa.int64(), "micros": pa.int64(), "size": pa.int64(),
    **{name: pa.string() for name in ("status", "event_type", *_TEXT_ROLES, "transaction_id", "time_text")},
}


def can_copy(conn: Connection) -> bool:
    """COPY needs psycopg 3's copy API, and text pyarrow can take as it comes: UTF-8
    (`Dialect.copy_encoding`)."""
    driver = conn.connection.driver_connection
    dialect = dialect_of(conn)
    if not hasattr(driver, "cursor") or not hasattr(driver, "pgconn"):
        return False
    return dialect.copy_encoding(conn).upper() in ("UTF8", "UTF-8")


def copy_batches(conn: Connection, window: CycleWindow, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """The window's events within record_ids lo..hi, in record_id order, as EVENT_SCHEMA batches."""
    compiled = _query(window, lo, hi, conn.dialect.name).compile(dialect=conn.dialect,
                                                                 compile_kwargs={"render_postcompile": True})
    sql = dialect_of(conn).copy_out_sql(str(compiled))
    schema = arrow_schema_of(EVENT_SCHEMA)
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    parse = pacsv.ParseOptions(newlines_in_values=True)
    convert = pacsv.ConvertOptions(column_types=_TYPES, null_values=[""], strings_can_be_null=True,
                                   quoted_strings_can_be_null=False)
    with cursor.copy(sql, compiled.params) as copy:
        for block in row_blocks(copy_rows(copy)):
            read = pacsv.ReadOptions(column_names=list(_NAMES), block_size=len(block) + 1, use_threads=False)
            parsed = pacsv.read_csv(pa.BufferReader(block), read_options=read, parse_options=parse,
                                    convert_options=convert)
            for batch in parsed.to_batches():
                if batch.num_rows:
                    yield _event_batch(batch, schema, window)


def copy_rows(copy: Any) -> Iterator[Any]:
    """The rows of a COPY … TO STDOUT that psycopg's `cursor.copy()` began, as libpq hands them
    over (one whole row each), taken from libpq itself: psycopg's own iteration runs a generator
    and a wait for every row, 0.75 s of the client's time for 1M rows of a table where this takes
    0.35 s. It waits on the socket only when libpq holds no whole row, with the GIL let go, and
    reads the statement's end itself, raising the server's error as psycopg would. Read to the
    end, the COPY leaves psycopg nothing to do; left with an exception, psycopg cancels it."""
    pgconn = copy.connection.pgconn
    while True:
        size, row = pgconn.get_copy_data(1)
        if size > 0:
            yield row
        elif size == 0:
            _readable(pgconn)
        else:
            break
    failed = None
    while True:  # every result, so that the connection is idle again whatever it says
        while pgconn.is_busy():
            _readable(pgconn)
        result = pgconn.get_result()
        if result is None:
            break
        if result.status != psycopg.pq.ExecStatus.COMMAND_OK and failed is None:
            failed = psycopg.errors.error_from_result(result, encoding=copy.connection.info.encoding)
    if failed is not None:
        raise failed


def _readable(pgconn: Any) -> None:
    """Wait until the server has sent more, then let libpq take it in. poll(), not select(),
    which refuses a descriptor numbered 1024 or more (a long-running process's may be)."""
    waiting = io_select.poll()
    waiting.register(pgconn.socket, io_select.POLLIN)
    waiting.poll()
    pgconn.consume_input()


def copy_blocks(conn: Connection, query: str) -> Iterator[bytearray]:
    """The CSV of `query`'s rows (SQL) sent through COPY, in blocks of about BLOCK_BYTES that
    each end where a row does (`row_blocks`): each parses alone, a long row a block of its own."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(dialect_of(conn).copy_out_sql(query)) as copy:
        yield from row_blocks(copy_rows(copy))


def row_blocks(rows: Iterable[Any]) -> Iterator[bytearray]:
    """COPY's rows (libpq hands them over one whole row at a time) joined into blocks of about
    BLOCK_BYTES, each ending where a row does, so each parses alone whatever its rows' length:
    a row longer than a block is a block of its own, and no query has to measure the rows first."""
    block = bytearray()
    for row in rows:
        if block and len(block) + len(row) > MAX_BLOCK_BYTES - 1:
            yield block
            block = bytearray()
        block += row
        if len(block) >= BLOCK_BYTES:
            yield block
            block = bytearray()
    if block:
        yield block


def _event_log(window: CycleWindow) -> Table:
    extra = () if window.transaction_column is None else (window.transaction_column,)
    return event_log_table_of(window.table, window.columns + extra, window.schema)


def _query(window: CycleWindow, lo: int, hi: int, dialect: str) -> Any:
    """`read_rows`'s query with every value as text, and the event_time as microseconds since
    the epoch (a time without zone read as UTC), NULL where it is no time; in future mode, the
    text of an event_time that is no time. Each expression costs every row of the window, so
    none is asked twice (the database does not share them)."""
    w = window
    table = _event_log(w)
    c = role_columns(table, w.columns)
    transaction = null() if w.transaction_column is None else table.c[w.transaction_column]
    readable = dialect_of(dialect).readable_time(c["event_time"])
    size = row_bytes(w, table, dialect)
    return (
        select(
            c["record_id"],
            cast(c["status"], String),
            cast(c["event_type"], String),
            cast(extract("epoch", readable) * 1_000_000, BigInteger),
            *(cast(within_limit(w, table, role, c[role], size, dialect), String) for role in _TEXT_ROLES),
            cast(transaction, String),
            case((readable.is_(None), cast(c["event_time"], String)), else_=null()) if w.future else null(),
            size,
        )
        .where(window_predicate(w, table, lo, hi, dialect))
        .order_by(c["record_id"])
    )


def _event_batch(batch: pa.RecordBatch, schema: pa.Schema, window: CycleWindow) -> pa.RecordBatch:
    times = pc.cast(batch.column("micros"), pa.timestamp("us", tz="UTC"))
    unreadable = pa.nulls(batch.num_rows, pa.string())
    oversized = pc.greater(batch.column("size"), window.max_row_bytes)
    if window.future or pc.any(oversized).as_py():
        unreadable = pa.array(_problems(batch, window), pa.string())
    columns = {
        "record_id": batch.column("record_id"),
        "event_time": times,
        UNREADABLE: unreadable,
        **{name: batch.column(name) for name in ("status", "event_type", *_TEXT_ROLES, "transaction_id")},
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def _problems(batch: pa.RecordBatch, window: CycleWindow) -> list[str | None]:
    """A row over the limit, and in future mode an event_time that is no time, reject the row,
    as `read._event_row` says."""
    is_time = batch.column("micros").is_valid().to_pylist()
    texts = batch.column("time_text").to_pylist()
    sizes = batch.column("size").to_pylist()
    problems: list[str | None] = []
    for good, text, size in zip(is_time, texts, sizes, strict=True):
        found = [oversized_reason(size, window.max_row_bytes)] if size > window.max_row_bytes else []
        if window.future and not good:
            found.append("event_time is empty" if text is None else f"event_time {shown(text)} is not a time")
        problems.append("; ".join(found) or None)
    return problems


def text_columns_options(names: list[str], block_bytes: int) -> dict[str, Any]:
    """pyarrow's CSV options for COPY's CSV of text columns `names`: a NULL is an empty field,
    an empty text a quoted one, and a text may hold line breaks."""
    return {
        "read_options": pacsv.ReadOptions(column_names=names, block_size=block_bytes),
        "parse_options": pacsv.ParseOptions(newlines_in_values=True),
        "convert_options": pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, null_values=[""],
                                                strings_can_be_null=True, quoted_strings_can_be_null=False),
    }


def copy_texts(conn: Connection, query: Any, columns: int) -> list[pa.Array] | None:
    """A statement's rows, every column text, read whole through COPY as string columns (for a
    bounded statement: a snapshot's chunk); None where the rows are more than one parse takes
    (2 GiB), which the caller reads by a cursor instead."""
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    sql = dialect_of(conn).copy_out_sql(str(compiled))
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    driver_error = conn.dialect.loaded_dbapi.Error
    try:
        with cursor.copy(sql, compiled.params) as copy:
            data = bytearray()
            for row in copy_rows(copy):
                data += row
    except driver_error as exc:  # as SQLAlchemy raises it for a statement of its own (a lock given way)
        raise DBAPIError.instance(sql, compiled.params, exc, driver_error) from exc
    names = [f"c{i}" for i in range(columns)]
    if not data:
        return [pa.array([], pa.string()) for _ in names]
    if len(data) >= MAX_BLOCK_BYTES:
        return None
    table = pacsv.read_csv(pa.BufferReader(data), **text_columns_options(names, len(data) + 1))
    return [table.column(name).combine_chunks() for name in names]
