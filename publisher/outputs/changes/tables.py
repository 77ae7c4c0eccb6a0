"""Change tables: each published change laid out as rows of a Parquet table per published table.

Plain pyarrow, no Spark, because the same code writes from Spark executors and from the driver
alone (small cycles), and the two must give the same files.
"""
from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from publisher.config import ChangeTablesConfig
from publisher.errors import OutputStateError
from publisher.model.catalog import TableInfo
from publisher.model.values import TYPED, ValueType, shown
from publisher.rules.changes import (
    BEFORE_IMAGE,
    CHANGE_OPER,
    DELETE,
    INSERT,
    UPDATE,
    Change,
    StampedChange,
    as_utc,
    column_mask,
    record_length,
    trans_ind,
    transaction_hex,
)

HEADER_FIELDS = (
    "change_seq",
    "change_oper",
    "change_mask",
    "stream_position",
    "operation",
    "transaction_id",
    "timestamp",
    "partition_name",
)
TRAIL_FIELDS = ("HdrInd", "IOType", "TransInd", "BeforeAfter", "IOTime", "FormatType", "AuditPos", "RecLength")

_UTC_TIME = pa.timestamp("us", tz="UTC")
_FIELD_TYPES: dict[str, pa.DataType] = {
    "change_seq": pa.string(),
    "change_oper": pa.string(),
    "change_mask": pa.binary(),
    "stream_position": pa.string(),
    "operation": pa.string(),
    "transaction_id": pa.string(),
    "timestamp": _UTC_TIME,
    "partition_name": pa.string(),
    "HdrInd": pa.string(),
    "IOType": pa.string(),
    "TransInd": pa.int8(),
    "BeforeAfter": pa.string(),
    "IOTime": _UTC_TIME,
    "FormatType": pa.string(),
    "AuditPos": pa.int64(),
    "RecLength": pa.int32(),
}
_VALUE_TYPES: dict[ValueType, pa.DataType] = {
    ValueType.INT: pa.int64(),
    ValueType.STATE: pa.bool_(),
    ValueType.TIME: _UTC_TIME,
    ValueType.OCTET: pa.binary(),
    ValueType.STRING: pa.string(),
}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_PLAIN_DIRECTORY = re.compile(r"[A-Za-z0-9_.$-]+")
ENCODED_DIRECTORY_PREFIX = "%"
"""Starts the directory of a table whose name is not plain; no plain name contains it."""
_BATCH_ROWS = 10_000
"""Rows converted to Arrow at a time, so a large cycle never holds all its rows as dicts."""


class ChangeTableError(OutputStateError):
    """A change that cannot be laid out as change-table rows; the message names table and column."""


@functools.lru_cache(maxsize=16)
def header_columns(options: ChangeTablesConfig) -> tuple[str, ...]:
    """The header column names in their order: the header fields, then the trail fields if asked."""
    return tuple(options.header_prefix + name for name in _header_fields(options))


def _header_fields(options: ChangeTablesConfig) -> tuple[str, ...]:
    return HEADER_FIELDS + (TRAIL_FIELDS if options.trail_header else ())


def change_table_schema(table: TableInfo, options: ChangeTablesConfig) -> pa.Schema:
    """The header columns, then the table's columns in its own order, typed by value type."""
    headers = header_columns(options)
    own = {c.name.lower(): c.name for c in table.columns}
    for header in headers:
        clash = own.get(header.lower())
        if clash is not None:
            raise ChangeTableError(
                f"table {shown(table.name)}: column {shown(clash)} has the name of the change-table header "
                f"column {header!r}; change output.change_tables.header_prefix "
                f"(now {options.header_prefix!r}) to one no column name starts with"
            )
    fields = [pa.field(name, _FIELD_TYPES[field]) for name, field in zip(headers, _header_fields(options), strict=True)]
    fields += [pa.field(c.name, _VALUE_TYPES[c.value_type]) for c in table.data_columns]
    return pa.schema(fields)


