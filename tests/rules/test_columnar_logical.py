"""Logical classes are resolved as column operations too (`rules.columnar`, `columnar.logical`);
the per-object rules (`objects.publish_objects`: `precedence.decide` with its multi-valued
rules, then `operations.object_operations` with references) are the oracle. On generated events
of parents with a multi-valued attribute (child rows logged on the parent's key) and references,
with deletes, row and field query-backs, current rows that hold the logged values or not, values
that cannot be published and referenced objects that exist or not, both give the same
operations, changes and statuses."""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any
from unittest.mock import patch

import pyarrow as pa
import pytest
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle.objects import StatusNote, publish_objects
from oracle.operations import PublishedOperation

from publisher.model.arrow import arrow_schema_of
from publisher.model.canonical import canonical_key_of
from publisher.model.catalog import ColumnInfo, MultiValued, TableInfo
from publisher.model.keys import KeyKind
from publisher.model.values import ValueType
from publisher.pipeline import resolve
from publisher.pipeline.objects import CHANGE_FIELDS, PUBLISHABLE_FIELDS, ObjectsContext
from publisher.pipeline.queryback import QueryBackContext
from publisher.pipeline.timing import StepTimer
from publisher.rules.classify_batch import CLASSIFIED_SCHEMA
from publisher.rules.operations import OperationContext
from publisher.rules.precedence import CurrentRow

UTC = dt.UTC
S, N = ValueType.STRING, ValueType.INT


def _column(name: str, value_type: ValueType, is_key: bool = False, ordinal: int = 0) -> ColumnInfo:
    kind = KeyKind.INTEGER if value_type is N else KeyKind.TEXT
    return ColumnInfo(name, value_type, is_key, ordinal=ordinal, key_position=int(is_key), key_kind=kind)


def _multi(attribute: str, value_type: ValueType, table: str, link: ColumnInfo) -> MultiValued:
    return MultiValued(_column(attribute, value_type), table, _column(attribute, value_type), (link,))


USR = TableInfo(
    "usr", (_column("idu", N, True, 1), _column("fname", S, ordinal=2), _column("manager", N, ordinal=3)),
    multi_valued=(_multi("phone", S, "usr_phone", _column("idu", N, True)),), references=(("manager", "usr"),),
)
GRP = TableInfo(
    "g&rp", (_column("gid", S, True, 1), _column("title", S, ordinal=2)),
    multi_valued=(_multi("member", N, "grp_member", _column("gid", S, True)),
                  _multi("tag", S, "grp_tag", _column("gid", S, True))),
    references=(("member", "usr"),),
)
DOC = TableInfo("doc", (_column("id", S, True, 1), _column("owner", S, ordinal=2), _column("body", S, ordinal=3)),
                references=(("owner", "acct"),))
ACCT = TableInfo("acct", (_column("aid", S, True, 1),))
"""Referenced by doc, not published itself: only query-back knows it."""
PLAIN = TableInfo("plain", (_column("id", N, True, 1), _column("x", S, ordinal=2)))
TABLES = {t.name: t for t in (USR, GRP, DOC, PLAIN)}
READ_TABLES = {**TABLES, "acct": ACCT}
KEYS = {"usr": ["1", "2"], "g&rp": ["a", "x<y"], "doc": ["d"], "plain": ["1"]}
ATTRS = {"usr": ["idu", "fname", "manager", "phone"], "g&rp": ["gid", "title", "member", "tag"],
         "doc": ["id", "owner", "body"], "plain": ["id", "x"]}
TEXTS = {"phone": ["1", "2", "3", "a&b"], "member": ["1", "01", "2", "9", "x"], "tag": ["t", "<u>"],
         "manager": ["1", "2", "9", "x", ""], "owner": ["a", "b<c", ""]}
OTHER_TEXTS = ["", "plain", "a&b", "tab\there", "é"]
TARGETS = [("usr", canonical_key_of([t], USR.key_columns)) for t in ("1", "2", "9")] + [
    ("acct", canonical_key_of([t], ACCT.key_columns)) for t in ("a", "b<c", "")]
TIMES = st.none() | st.sampled_from([dt.datetime(2026, 11, 23, 7, 0, tzinfo=UTC), dt.datetime(2026, 1, 1, tzinfo=UTC)])
FIELDS = dict(part.split() for part in CLASSIFIED_SCHEMA.split(", "))
SCHEMA = arrow_schema_of(", ".join(f"{name} {FIELDS[name]}" for name in PUBLISHABLE_FIELDS + CHANGE_FIELDS))
TYPES = (1, 1, 2, 2, 2, 3, 4, 4, 5, 6, 7, 8, 8)


def _texts(attribute: str | None) -> st.SearchStrategy[str | None]:
    return st.none() | st.sampled_from(TEXTS.get(attribute or "", OTHER_TEXTS))


