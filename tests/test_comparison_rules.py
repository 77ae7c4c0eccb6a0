"""`rules.comparison` against an oracle written from the rule's words, object by object with
`model.xds.build_operation`: a new key an <add> of its values, a key gone a <delete>, a key
whose values differ a <modify> of the attributes that changed (old value removed, new added)."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.model.catalog import ColumnInfo
from publisher.model.operation import AttrChange, Operation, OperationKind, Value
from publisher.model.values import COLUMN_VALUE_TYPES
from publisher.model.xds import build_operation
from publisher.rules.comparison import compared_operations, kinds_of

TEXTS = st.one_of(st.none(), st.sampled_from(["", "a", "b", "a&b", "<x>", " ", "é", "1"]))


def oracle(class_name: str, columns: list[ColumnInfo], key: str, old: list | None, new: list | None,
           event_id: int) -> bytes:
    association = f"{key},table={class_name},schema=s"
    if new is None:
        return build_operation(Operation(OperationKind.DELETE, class_name, association, event_id))
    if old is None:
        attrs = tuple(AttrChange(c.name, add=Value(c.value_type, v)) for c, v in zip(columns, new) if v is not None)
        return build_operation(Operation(OperationKind.ADD, class_name, association, event_id, attrs))
    attrs = tuple(
        AttrChange(c.name, remove=None if o is None else Value(c.value_type, o),
                   add=None if n is None else Value(c.value_type, n))
        for c, o, n in zip(columns, old, new) if o != n)
    return build_operation(Operation(OperationKind.MODIFY, class_name, association, event_id, attrs))


@st.composite
def objects(draw):
    types = draw(st.lists(st.sampled_from(COLUMN_VALUE_TYPES), min_size=0, max_size=4))
    columns = [ColumnInfo(f"c{i}", t, False) for i, t in enumerate(types)]
    row = st.lists(TEXTS, min_size=len(types), max_size=len(types))
    found = []
    for _ in range(draw(st.integers(1, 8))):
        old = draw(st.one_of(st.none(), row))
        new = draw(row) if old is None else draw(st.one_of(st.none(), row, st.just(old)))
        if old is not None and new is not None and old == new:
            new = [("z" if v is None else None) for v in new] or None
        if old is None and new is None:
            continue
        found.append((old, new))
    return columns, found


@settings(max_examples=300, deadline=None)
@given(objects())
def test_compared_operations_equal_the_oracle(drawn):
    columns, found = drawn
    keys = [f"id={i}" for i in range(len(found))]
    old_present = pa.array([old is not None for old, _ in found])
    new_present = pa.array([new is not None for _, new in found])
    olds = [pa.array([None if old is None else old[c] for old, _ in found], pa.string()) for c in range(len(columns))]
    news = [pa.array([None if new is None else new[c] for _, new in found], pa.string()) for c in range(len(columns))]
    event_ids = pa.array(range(100, 100 + len(found)), pa.int64())
    associations = pa.array([f"{k},table=t,schema=s" for k in keys])
    built = compared_operations("t", columns, associations, kinds_of(old_present, new_present), olds, news, event_ids)
    expected = [oracle("t", columns, k, old, new, 100 + i) for i, (k, (old, new)) in enumerate(zip(keys, found))]
    assert built.to_pylist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.text(max_size=3)), min_size=1, max_size=30), st.integers(0, 29))
def test_a_keys_hash_is_its_own_whatever_rows_it_is_hashed_with(rows, start):
    """A row lands in the same bucket in every cycle: its hash depends on its key texts alone,
    not on the rows read with it, nor on where its batch begins in memory."""
    from publisher.outputs.comparison_state import key_hashes

    columns = [pa.array([row[0] for row in rows]), pa.array([row[1] for row in rows])]
    together = key_hashes(columns)
    for index, row in enumerate(rows):
        alone = key_hashes([pa.array([row[0]]), pa.array([row[1]])])
        assert alone[0] == together[index]
    start = min(start, len(rows) - 1)
    sliced = key_hashes([column[start:] for column in columns])
    assert list(sliced) == list(together[start:])
