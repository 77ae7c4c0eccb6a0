"""Objects with no query-back event are resolved as column operations (`rules.columnar`); the
per-object rules (`objects.publish_objects`: precedence, then operations) are the oracle. On
generated events of every non-query-back type, with texts XML must escape, empty and NULL
values, shared and NULL event times, both paths give the same operations and statuses."""
from __future__ import annotations

import datetime as dt
from typing import Any
from unittest.mock import patch

import pyarrow as pa
import pytest
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle.objects import StatusNote, publish_objects, publish_read
from oracle.operations import PublishedOperation

from publisher.model.arrow import arrow_schema_of
from publisher.model.canonical import canonical_key_of
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import ValueType
from publisher.pipeline import resolve
from publisher.pipeline.objects import CHANGE_FIELDS, PUBLISHABLE_FIELDS, ObjectsContext
from publisher.pipeline.queryback import QueryBackContext
from publisher.pipeline.timing import StepTimer
from publisher.rules.changes import Change
from publisher.rules.classify_batch import CLASSIFIED_SCHEMA
from publisher.rules.columnar.batch import query_back_operations, simple_operations, split_by_query_back
from publisher.rules.operations import OperationContext
from publisher.rules.precedence import VANISHED_REASON, CurrentRow

UTC = dt.UTC
TABLES = {
    "usr": TableInfo("usr", (
        ColumnInfo("idu", ValueType.INT, True, ordinal=1),
        ColumnInfo("fname", ValueType.STRING, False, ordinal=2),
        ColumnInfo("age", ValueType.INT, False, ordinal=3),
        ColumnInfo("photo", ValueType.OCTET, False, ordinal=4),
    ), retired=("lname",)),
    "a&b<c>": TableInfo("a&b<c>", (
        ColumnInfo("id", ValueType.STRING, True, ordinal=1),
        ColumnInfo('x"y', ValueType.STRING, False, ordinal=2),
        ColumnInfo("when", ValueType.TIME, False, ordinal=3),
    )),
    "member": TableInfo("member", (
        ColumnInfo("grp", ValueType.STRING, True, ordinal=1),
        ColumnInfo("usr", ValueType.INT, True, ordinal=2),
    )),
}
RETIRED = {"usr": ["lname"]}
"""A column a migration took away: only a removal of its values (type 3) names it."""
ATTRS = {"usr": ["idu", "fname", "age", "photo"], "a&b<c>": ["id", 'x"y', "when"], "member": ["grp", "usr"]}
TEXTS = st.none() | st.sampled_from(["", "plain", "a&b", "<x>", "]]>", "tab\there", "cr\r\nlf", "é ü", "'q'"])
TIMES = st.none() | st.sampled_from([dt.datetime(2026, 11, 23, 7, 0, tzinfo=UTC), dt.datetime(2026, 1, 1, tzinfo=UTC)])
FIELDS = dict(part.split() for part in CLASSIFIED_SCHEMA.split(", "))
SCHEMA = arrow_schema_of(", ".join(f"{name} {FIELDS[name]}" for name in PUBLISHABLE_FIELDS + CHANGE_FIELDS))
TRANSACTIONS = st.none() | st.sampled_from(["7", "8"])


@st.composite
def events(draw: st.DrawFn, types: tuple[int, ...] = (1, 2, 3, 4)) -> list[dict[str, Any]]:
    """Publishable events of a few objects (keys with XML's own characters among them, spelled
    canonically as triggers log them), as
    classification leaves them: per-field types name a column, key columns log no value."""
    count = draw(st.integers(0, 30))
    ids = draw(st.lists(st.integers(1, 10**6), min_size=count, max_size=count, unique=True))
    out = []
    for record_id in ids:
        table = draw(st.sampled_from(sorted(TABLES)))
        keys = [c for c in TABLES[table].columns if c.is_key]
        key = canonical_key_of(
            [draw(st.sampled_from(["1", "2"] if c.value_type is ValueType.INT else ["1", "2", "a<b&c"])) for c in keys],
            TABLES[table].key_columns,
        )
        code = draw(st.sampled_from(types))
        attr = None if code in (4, 5, 6) else draw(st.sampled_from(ATTRS[table] + RETIRED.get(table, [])[:code == 3]))
        column = None if attr is None else TABLES[table].column(attr)
        is_key = column is not None and column.is_key
        logs = code in (1, 2, 3) and not is_key and attr not in RETIRED.get(table, ())
        out.append({
            "record_id": record_id,
            "position_time": draw(TIMES),
            "class_name": table,
            "canonical_key": key,
            "event_type_code": code,
            "attr_name": attr,
            "value_type": ValueType.STRING.value if attr in RETIRED.get(table, ()) else (
                None if column is None else column.value_type.value),
            "old_text": draw(TEXTS) if logs and code == 2 else None,
            "new_text": draw(TEXTS) if logs else None,
            "event_time": draw(TIMES),
            "transaction_id": draw(TRANSACTIONS),
        })
    return out


