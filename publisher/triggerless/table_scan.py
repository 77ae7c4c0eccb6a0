"""A published table read whole, as columns: each row's key texts and published values, for a
triggerless cycle's comparison (`triggerless.cycle`).

Where the database can (`Dialect.copy_reader`) the server sends the rows through COPY as CSV and pyarrow
parses them, so no Python runs per row unless a value needs encoding one by one
(`row_reading.published_column`); elsewhere a cursor streams them. Either way the read is one
statement, so it sees the table as of one moment.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
from sqlalchemy import Connection

from publisher.dialects import dialect_of
from publisher.model.canonical import canonical_value_column
from publisher.model.catalog import ColumnInfo, MultiValued, TableInfo
from publisher.pipeline.queryback import QueryBackContext, reading_session
from publisher.pipeline.row_reading import LinkedReading, RowReading, as_texts, published_column

FIRST_ROWS = 100
SCAN_BYTES = 16 << 20
"""A cursor's first fetch, in rows, and about the bytes of rows each next one takes (at most the
rows asked for): no more memory for a table of large values than for one of small ones."""


@dataclass(frozen=True)
class ScannedRows:
    """Rows of a table: their key texts (key order) and the texts of their values as read (the
    table's value columns), a column each. A value is published from its text only where it
    changed (`row_reading.published_column`): most rows of a cycle change nothing."""

    keys: list[pa.Array]
    values: list[pa.Array]

    def __len__(self) -> int:
        return len(self.keys[0])


def scan_table_columns(
    ctx: QueryBackContext, table: TableInfo, rows: int, linked: tuple[MultiValued, TableInfo] | None = None,
) -> Iterator[ScannedRows]:
    """Every current row of `table`: through COPY where the database can, in blocks of about a
    MiB, else by a cursor, about `rows` at a time (fewer where they are large: `SCAN_BYTES`).
    `linked`: `table` is the child table of a multi-valued attribute of a parent, read with the
    parent's key (`LinkedReading`)."""
    with reading_session(ctx) as conn:
        reading = (RowReading(table, ctx.schema, conn.dialect) if linked is None
                   else LinkedReading(*linked, ctx.schema, conn.dialect))
        copy = dialect_of(conn).copy_reading()
        if copy is not None and copy.can_copy(conn):
            yield from _copied(conn, reading, copy)
            return
        result = conn.execution_options(stream_results=True).execute(reading.select())
        wanted = min(rows, FIRST_ROWS)
        while records := result.fetchmany(wanted):
            scanned = _published(reading, [list(column) for column in zip(*records, strict=True)])
            yield scanned
            wanted = _rows_within(SCAN_BYTES, scanned, len(records), rows)


def _rows_within(size: int, scanned: ScannedRows, count: int, most: int) -> int:
    """How many rows of the size of the `count` just read make about `size` bytes (at least one,
    at most `most`): values of some MB are fetched a few at a time."""
    read = sum(column.nbytes for column in (*scanned.keys, *scanned.values))
    return max(1, min(most, size * count // max(1, read)))


def _copied(conn: Connection, reading: RowReading, copy: ModuleType) -> Iterator[ScannedRows]:
    """COPY's rows cut into blocks that each end where a row does (`copy.copy_blocks`), each
    parsed alone: a long row is a block of its own, and no Python reads the stream for pyarrow."""
    compiled = reading.select().compile(dialect=conn.dialect)
    names = [f"c{i}" for i in range(len(reading.table.columns))]
    for block in copy.copy_blocks(conn, str(compiled)):
        parsed = pacsv.read_csv(pa.BufferReader(block), **copy.text_columns_options(names, len(block) + 1))
        if parsed.num_rows:
            yield _published(reading, [parsed.column(name).combine_chunks() for name in names])


def _published(reading: RowReading, columns: list[Any]) -> ScannedRows:
    """Keys spelled canonically, so a row is the same object whatever the database's text of
    its key (a decimal's scale or a timestamp's precision changed by an ALTER)."""
    keys = [canonical_value_column(_texts(columns[i]), kind)
            for i, (_, kind) in zip(reading.key_indices, reading.table.key_columns, strict=True)]
    values = [_read_texts(reading.table, column, columns[index]) for index, column in reading.values]
    return ScannedRows(keys, values)


def _texts(column: pa.Array | list[Any]) -> pa.Array:
    """A key column's texts, as the row's key is spelled from them (`str` of what was read)."""
    if isinstance(column, pa.Array):
        return column
    return pa.array([None if value is None else str(value) for value in column], pa.string())


def _read_texts(table: TableInfo, column: ColumnInfo, values: pa.Array | list[Any]) -> pa.Array:
    """A value column as text: as read where it is text (a published text read again publishes the
    same), else (a column that stores what it is given: a BLOB as bytes, an INTEGER as int) published from what
    was read."""
    if isinstance(values, pa.Array):
        return values
    texts = as_texts(values)
    if texts is not None:
        return texts
    published, _ = published_column(table, column, values)
    return published