def change_table_rows(stamped: StampedChange, table: TableInfo, options: ChangeTablesConfig) -> list[dict[str, Any]]:
    """The rows of one change: an update that logged its old values gives a before-image row and
    then the update, both with the update's change_seq (so the two join on it); any other change
    gives one row."""
    names = change_table_schema(table, options).names
    return [dict(zip(names, row, strict=True)) for row in change_table_values(stamped, table, options)]


def change_table_values(stamped: StampedChange, table: TableInfo, options: ChangeTablesConfig) -> list[list[Any]]:
    """`change_table_rows` as lists in the change table's column order, as the files take them."""
    change = stamped.change
    _check(change, table)
    rows: list[list[Any]] = []
    if change.before is not None:
        rows.append(_row(stamped, table, options, BEFORE_IMAGE, change.before, b"", len(rows)))
    mask = column_mask(table, change.changed, first_bit=len(header_columns(options)))
    rows.append(_row(stamped, table, options, change.operation, change.after, mask, len(rows)))
    return rows


def _check(change: Change, table: TableInfo) -> None:
    if change.operation not in (INSERT, UPDATE, DELETE):
        raise ChangeTableError(
            f"table {shown(table.name)}: the change at event {change.record_id} has operation "
            f"{shown(change.operation)}, not INSERT, UPDATE or DELETE"
        )
    if change.before is not None and change.operation != UPDATE:
        raise ChangeTableError(
            f"table {shown(table.name)}: the {change.operation} at event {change.record_id} has a before-image, "
            "which only an UPDATE can have"
        )
    known = _data_column_names(table)
    for values in (change.after, change.before or (), change.changed):
        for name in values:
            if name not in known:
                raise ChangeTableError(
                    f"table {shown(table.name)}: change at event {change.record_id} carries column "
                    f"{shown(name)}, which the table does not have"
                )


@functools.lru_cache(maxsize=256)
def _data_column_names(table: TableInfo) -> frozenset[str]:
    return frozenset(c.name for c in table.data_columns)


def _row(
    stamped: StampedChange,
    table: TableInfo,
    options: ChangeTablesConfig,
    operation: str,
    values: Mapping[str, str | None],
    mask: bytes,
    index: int,
) -> list[Any]:
    change = stamped.change
    time = as_utc(change.event_time)
    before_image = operation == BEFORE_IMAGE
    header: list[Any] = [
        stamped.change_seq,
        CHANGE_OPER[operation],
        mask,
        str(change.record_id),
        operation,
        transaction_hex(change.transaction_id),
        time,
        _partition_name(time, options.partition_minutes),
    ]
    if options.trail_header:
        header += [
            "E",
            change.operation,
            trans_ind(stamped.place.row_index + index, stamped.place.rows),
            "B" if before_image or change.operation == DELETE else "A",
            time,
            "F" if change.fetched and not before_image else "R",
            change.record_id,
            record_length(values),
        ]
    return header + [None if (text := values.get(name)) is None else text if convert is None else
                     convert(text, name, change) for name, convert in _converters(table)]


@functools.lru_cache(maxsize=256)
def _converters(table: TableInfo) -> tuple[tuple[str, Callable[[str, str, Change], Any] | None], ...]:
    """Per data column: its name and how its published text becomes the Parquet value (None: the
    text itself, a string)."""
    return tuple((column.name, None if column.value_type is ValueType.STRING else
                  functools.partial(_typed, table, column.value_type, TYPED[column.value_type]))
                 for column in table.data_columns)


def _typed(table: TableInfo, value_type: ValueType, typed: Callable[[str], Any], text: str, name: str,
           change: Change) -> Any:
    """The Parquet value of a published text; a text the column type cannot hold is refused with
    table and column named, rather than by pyarrow naming neither."""
    try:
        value = typed(text)
        if value_type is ValueType.INT and not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError
        return value
    except (ValueError, OverflowError):
        raise ChangeTableError(
            f"table {shown(table.name)}: column {shown(name)} of the change at event {change.record_id} "
            f"has {shown(text)}, which is not a {value_type.value} value a change table can hold"
        ) from None


