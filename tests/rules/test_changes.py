"""A change record's own rules: how it travels between a cycle's stages, its time part and its
column masks, each held to a plain spelling of the same rule."""
from __future__ import annotations

import datetime as dt

from hunting import budget
from hypothesis import example, given, settings
from hypothesis import strategies as st

from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import ValueType
from publisher.rules.changes import Change, column_mask, little_endian_mask, time_prefix

NAMES = ("id", "name", "ssn", "photo", "when", "flag")
TABLE = TableInfo("usr", tuple(
    ColumnInfo(name, ValueType.STRING, name == "id", ordinal=len(NAMES) - i, sql_type="TEXT",
               key_position=1 if name == "id" else None)
    for i, name in enumerate(NAMES)
))
"""Ordinals the reverse of the declaration, so a mask follows the table's own order."""

texts = st.none() | st.text()
values = st.dictionaries(st.sampled_from(NAMES), texts)
times = st.none() | st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                                 timezones=st.just(dt.UTC))


@st.composite
def changes(draw: st.DrawFn) -> Change:
    return Change(
        table=draw(st.text(min_size=1)),
        operation=draw(st.sampled_from(("INSERT", "UPDATE", "DELETE"))),
        record_id=draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        event_time=draw(times),
        transaction_id=draw(st.none() | st.text()),
        after=draw(values),
        before=draw(st.none() | values),
        changed=tuple(draw(st.lists(st.sampled_from(NAMES), unique=True))),
        fetched=draw(st.booleans()),
    )


@settings(max_examples=budget(300))
@given(changes())
def test_a_change_arrives_as_it_left(change: Change) -> None:
    assert Change.from_bytes(change.to_bytes()) == change


def test_a_naive_or_other_zone_time_arrives_as_the_same_instant_in_utc() -> None:
    naive = Change("t", "INSERT", 1, dt.datetime(2024, 5, 6, 7, 8, 9, 123456), None, {}, None, (), False)
    assert Change.from_bytes(naive.to_bytes()).event_time == dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
    zone = dt.timezone(dt.timedelta(hours=-5))
    other = Change("t", "INSERT", 1, dt.datetime(2024, 5, 6, 2, 8, 9, tzinfo=zone), None, {}, None, (), False)
    arrived = Change.from_bytes(other.to_bytes()).event_time
    assert arrived is not None and arrived.tzinfo is dt.UTC and arrived.hour == 7


@given(st.datetimes(min_value=dt.datetime(1000, 1, 1), timezones=st.just(dt.UTC)))
@example(dt.datetime(2024, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC))
@example(dt.datetime(2024, 1, 1, 0, 0, 0, 9999, tzinfo=dt.UTC))
def test_the_time_part_is_the_time_to_a_hundredth(time: dt.datetime) -> None:
    assert time_prefix(time) == time.strftime("%Y%m%d%H%M%S") + f"{time.microsecond // 10000:02d}"


def test_the_time_part_of_an_early_year_keeps_four_digits_as_spark_writes_it() -> None:
    assert time_prefix(dt.datetime(999, 2, 3, 4, 5, 6, 70000, tzinfo=dt.UTC)) == "0999020304050607"
    assert time_prefix(None) == "0" * 16


@given(st.lists(st.sampled_from(NAMES)), st.integers(min_value=0, max_value=24))
def test_a_column_mask_sets_the_bit_of_each_column_in_table_order(names: list[str], first_bit: int) -> None:
    """Twice, so the second answer comes from the cache."""
    order = [c.name for c in sorted(TABLE.columns, key=lambda c: c.ordinal)]
    expected = little_endian_mask(first_bit + order.index(name) for name in set(names))
    assert column_mask(TABLE, names, first_bit) == expected
    assert column_mask(TABLE, iter(names), first_bit) == expected
