"""Change tables: each published change laid out as rows of a Parquet table per published table.

Plain pyarrow, no Spark, because the same code writes from Spark executors and from the driver
alone (small cycles), and the two must give the same files.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from publisher.config import ChangeTablesConfig
from publisher.model.catalog import TableInfo
from publisher.model.values import ValueType, shown
from publisher.outputs.changes.columns import (
    HEADER_FIELDS,
    TRAIL_FIELDS,
    ChangeTableError,
    change_table_columns,
    header_columns,
    header_fields,
)
from publisher.rules.changes import StampedChange

__all__ = ["HEADER_FIELDS", "TRAIL_FIELDS", "ChangeTableError", "ChangeTableFiles", "change_table_rows",
           "change_table_schema", "header_columns", "table_directory", "write_change_table_files"]

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
_PLAIN_DIRECTORY = re.compile(r"[A-Za-z0-9_.$-]+")
ENCODED_DIRECTORY_PREFIX = "%"
"""Starts the directory of a table whose name is not plain; no plain name contains it."""
_BATCH_ROWS = 10_000
"""Rows converted to Arrow at a time per table, so a large cycle never holds all its rows."""


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
    fields = [pa.field(name, _FIELD_TYPES[field]) for name, field in zip(headers, header_fields(options), strict=True)]
    fields += [pa.field(c.name, _VALUE_TYPES[c.value_type]) for c in table.data_columns]
    return pa.schema(fields)


def change_table_rows(stamped: StampedChange, table: TableInfo, options: ChangeTablesConfig) -> list[dict[str, Any]]:
    """The rows of one change: an update that logged its old values gives a before-image row and
    then the update, both with the update's change_seq (so the two join on it); any other change
    gives one row."""
    names = change_table_schema(table, options).names
    columns = change_table_columns([stamped], table, options)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


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


@dataclass
class _OpenTable:
    """A table's file being written: its writer, its schema and the changes not yet written,
    with their rows."""

    writer: pq.ParquetWriter
    schema: pa.Schema
    table: TableInfo
    changes: list[StampedChange] = field(default_factory=list)
    rows: int = 0


class ChangeTableFiles:
    """One Parquet file per table, written as the changes stream by: memory holds a batch of
    changes per table, not the part, and each batch is laid out a column at a time
    (`columns.change_table_columns`)."""

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
        entry.changes.append(item.within(entry.table) if name in self.earlier else item)
        entry.rows += item.change.records
        if entry.rows >= _BATCH_ROWS:
            self._flush(entry)

    def _open_table(self, name: str) -> _OpenTable:
        table = self.tables.get(name)
        if table is None:
            raise ChangeTableError(f"table {shown(name)}: a change names a table the catalog does not hold")
        schema = change_table_schema(table, self.options)
        folder = self.directory / table_directory(name)
        folder.mkdir(parents=True, exist_ok=True)
        entry = self._open[name] = _OpenTable(pq.ParquetWriter(folder / self.file_name, schema), schema, table)
        self.rows[name] = 0
        return entry

    def _flush(self, entry: _OpenTable) -> None:
        if entry.changes:
            columns = change_table_columns(entry.changes, entry.table, self.options)
            entry.writer.write_table(pa.Table.from_arrays(
                [pa.array(column, f.type) for column, f in zip(columns, entry.schema, strict=True)],
                schema=entry.schema))
            self.rows[entry.table.name] += entry.rows
            entry.changes.clear()
            entry.rows = 0

    def close(self) -> dict[str, int]:
        """Flush and close every table's file; the rows written per table. Every file is closed
        even when a batch is refused; the first refusal is raised then."""
        open_tables, self._open = list(self._open.values()), {}
        refused: Exception | None = None
        for entry in open_tables:
            try:
                self._flush(entry)
            except Exception as exc:  # noqa: BLE001 - raised below, once every file is closed
                refused = refused or exc
            finally:
                entry.writer.close()
        if refused is not None:
            raise refused
        return dict(self.rows)

    def __enter__(self) -> ChangeTableFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