@st.composite
def events(draw: st.DrawFn, classes: Sequence[str] = ("usr", "g&rp", "doc")) -> list[dict[str, Any]]:
    """Events of a few objects of logical classes, as classification leaves them: a child row's
    on its parent's key, naming the multi-valued attribute (a removal is a type 2 with no new
    value); key columns log no value."""
    count = draw(st.integers(0, 25))
    ids = draw(st.lists(st.integers(1, 10**6), min_size=count, max_size=count, unique=True))
    out = []
    for record_id in ids:
        name = draw(st.sampled_from(classes))
        table = TABLES[name]
        key = canonical_key_of([draw(st.sampled_from(KEYS[name]))], table.key_columns)
        code = draw(st.sampled_from(TYPES))
        attr = None if code in (4, 5, 6) else draw(st.sampled_from(ATTRS[name]))
        column = None if attr is None else table.column(attr)
        logs = code in (1, 2, 3) and column is not None and not column.is_key
        out.append({
            "record_id": record_id, "position_time": draw(TIMES), "class_name": name, "canonical_key": key,
            "event_type_code": code, "attr_name": attr,
            "value_type": None if column is None else column.value_type.value,
            "old_text": draw(_texts(attr)) if logs and code == 2 else None,
            "new_text": draw(_texts(attr)) if logs else None,
            "event_time": draw(TIMES), "transaction_id": draw(st.none() | st.sampled_from(["7", "8"])),
        })
    return out


@st.composite
def current_rows(draw: st.DrawFn, rows: list[dict[str, Any]]) -> dict[tuple[str, str], CurrentRow]:
    """For each object, its current row or none (gone): values and the multi-valued attributes'
    values drawn from the texts events log (so a removed value may still be held), now and then
    a value or a child row that cannot be published."""
    current = {}
    for name, key in sorted({(r["class_name"], r["canonical_key"]) for r in rows}):
        if not draw(st.booleans()):
            continue
        table = TABLES[name]
        values = {c.name: draw(_texts(c.name)) for c in table.value_columns}
        multi = {m.attribute.name: tuple(sorted(draw(st.lists(st.sampled_from(TEXTS[m.attribute.name]), max_size=3))))
                 for m in table.multi_valued}
        problems = {}
        if draw(st.integers(0, 4)) == 0:
            names = [*values, *multi]
            for bad in draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True)):
                problems[bad] = f"{name}.{bad}: not text"
                values.pop(bad, None)
        current[(name, key)] = CurrentRow(values, problems, {m: v for m, v in multi.items() if v})
    return current


class Rows:
    """Query-back as a reader of given current rows and of referenced objects that exist."""

    def __init__(self, current: Mapping[tuple[str, str], CurrentRow], existing: frozenset[tuple[str, str]]) -> None:
        self.current, self.existing = current, existing

    def __enter__(self) -> Rows:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def read(self, wanted: Mapping[str, Sequence[str]], children: bool = True) -> dict[tuple[str, str], CurrentRow]:
        objects = [(name, key) for name, keys in wanted.items() for key in keys]
        if children:
            return {obj: self.current[obj] for obj in objects if obj in self.current}
        return {obj: CurrentRow({}) for obj in objects if obj in self.existing}


def context(insert_row_operation: str = "modify", changes: bool = False) -> ObjectsContext:
    operations = OperationContext(TABLES, "s&<x>", insert_row_operation, changes)
    return ObjectsContext(QueryBackContext("sqlite://", None, READ_TABLES), operations)


def by_object(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA).sort_by([("class_name", "ascending"),
                                                               ("canonical_key", "ascending")])


def oracle(table: pa.Table, reader: Rows, ctx: ObjectsContext) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    items = list(publish_objects(table.to_pylist(), ctx, StepTimer(), reader))  # type: ignore[arg-type]
    operations = {
        (i.event_id, i.op_time, i.xml, *(
            (None,) if i.change is None
            else (i.change.to_bytes(), i.change.transaction_id, i.change.event_time, i.change.records)))
        for i in items if isinstance(i, PublishedOperation)
    }
    notes = {(i.record_id, i.status.value, i.reason) for i in items if isinstance(i, StatusNote)}
    return operations, notes


def resolved(table: pa.Table, reader: Rows, ctx: ObjectsContext, slice_events: int = 5000,
             batch_rows: int = 1000) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """What `resolve_batches` makes of the table, read by `reader`, in slices of about `slice_events`."""
    with patch.object(resolve, "CurrentRows", lambda _: reader), patch.object(resolve, "SLICE_EVENTS", slice_events):
        out = pa.Table.from_batches(list(resolve.resolve_batches(table.to_batches(max_chunksize=batch_rows), ctx,
                                                                 StepTimer())),
                                    schema=arrow_schema_of(resolve.RESOLVED_SCHEMA)).to_pylist()
    changes = ctx.operations.changes
    operations = {(r["event_id"], r["op_time"], r["xml"], *(
        (r["change"], r["transaction_id"], r["change_time"], r["records"]) if changes else (None,)))
        for r in out if r["xml"] is not None}
    notes = {(r["record_id"], r["status"], r["reason"]) for r in out if r["xml"] is None}
    assert len(operations) + len(notes) == len(out)
    return operations, notes


