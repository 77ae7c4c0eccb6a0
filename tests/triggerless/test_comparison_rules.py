"""`rules.comparison` against an oracle written from the rule's words, object by object with
`model.xds.build_operation`: a new key an <add> of its values, a key gone a <delete>, a key
whose values differ a <modify> of the attributes that changed (old value removed, new added)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.model.catalog import ColumnInfo
from publisher.model.operation import AttrChange, Operation, OperationKind, Value
from publisher.model.values import COLUMN_VALUE_TYPES
from publisher.model.xds import build_operation
from publisher.triggerless.rules import compared_operations, kinds_of

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


@settings(max_examples=budget(300))
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


@settings(max_examples=budget(200))
@given(st.lists(st.tuples(st.text(max_size=40), st.text(max_size=3)), min_size=1, max_size=30), st.integers(0, 29))
def test_a_keys_hash_is_its_own_whatever_rows_it_is_hashed_with(rows, start):
    """A row lands in the same bucket in every cycle: its hash depends on its key texts alone,
    not on the rows read with it, nor on where its batch begins in memory."""
    from publisher.triggerless.hashing import key_hashes

    columns = [pa.array([row[0] for row in rows]), pa.array([row[1] for row in rows])]
    together = key_hashes(columns)
    for index, row in enumerate(rows):
        alone = key_hashes([pa.array([row[0]]), pa.array([row[1]])])
        assert alone[0] == together[index]
    start = min(start, len(rows) - 1)
    sliced = key_hashes([column[start:] for column in columns])
    assert list(sliced) == list(together[start:])


KEY_TEXTS = st.sampled_from([None, "", "a", "b", "é", "1", "10", "2", "uid=0000000000000001", "uid=0000000000000002"])
"""A NULL now and then, so that most buckets have keys of one row each (matched by their hashes);
the last two texts hash alike (a hash reads a text's first 16 bytes and its length)."""
NAMES = ["a", "b", "c", "d"]


@st.composite
def buckets(draw):
    """A bucket's old state and new read of a table keyed by two columns, the columns of each
    drawn from NAMES (so some were lost and some gained), keys repeated or NULL now and then,
    and the keys of objects whose other attributes changed (`also`)."""
    old_names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    new_names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    key = st.tuples(KEY_TEXTS, KEY_TEXTS)
    old = draw(st.lists(st.tuples(key, st.lists(TEXTS, min_size=len(old_names), max_size=len(old_names))),
                        max_size=12))
    same = draw(st.booleans())
    if same:
        new_names = old_names
    new = [(k, v if same and draw(st.booleans()) else draw(st.lists(TEXTS, min_size=len(new_names),
                                                                    max_size=len(new_names))))
           for k, v in old if draw(st.booleans())]
    new += draw(st.lists(st.tuples(key, st.lists(TEXTS, min_size=len(new_names), max_size=len(new_names))),
                         max_size=6))
    named = [k for k, _ in old if None not in k]
    some_key = st.sampled_from(named) if named else st.nothing()
    also = draw(st.lists(st.one_of(some_key, st.tuples(KEY_TEXTS.filter(lambda t: t is not None),
                                                       KEY_TEXTS.filter(lambda t: t is not None))),
                         unique=True, max_size=4))
    return old_names, old, new_names, draw(st.permutations(new)), also


def compared_oracle(old_names, old, new_names, new, also):
    """Row by row: rows whose key is NULL or shared name no object and are left out (those read
    now on both sides); then every key of either side, compared by column name."""
    def unkeyed(rows):
        counts = {}
        for k, _ in rows:
            counts[k] = counts.get(k, 0) + 1
        return {k for k, n in counts.items() if n > 1 or None in k}

    left_out = unkeyed(new)
    new_rows = {k: dict(zip(new_names, v)) for k, v in new if k not in left_out}
    old_rows = {k: dict(zip(old_names, v)) for k, v in old if k not in left_out | unkeyed(old)}
    names = [*new_names, *(n for n in old_names if n not in new_names)]
    found = []
    for k in sorted(set(old_rows) | set(new_rows), key=lambda k: (k[0].encode(), k[1].encode())):
        o, n = old_rows.get(k), new_rows.get(k)
        olds = [None if o is None else o.get(name) for name in names]
        news = [None if n is None else n.get(name) for name in names]
        kind = "add" if o is None else "delete" if n is None else "modify"
        if kind != "modify" or olds != news or k in also:
            found.append((*k, *olds, *news, kind))
    return found, sorted(left_out, key=repr)


@settings(max_examples=budget(300))
@given(buckets())
def test_a_bucket_compared_equals_the_rows_compared_one_by_one(drawn):
    assert_compared_as_one_by_one(*drawn)


@pytest.mark.parametrize("old, new", [
    ([(("uid=0000000000000001", "a"), ["x"])], [(("uid=0000000000000002", "a"), ["x"])]),
    ([(("uid=0000000000000001", "a"), ["x"]), (("b", "b"), ["y"])],
     [(("uid=0000000000000002", "a"), ["x"]), (("b", "b"), ["z"])]),
])
def test_keys_that_hash_alike_are_told_apart(old, new):
    """One key gone and another come whose hash is the same (same first 16 bytes, same length):
    a delete and an add, not a modify of one object."""
    assert_compared_as_one_by_one(["a"], old, ["a"], new, [])


def assert_compared_as_one_by_one(old_names, old, new_names, new, also):
    from publisher.triggerless.differences import compare_bucket
    from publisher.triggerless.hashing import key_hashes
    from publisher.triggerless.state import TableLayout, schema_of

    key = (("x", "text"), ("y", "text"))

    def state(names, rows):
        layout = TableLayout("t", key, tuple((n, "string") for n in names), 1)
        keys = [pa.array([k[i] for k, _ in rows], pa.string()) for i in range(2)]
        values = [pa.array([v[i] for _, v in rows], pa.string()) for i in range(len(names))]
        return layout, pa.Table.from_arrays([*keys, pa.array(key_hashes(keys), pa.uint64()), *values],
                                            schema=schema_of(layout))

    old_layout, old_table = state(old_names, old)
    layout, new_table = state(new_names, new)
    also_table = pa.table({"k0": pa.array([k[0] for k in also], pa.string()),
                           "k1": pa.array([k[1] for k in also], pa.string())})
    found, unkeyed = compare_bucket(layout, old_table, old_layout, new_table, also_table)
    expected, left_out = compared_oracle(old_names, old, new_names, new, set(also))
    assert [tuple(row.values()) for row in found.to_pylist()] == expected
    assert sorted(((row["k0"], row["k1"]) for row in unkeyed.to_pylist()), key=repr) == left_out