def by_object(rows: list[dict[str, Any]]) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return table.sort_by([("class_name", "ascending"), ("canonical_key", "ascending")])


def context(insert_row_operation: str = "modify", changes: bool = False) -> ObjectsContext:
    operations = OperationContext(TABLES, "s&<x>", insert_row_operation, changes)
    return ObjectsContext(QueryBackContext("sqlite://", None, TABLES), operations)


@settings(max_examples=budget(300))
@given(events(), st.sampled_from(["modify", "add"]), st.booleans())
def test_columnar_operations_equal_the_per_object_rules(
    rows: list[dict[str, Any]], insert_row_operation: str, changes: bool
):
    """With the change formats on, each operation's change is the one the per-object rules
    describe too."""
    ctx = context(insert_row_operation, changes)
    table = by_object(rows)
    expected = list(publish_objects(table.to_pylist(), ctx))
    assert all(isinstance(item, PublishedOperation) for item in expected), "no query-back: every event is S"
    made = simple_operations(table, ctx.operations)
    assert made is not None
    assert made.num_rows == len(expected)
    assert _operations(made) == _outcomes(expected)[0]


@settings(max_examples=budget(200))
@given(events(types=(1, 2, 3, 4, 5, 6, 7, 8)))
def test_split_sends_every_object_with_a_query_back_event_to_the_per_object_rules(rows: list[dict[str, Any]]):
    table = by_object(rows)
    simple, rest = split_by_query_back(table)
    with_query_back = {(r["class_name"], r["canonical_key"]) for r in rows if r["event_type_code"] >= 5}
    ids = simple["record_id"].to_pylist() + rest["record_id"].to_pylist()
    assert sorted(ids) == sorted(r["record_id"] for r in rows)
    assert all((r["class_name"], r["canonical_key"]) not in with_query_back for r in simple.to_pylist())
    assert all((r["class_name"], r["canonical_key"]) in with_query_back for r in rest.to_pylist())
    kept = [r for r in table.to_pylist() if (r["class_name"], r["canonical_key"]) in with_query_back]
    assert rest.to_pylist() == kept


@pytest.mark.parametrize(
    ("code", "old", "new"), [(1, None, "a\x01b"), (2, "o\x02", "n"), (2, "o", "n\x03"), (3, "x", "\x0b")]
)
def test_a_text_xml_cannot_carry_is_named_as_the_per_object_rules_name_it(code: int, old: str | None, new: str):
    ctx = context()
    rows = [
        {"record_id": 1, "position_time": None, "class_name": "usr", "canonical_key": "idu=1", "event_type_code": 1,
         "attr_name": "age", "value_type": "int", "old_text": None, "new_text": "4"},
        {"record_id": 2, "position_time": None, "class_name": "usr", "canonical_key": "idu=1",
         "event_type_code": code, "attr_name": "fname", "value_type": "string", "old_text": old, "new_text": new},
    ]
    with pytest.raises(ValueError) as expected:
        list(publish_objects(by_object(rows).to_pylist(), ctx))
    with pytest.raises(ValueError) as made:
        simple_operations(by_object(rows), ctx.operations)
    assert str(made.value) == str(expected.value)
    assert "fname" in str(made.value) and "XML 1.0 cannot carry" in str(made.value)