@settings(max_examples=budget(500))
@given(st.data(), events(), st.sampled_from(["modify", "add"]), st.booleans(), st.integers(1, 30))
def test_logical_classes_as_columns_equal_the_per_object_rules(
    data: st.DataObject, rows: list[dict[str, Any]], insert_row_operation: str, changes: bool, slice_events: int
):
    """Deletes that take a parent's children along, inserts that carry them, removals of values
    still held, query-backs of rows and of multi-valued attributes, objects that are gone or hold
    values that cannot be published, references to objects that exist or not: resolve gives the
    per-object rules' operations (with their changes, the formats on) and W/E notes, however the
    events are cut into slices."""
    ctx = context(insert_row_operation, changes)
    table = by_object(rows)
    reader = Rows(data.draw(current_rows(rows)), frozenset(data.draw(st.sets(st.sampled_from(TARGETS)))))
    assert resolved(table, reader, ctx, slice_events) == oracle(table, reader, ctx)


@settings(max_examples=budget(150))
@given(st.data(), events(classes=("usr", "plain", "g&rp")), st.integers(1, 7))
def test_logical_and_other_classes_resolve_together(data: st.DataObject, rows: list[dict[str, Any]], batch_rows: int):
    """Objects of logical classes among others, the stream cut into small batches: each object
    is resolved whole, by the rules its class needs."""
    ctx = context()
    table = by_object(rows)
    reader = Rows(data.draw(current_rows(rows)), frozenset(data.draw(st.sets(st.sampled_from(TARGETS)))))
    with patch.object(resolve, "RESOLVE_CHUNK_ROWS", 5):
        assert resolved(table, reader, ctx, batch_rows=batch_rows) == oracle(table, reader, ctx)


def _events(*events: tuple[Any, ...]) -> list[dict[str, Any]]:
    """(type, attribute, old, new) of user 1, in processing order."""
    return [{"record_id": i, "position_time": None, "class_name": "usr", "canonical_key": "idu=1",
             "event_type_code": t, "attr_name": a, "value_type": "string", "old_text": o, "new_text": n,
             "event_time": None, "transaction_id": None}
            for i, (t, a, o, n) in enumerate(events, 1)]


PARENT = CurrentRow({"fname": "A"}, multi={"phone": ("3",)})


@pytest.mark.parametrize(("events", "current"), [
    ([(2, "phone", "1", None), (2, "phone", "2", None), (4, None, None, None)], PARENT),
    ([(4, None, None, None), (8, "phone", None, None), (1, "fname", None, "A"), (2, "phone", None, "3")], PARENT),
    ([(2, "phone", None, "3"), (8, "phone", None, None), (1, "fname", None, "A")], PARENT),
    ([(1, "fname", None, "A"), (8, "fname", None, None), (2, "phone", None, "3")], PARENT),
    ([(2, "phone", "1", None), (2, "fname", "A", "B"), (4, None, None, None)], PARENT),
    ([(2, "phone", "1", None), (2, "fname", "A", "B"), (2, "phone", None, "2")], None),
    ([(2, "phone", "3", None), (2, "phone", "1", None)], PARENT),
    ([(4, None, None, None), (8, "phone", None, None), (5, None, None, None), (8, "phone", None, None)], PARENT),
])
@pytest.mark.parametrize("insert_row_operation", ["modify", "add"])
def test_a_parents_delete_and_insert_take_its_childrens_events_along(events, current, insert_row_operation) -> None:
    """The cases of `precedence.decide` in test_logical_classes, as columns."""
    ctx = context(insert_row_operation, changes=True)
    table = by_object(_events(*events))
    reader = Rows({} if current is None else {("usr", "idu=1"): current}, frozenset())
    assert resolved(table, reader, ctx) == oracle(table, reader, ctx)


@pytest.mark.parametrize(("code", "attribute", "old", "new"), [
    (1, "phone", None, "a\x01b"), (2, "phone", "o\x02", None), (2, "manager", "1", "x\x03"), (3, "fname", None, "\x0b"),
])
def test_a_text_xml_cannot_carry_is_named_as_the_per_object_rules_name_it(code, attribute, old, new) -> None:
    ctx = context()
    rows = _events((2, "fname", "A", "B"), (code, attribute, old, new))
    table = by_object(rows)
    reader = Rows({("usr", "idu=1"): PARENT}, frozenset())
    with pytest.raises(ValueError) as expected:
        oracle(table, reader, ctx)
    with pytest.raises(ValueError) as made:
        resolved(table, reader, ctx)
    assert str(made.value) == str(expected.value)
    assert "XML 1.0 cannot carry" in str(made.value)
