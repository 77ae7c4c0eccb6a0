"""Change-table rows built a column at a time per table are the rows the oracle builds one change
at a time (`tests/oracle/change_rows.py`): on generated tables (compound keys, a key-only table,
every value type, unicode names) and changes (before-images, NULLs, texts with line separators
and quotes, unknown times and transactions, refused values and columns), with and without the
trail header and time partitions; and so are the Parquet files, batch after batch."""
from __future__ import annotations

import base64
import datetime as dt
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hunting import budget
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from oracle.change_rows import change_rows

from publisher.config import ChangeTablesConfig
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import ValueType
from publisher.outputs.changes import tables
from publisher.outputs.changes.columns import ChangeTableError, change_table_columns
from publisher.outputs.changes.tables import change_table_schema, write_change_table_files
from publisher.rules.changes import DELETE, INSERT, UPDATE, Change, StampedChange, TransactionPlace

UTC = dt.timezone.utc
_TEXTS = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\u2028\u2029\x85", '"quoted" \\ /', "Zoë 🎉", ""])


def _valid_text(value_type: ValueType) -> st.SearchStrategy[str]:
    if value_type is ValueType.INT:
        return st.integers(-(2**63), 2**63 - 1).map(str)
    if value_type is ValueType.STATE:
        return st.sampled_from(["true", "false"])
    if value_type is ValueType.TIME:
        return st.integers(-62_135_596_800, 253_402_300_799).map(str)
    if value_type is ValueType.OCTET:
        return st.binary(max_size=8).map(lambda raw: base64.b64encode(raw).decode("ascii"))
    return _TEXTS


_REFUSED = {ValueType.INT: ["x", "1.5", str(2**63), str(-(2**63) - 1)], ValueType.TIME: ["soon", "later"],
            ValueType.OCTET: ["A", "AB"]}


@st.composite
def tables_(draw: st.DrawFn) -> TableInfo:
    names = draw(st.lists(st.sampled_from(["id", "k2", "Name é", "a\u2028b", "v", "w", "photo", "flag"]), min_size=1,
                          max_size=6, unique=True))
    kinds = [t for t in ValueType if t is not ValueType.DN]
    types = draw(st.lists(st.sampled_from(kinds), min_size=len(names), max_size=len(names)))
    keys = draw(st.integers(1, len(names)))
    columns = tuple(ColumnInfo(name, value_type, i < keys, ordinal=i + 1)
                    for i, (name, value_type) in enumerate(zip(names, types, strict=True)))
    return TableInfo(draw(st.sampled_from(["usr", "t/ü"])), columns)


@st.composite
def values_(draw: st.DrawFn, table: TableInfo, refuse: bool) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for column in table.data_columns:
        if draw(st.booleans()):
            continue
        bad = _REFUSED.get(column.value_type, [])
        if refuse and bad and draw(st.integers(0, 9)) == 0:
            values[column.name] = draw(st.sampled_from(bad))
        else:
            values[column.name] = draw(st.none() | _valid_text(column.value_type))
    return values


@st.composite
def changes_(draw: st.DrawFn, table: TableInfo, refuse: bool) -> StampedChange:
    operation = draw(st.sampled_from([INSERT, UPDATE, DELETE] + (["UPSERT"] if refuse else [])))
    after = draw(values_(table, refuse))
    if refuse and draw(st.integers(0, 19)) == 0:
        after["not a column"] = "1"
    before = draw(st.none() | values_(table, refuse)) if operation == UPDATE or refuse else None
    names = [c.name for c in table.data_columns]
    changed = tuple(name for name in names if draw(st.booleans()))
    time = draw(st.none() | st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30), timezones=st.just(UTC))
                | st.datetimes(dt.datetime(1969, 1, 1), dt.datetime(2100, 1, 1)))
    transaction = draw(st.none() | st.sampled_from(["12345", "340282366920938463463374607431768211456", "tx-é"]))
    change = Change(table.name, operation, draw(st.integers(1, 2**40)), time, transaction, after, before, changed,
                    draw(st.booleans()))
    index, row_index = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    place = TransactionPlace(index, index + draw(st.integers(1, 3)), row_index,
                             row_index + change.records + draw(st.integers(0, 2)))
    return StampedChange(change, f"{draw(st.integers(0, 10**16 - 1)):016d}{draw(st.integers(1, 10**9)):019d}", place)


