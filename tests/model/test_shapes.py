"""The shapes a table had along the event log (`model.shapes`), held to a statement of the rule
one record_id at a time, and the recorded columns' round trip."""
from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.keys import KeyKind
from publisher.model.shapes import (
    ShapeChange,
    ShapeHistory,
    ShapeRecord,
    columns_from_json,
    columns_json,
    last_change,
    retired_names,
    shape_change,
)
from publisher.model.values import ValueType

KEY = ColumnInfo("idu", ValueType.INT, True, 1, "INTEGER", key_position=1, key_kind=KeyKind.INTEGER, in_arrays=True)
SHAPES = (
    (KEY, ColumnInfo("fname", ValueType.STRING, False, 2, "VARCHAR(64)", length=64)),
    (KEY, ColumnInfo("fname", ValueType.STRING, False, 2, "VARCHAR(64)", length=64),
     ColumnInfo("email", ValueType.STRING, False, 3, "TEXT")),
    (KEY, ColumnInfo("given", ValueType.STRING, False, 2, "VARCHAR(64)", length=64)),
    (KEY, ColumnInfo("fname", ValueType.TIME, False, 2, "DATE")),
)
HIGHEST = 30


def shape_at(records: list[ShapeRecord], now: tuple[ColumnInfo, ...], record_id: int) -> tuple[ColumnInfo, ...]:
    """The rule for one event: the newest record at or before it (the first, before any); the
    newest record of all gives the table's shape now; one that could not tell, the next that did;
    a column whose value type is another now, read as it is now."""
    ordered = sorted(records, key=lambda r: r.from_record_id)
    if not ordered:
        return now
    index = max((i for i, r in enumerate(ordered) if r.from_record_id <= record_id), default=0)
    if index == len(ordered) - 1:
        return now
    shape = next((r.columns for r in ordered[index:] if r.columns is not None), now)
    typed_now = {c.name: c for c in now}
    return tuple(
        dataclasses.replace(c, value_type=typed_now[c.name].value_type, sql_type=typed_now[c.name].sql_type,
                            length=typed_now[c.name].length)
        if c.name in typed_now and typed_now[c.name].value_type != c.value_type else c
        for c in shape
    )


records_of_a_table = st.lists(
    st.builds(ShapeRecord, st.integers(1, HIGHEST), st.one_of(st.none(), st.sampled_from(SHAPES))),
    max_size=6, unique_by=lambda r: r.from_record_id,
)


@given(st.dictionaries(st.sampled_from(["usr", "grp"]), st.tuples(records_of_a_table, st.sampled_from(SHAPES)),
                       min_size=1),
       st.integers(0, HIGHEST), st.integers(0, HIGHEST))
def test_each_event_has_the_shape_the_rule_gives_and_a_window_ends_where_one_changes(tables, lo, width):
    now = {name: TableInfo(name, shape) for name, (_, shape) in tables.items()}
    history = ShapeHistory({name: records for name, (records, _) in tables.items()}, now)
    for record_id in range(HIGHEST + 2):
        at = history.at(record_id)
        for name, (records, shape) in tables.items():
            assert at[name].columns == shape_at(records, shape, record_id)
            assert at[name].name == name
    hi = lo + width
    changes = [r for r in range(lo + 1, hi + 1)
               if any(shape_at(records, shape, r) != shape_at(records, shape, r - 1)
                      for records, shape in tables.values())]
    assert history.first_change(lo, hi) == (changes[0] if changes else None)


def test_a_table_with_no_record_has_its_shape_now():
    history = ShapeHistory({}, {"usr": TableInfo("usr", SHAPES[0])})
    assert history.at(5)["usr"].columns == SHAPES[0]
    assert history.first_change(0, 100) is None


def test_a_record_that_could_not_tell_takes_the_shape_recorded_after_it():
    """PostgreSQL's event trigger marks where a migration begins; the cycle records the shape."""
    records = [ShapeRecord(1, SHAPES[0]), ShapeRecord(10, None), ShapeRecord(12, SHAPES[1])]
    history = ShapeHistory({"usr": records}, {"usr": TableInfo("usr", SHAPES[1])})
    assert [history.at(r)["usr"].columns for r in (0, 9, 10, 11, 12, 50)] == [SHAPES[0]] * 2 + [SHAPES[1]] * 4
    assert history.first_change(0, 50) == 10
    assert history.first_change(10, 50) is None


columns = st.builds(
    ColumnInfo, st.text(min_size=1), st.sampled_from([t for t in ValueType if t is not ValueType.DN]), st.booleans(),
    st.integers(0, 99), st.text(), st.none() | st.integers(0, 10**6), st.none() | st.integers(0, 99),
    st.none() | st.integers(-99, 99), st.integers(0, 9), st.sampled_from(list(KeyKind)), st.booleans(), st.booleans(),
)


@given(st.lists(columns, max_size=5))
def test_recorded_columns_read_back_equal(table_columns):
    table = TableInfo("t", tuple(table_columns))
    assert columns_from_json(columns_json(table)) == table.columns


FNAME, EMAIL = SHAPES[1][1], SHAPES[1][2]


def test_what_a_change_of_shape_tells_the_consumer_again():
    given_name = SHAPES[2][1]
    assert shape_change(SHAPES[0], SHAPES[1]) == ShapeChange(False, ("email",), ())
    assert shape_change(SHAPES[1], SHAPES[2]) == ShapeChange(False, ("given",), ("fname", "email"))
    assert shape_change(SHAPES[0], SHAPES[3]) == ShapeChange(False, ("fname",), ())  # retyped
    assert shape_change(SHAPES[1], (KEY, dataclasses.replace(EMAIL, ordinal=2), dataclasses.replace(
        FNAME, ordinal=3))) == ShapeChange(False, (), ())  # only moved
    assert shape_change(SHAPES[0], (KEY, dataclasses.replace(FNAME, name="FNAME"))) == ShapeChange(False, ("FNAME",))
    assert shape_change(SHAPES[0], (KEY, dataclasses.replace(FNAME, length=80, sql_type="VARCHAR(80)"))).fields == (
        "fname",)
    assert shape_change(None, SHAPES[0]).whole
    rekeyed = dataclasses.replace(KEY, value_type=ValueType.STRING, key_kind=KeyKind.TEXT, sql_type="TEXT")
    assert shape_change(SHAPES[0], (rekeyed, FNAME)).whole
    assert shape_change(SHAPES[0], (KEY, dataclasses.replace(FNAME, is_key=True, key_position=2))).whole
    assert given_name.name == "given"


def test_retired_columns_are_those_some_record_had_and_the_table_has_not():
    records = [ShapeRecord(1, SHAPES[1]), ShapeRecord(5, None), ShapeRecord(9, SHAPES[2])]
    assert retired_names(records, SHAPES[2]) == ("fname", "email")
    assert retired_names(records, (KEY, dataclasses.replace(FNAME, name="FName"))) == ("email", "given")
    assert retired_names([], SHAPES[0]) == ()


def test_the_shape_before_the_latest_change_is_the_newest_record_that_differs_and_tells():
    records = [ShapeRecord(1, SHAPES[0]), ShapeRecord(4, SHAPES[1]), ShapeRecord(7, None), ShapeRecord(9, SHAPES[2])]
    assert last_change(records, SHAPES[2]) == SHAPES[1]
    assert last_change(records[:1], SHAPES[0]) is None
    assert last_change([], SHAPES[0]) is None
