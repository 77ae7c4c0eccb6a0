"""A snapshot walks a table in key order, a chunk after the last key it read: every family's
condition for "after that key" (`Dialect.keys_after`, a row-value comparison or, where an index
serves no such thing, spelled out column by column) must pick exactly the keys that Python's
tuple order puts after it, whatever the key's width and however many columns tie."""
from __future__ import annotations

from hunting import property_settings
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Column, Integer, MetaData, Table, bindparam, create_engine, select

from publisher.dialects import families

WIDTH = st.integers(min_value=2, max_value=4)


@st.composite
def keys_and_bound(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """Distinct keys of small values (so that columns tie often) and a bound of the same width."""
    width = draw(WIDTH)
    part = st.integers(min_value=-2, max_value=2)
    keys = draw(st.lists(st.tuples(*[part] * width), min_size=1, max_size=30, unique=True))
    return keys, draw(st.tuples(*[part] * width))


@settings(**property_settings(200))
@given(keys_and_bound())
def test_every_family_s_keys_after_takes_the_keys_tuple_order_puts_after(case):
    keys, bound = case
    width = len(bound)
    engine = create_engine("sqlite://")
    table = Table("t", MetaData(), *(Column(f"k{i}", Integer, primary_key=True) for i in range(width)))
    table.create(engine)
    columns = [table.c[f"k{i}"] for i in range(width)]
    values = [bindparam(f"after{i}", value) for i, value in enumerate(bound)]
    expected = sorted(key for key in keys if key > bound)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{f"k{i}": v for i, v in enumerate(key)} for key in keys])
        for family in families():
            found = conn.execute(select(*columns).where(family.keys_after(columns, values)).order_by(*columns))
            assert [tuple(row) for row in found] == expected, family.name
    engine.dispose()