@st.composite
def batches(draw: st.DrawFn, refuse: bool = False) -> tuple[TableInfo, list[StampedChange], ChangeTablesConfig]:
    table = draw(tables_())
    items = draw(st.lists(changes_(table, refuse), max_size=8))
    options = ChangeTablesConfig(enabled=True, trail_header=draw(st.booleans()),
                                 partition_minutes=draw(st.sampled_from([0, 15, 90, 240, 1440])),
                                 header_prefix=draw(st.sampled_from(["header__", "h_"])))
    return table, items, options


def _typed(column: list[Any]) -> list[tuple[type, Any]]:
    """Values with their types, so that True and 1, or "1" and 1, never pass for each other."""
    return [(type(value), value) for value in column]


def _oracle_columns(items: list[StampedChange], table: TableInfo, options: ChangeTablesConfig) -> list[list[Any]]:
    rows = [row for item in items for row in change_rows(item, table, options)]
    width = len(change_table_schema(table, options))
    return [[row[i] for row in rows] for i in range(width)]


@settings(max_examples=budget(300), suppress_health_check=[HealthCheck.too_slow])
@given(batches(refuse=True))
@example((TableInfo("k", (ColumnInfo("id", ValueType.INT, True, ordinal=1),)), [StampedChange(
    Change("k", DELETE, 9, None, None, {"id": "7"}, None, ("id",), False), "0" * 16 + "1".zfill(19),
    TransactionPlace(0, 1, 0, 1))], ChangeTablesConfig(enabled=True, trail_header=True)))
@example((TableInfo("k", (ColumnInfo("id", ValueType.INT, True, ordinal=1), ColumnInfo("n", ValueType.INT, False,
                                                                                        ordinal=2))),
          [StampedChange(Change("k", INSERT, 8, None, None, {"id": "7", "n": "1"}, None, (), False), "0" * 35,
                         TransactionPlace(0, 1, 0, 1)),
           StampedChange(Change("k", UPDATE, 9, None, None, {"id": "7", "n": "later"}, {"id": "7", "n": "first"}, (),
                                False), "0" * 35, TransactionPlace(0, 1, 0, 2))],
          ChangeTablesConfig(enabled=True)))
def test_the_columns_are_the_oracles_rows_or_the_same_refusal(batch: Any) -> None:
    table, items, options = batch
    try:
        expected = _oracle_columns(items, table, options)
    except ChangeTableError as refused:
        with pytest.raises(ChangeTableError) as raised:
            change_table_columns(items, table, options)
        assert str(raised.value) == str(refused)
        return
    built = change_table_columns(items, table, options)
    assert [_typed(column) for column in built] == [_typed(column) for column in expected]


@settings(max_examples=budget(60), suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.integers(1, 4))
def test_the_files_hold_the_oracles_rows_batch_after_batch(batch: Any, batch_rows: int) -> None:
    table, items, options = batch
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables, "_BATCH_ROWS", batch_rows)
        directory = Path(folder)
        written = write_change_table_files(items, {table.name: table}, directory, "f.parquet", options)
        read = pq.read_table(directory / tables.table_directory(table.name) / "f.parquet") if items else None
    expected = _oracle_columns(items, table, options)
    assert written == ({table.name: len(expected[0])} if items else {})
    if items:
        schema = change_table_schema(table, options)
        assert read is not None
        oracle = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(expected, schema, strict=True)],
                                      schema=schema)
        assert read.to_pylist() == oracle.to_pylist()