@settings(max_examples=budget(150))
@given(events(), st.integers(1, 7), st.integers(1, 9))
def test_resolving_in_chunks_keeps_each_object_whole(rows: list[dict[str, Any]], batch_rows: int, chunk_rows: int):
    """However the stream is cut into batches and chunks, an object's events are merged as if
    the stream were one piece: a chunk only ends where an object does."""
    ctx = context()
    table = by_object(rows)
    expected = sorted((op.event_id, op.xml) for op in publish_objects(table.to_pylist(), ctx))  # type: ignore[union-attr]
    with patch.object(resolve, "RESOLVE_CHUNK_ROWS", chunk_rows):
        resolved = pa.Table.from_batches(
            list(resolve.resolve_batches(table.to_batches(max_chunksize=batch_rows), ctx, StepTimer())),
            schema=arrow_schema_of(resolve.RESOLVED_SCHEMA),
        )
    assert sorted(zip(resolved["event_id"].to_pylist(), resolved["xml"].to_pylist(), strict=True)) == expected


VALUES = st.none() | st.sampled_from(["", "v", "a&b<c>", "tab\there", "é"])


@st.composite
def current_rows(draw: st.DrawFn, rows: list[dict[str, Any]]) -> dict[tuple[str, str], CurrentRow]:
    """For each object of `rows`, its current row or none (gone); now and then a value or two
    query-back cannot publish."""
    current = {}
    for obj in sorted({(r["class_name"], r["canonical_key"]) for r in rows}):
        if not draw(st.booleans()):
            continue
        columns = TABLES[obj[0]].value_columns
        values = {c.name: draw(VALUES) for c in columns}
        problems = {}
        if columns and draw(st.integers(0, 5)) == 0:
            for bad in draw(st.lists(st.sampled_from([c.name for c in columns]), min_size=1, max_size=2, unique=True)):
                problems[bad] = f"{obj[0]}.{bad}: not text"
                values.pop(bad)
        current[obj] = CurrentRow(values, problems)
    return current


def _outcomes(items: list[Any]) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    operations = {
        (i.event_id, i.op_time, i.xml, *_described(i.change and i.change.to_bytes(), i.change))
        for i in items if isinstance(i, PublishedOperation)
    }
    notes = {(i.record_id, i.status.value, i.reason) for i in items if isinstance(i, StatusNote)}
    return operations, notes


def _described(raw: bytes | None, change: Change | None) -> tuple[Any, ...]:
    """A change as the resolved rows carry it: pickled, with its transaction, time and rows."""
    if change is None:
        return (raw,)
    return (raw, change.transaction_id, change.event_time, change.records)


def _operations(made: pa.Table) -> set[tuple[Any, ...]]:
    rows = made.to_pylist()
    if "change" not in made.column_names:
        return {(r["event_id"], r["op_time"], r["xml"], None) for r in rows}
    return {(r["event_id"], r["op_time"], r["xml"], r["change"], r["transaction_id"], r["change_time"], r["records"])
            for r in rows}


@settings(max_examples=budget(400))
@given(st.data(), events(types=(1, 2, 3, 4, 5, 5, 6, 6, 7, 8)), st.sampled_from(["modify", "add"]), st.booleans())
def test_query_back_objects_as_columns_equal_the_per_object_rules(
    data: st.DataObject, rows: list[dict[str, Any]], insert_row_operation: str, changes: bool
):
    """Row and field query-backs among logged events and deletes, objects that exist, are gone
    or have a value that cannot be published: the column rules decide and merge as
    `precedence.decide` and `object_operations` do, make E the query-back events whose value
    cannot be published, with the same reason, and describe each operation's change as they do
    with the formats on."""
    ctx = context(insert_row_operation, changes)
    table = by_object(rows)
    current = data.draw(current_rows(rows))
    expected = _outcomes(publish_read(table.to_pylist(), current, ctx, StepTimer()))
    made = query_back_operations(table, current, ctx.operations)
    assert made is not None
    operations = _operations(made.operations)
    notes = {(record_id, "W", VANISHED_REASON) for record_id in made.vanished.to_pylist()}
    notes |= {(r["record_id"], "E", r["reason"]) for r in made.unreadable.to_pylist()}
    assert operations == expected[0]
    assert notes == expected[1]