def _partition_name(time: dt.datetime | None, minutes: int) -> str | None:
    """The period of `minutes` minutes, counted from UTC midnight, that holds `time`."""
    if not minutes or time is None:
        return None
    midnight = time.replace(hour=0, minute=0, second=0, microsecond=0)
    period = dt.timedelta(minutes=minutes)
    start = midnight + (time - midnight) // period * period
    end = start + period
    return f"{start:%Y%m%dT%H%M%S}_{end:%Y%m%dT%H%M%S}"


def table_directory(name: str) -> str:
    """The directory of a table's change table: the name itself when it is plain (only ASCII
    letters, digits and _ . $ -, not starting with . or _), else "%" followed by the name
    percent-encoded (urllib.parse.quote with safe=""), so that no name can escape the changes
    directory or start with the . or _ that Spark and Hadoop readers skip as hidden. Plain names
    never contain "%", so no two tables share a directory; decode with unquote(directory[1:])."""
    if _PLAIN_DIRECTORY.fullmatch(name) and not name.startswith((".", "_")):
        return name
    return ENCODED_DIRECTORY_PREFIX + quote(name, safe="")


def write_change_table_files(
    stamped: Iterable[StampedChange],
    tables: Mapping[str, TableInfo],
    directory: Path,
    file_name: str,
    options: ChangeTablesConfig,
) -> dict[str, int]:
    """Write `directory/<table directory>/file_name` for each table the changes touch, its rows in
    the changes' order; returns the rows written per table. Not synced: the caller flushes once."""
    with ChangeTableFiles(tables, directory, file_name, options) as files:
        for item in stamped:
            files.add(item)
    return files.rows


_OpenTable = tuple[pq.ParquetWriter, pa.Schema, list[list[Any]]]
"""A table's file being written, its schema, and the rows not yet written."""


class ChangeTableFiles:
    """One Parquet file per table, written as the changes stream by: memory holds a batch of
    rows per table, not the part."""

    def __init__(
        self, tables: Mapping[str, TableInfo], directory: Path, file_name: str, options: ChangeTablesConfig,
        earlier: frozenset[str] = frozenset(),
    ) -> None:
        self.tables = tables
        self.earlier = earlier
        """The tables described by an earlier shape than they have now (`model.shapes`)."""
        self.directory = directory
        self.file_name = file_name
        self.options = options
        self.rows: dict[str, int] = {}
        self._open: dict[str, _OpenTable] = {}

    def add(self, item: StampedChange) -> None:
        name = item.change.table
        entry = self._open.get(name)
        if entry is None:
            entry = self._open_table(name)
        batch = entry[2]
        table = self.tables[name]
        batch += change_table_values(item.within(table) if name in self.earlier else item, table, self.options)
        if len(batch) >= _BATCH_ROWS:
            self._flush(name)

    def _open_table(self, name: str) -> _OpenTable:
        table = self.tables.get(name)
        if table is None:
            raise ChangeTableError(f"table {shown(name)}: a change names a table the catalog does not hold")
        schema = change_table_schema(table, self.options)
        folder = self.directory / table_directory(name)
        folder.mkdir(parents=True, exist_ok=True)
        entry: _OpenTable = (pq.ParquetWriter(folder / self.file_name, schema), schema, [])
        self._open[name] = entry
        self.rows[name] = 0
        return entry

    def _flush(self, name: str) -> None:
        writer, schema, batch = self._open[name]
        if batch:
            writer.write_table(_arrow_table(batch, schema))
            self.rows[name] += len(batch)
            batch.clear()

    def close(self) -> dict[str, int]:
        """Flush and close every table's file; the rows written per table."""
        for name, (writer, _, _) in self._open.items():
            self._flush(name)
            writer.close()
        self._open.clear()
        return dict(self.rows)

    def __enter__(self) -> ChangeTableFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _arrow_table(rows: list[list[Any]], schema: pa.Schema) -> pa.Table:
    """Rows to Arrow by columns, transposed by `zip`: pyarrow's from_pylist takes about 20 µs a row."""
    columns = zip(*rows, strict=True)
    return pa.Table.from_arrays([pa.array(column, field.type) for column, field in zip(columns, schema, strict=True)],
                                schema=schema)
