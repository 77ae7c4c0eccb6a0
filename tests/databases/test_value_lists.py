"""How a statement names a list of values (`Dialect.value_lists`): the portable form (IN lists
and ranges, a parameter each, an executemany) and PostgreSQL's arrays must pick exactly the rows
the list names, and insert exactly the rows it holds in its order. Each runs on the real
databases, the portable form on PostgreSQL too, so that the array form cannot drift from it."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from hunting import budget, property_settings
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, Text, delete, literal_column, select

from publisher.databases.postgresql import arrays
from publisher.dialects import dialect_of
from publisher.dialects.value_lists import ValueLists
from publisher.model.runs import IdRun

PRESENT = [i for i in range(1, 81) if i % 3 and i % 7]
"""The record_ids the table holds: with gaps, as a window's rows have where events were not read."""
TEXTS = ["", "a", "b", "ab", "{a}", "a,b", '"', "\\", "NULL", "{}", 'N"U', "b\\a"]
"""Text keys the table holds, some spelled as an array literal's syntax. No two differ only by
case or trailing spaces, which a collation may call equal."""
TEXT = st.text(alphabet='ab{},"\\NUL', max_size=5)


def forms(database) -> list[ValueLists]:
    """The database's own form, and the portable one where the database has another."""
    own = dialect_of(database.engine).value_lists()
    return [own] if type(own) is ValueLists else [ValueLists(), own]


@pytest.fixture
def tables(database) -> Iterator[dict[str, Table]]:
    metadata = MetaData()
    made = {
        "ids": Table("vl_ids", metadata, Column("record_id", BigInteger, primary_key=True, autoincrement=False),
                     schema=database.schema),
        "numbers": Table("vl_numbers", metadata, Column("k", BigInteger, primary_key=True, autoincrement=False),
                         schema=database.schema),
        "texts": Table("vl_texts", metadata, Column("k", String(20), primary_key=True), schema=database.schema),
        "events": Table("vl_events", metadata, Column("id", Integer, primary_key=True, autoincrement=True),
                        Column("tag", String(10)), Column("n", Integer), Column("note", String(10)),
                        Column("value", String(20)), Column("fixed", Integer), schema=database.schema),
    }
    metadata.create_all(database.engine)
    with database.engine.begin() as conn:
        conn.execute(made["ids"].insert(), [{"record_id": i} for i in PRESENT])
        conn.execute(made["numbers"].insert(), [{"k": i} for i in (-(2**63), -1, 0, 1, 7, 2**31, 2**63 - 1)])
        conn.execute(made["texts"].insert(), [{"k": t} for t in TEXTS])
    yield made
    metadata.drop_all(database.engine)


@st.composite
def id_runs(draw: st.DrawFn) -> list[IdRun]:
    """Runs in record_id order, some adjacent (a run cut between statements), some single ids,
    over ids the table holds and ids it does not."""
    runs, at = [], draw(st.integers(min_value=-2, max_value=5))
    for gap, length in draw(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 8)), min_size=1, max_size=15)):
        first = at + gap
        runs.append(IdRun(first, first + length - 1))
        at = first + length
    return runs


@pytest.mark.parametrize("trusted_join", [arrays.TRUSTED_JOIN, 1], ids=["measured", "ids-always"])
@settings(**property_settings(budget(60)))
@given(runs=id_runs())
def test_ids_and_ranges_name_exactly_the_ids_of_the_runs(database, tables, monkeypatch, trusted_join, runs):
    """An acknowledgement's W and E ids (`ids`: on PostgreSQL, past TRUSTED_JOIN, one array of
    every id) and its S ranges (`ranges`) name the same rows, those within a run."""
    monkeypatch.setattr(arrays, "TRUSTED_JOIN", trusted_join)
    record_id = tables["ids"].c.record_id
    expected = [i for i in PRESENT if any(run.first <= i <= run.last for run in runs)]
    with database.engine.connect() as conn:
        for form in forms(database):
            for name in ("ids", "ranges"):
                condition = getattr(form, name)(record_id, runs)
                found = conn.execute(select(record_id).where(condition).order_by(record_id)).scalars().all()
                assert found == expected, (type(form).__name__, name)


@settings(**property_settings(budget(60)))
@given(numbers=st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, 7, 2**31, -1])),
                        min_size=1, max_size=12),
       texts=st.lists(st.one_of(TEXT, st.sampled_from(TEXTS)), min_size=1, max_size=12))
def test_key_among_names_exactly_the_rows_of_the_keys(database, tables, numbers, texts):
    """Query-back's chunk of one-column keys, integers or texts (as an array literal on PostgreSQL,
    whose syntax a text must not break), finds exactly the rows with those keys."""
    with database.engine.connect() as conn:
        for form in forms(database):
            for table, keys in ((tables["numbers"], numbers), (tables["texts"], texts)):
                held = set(conn.execute(select(table.c.k)).scalars())
                found = conn.execute(select(table.c.k).where(form.key_among(table.c.k, keys))).scalars().all()
                assert sorted(found) == sorted(set(keys) & held), (type(form).__name__, table.name)


@settings(**property_settings(budget(40)))
@given(values=st.lists(TEXT, min_size=1, max_size=20), n=st.integers(-5, 5), note=st.one_of(st.none(), TEXT))
def test_rows_in_order_inserts_a_row_per_value_in_the_values_order(database, tables, values, n, note):
    """A snapshot's events, one per key: the rows numbered in the keys' order, the shared columns
    alike, the computed one as its SQL."""
    events = tables["events"]
    c = events.c
    with database.engine.begin() as conn:
        conn.execute(delete(events))
        for tag, form in enumerate(forms(database)):
            rows = form.rows_in_order(events, c.value, {c.tag: Text(), c.n: Integer(), c.note: Text()},
                                      {c.fixed: literal_column("7")})
            rows.insert(conn, {"tag": str(tag), "n": n, "note": note}, values)
            found = conn.execute(select(c.tag, c.n, c.note, c.value, c.fixed).where(c.tag == str(tag))
                                 .order_by(c.id)).all()
            assert [tuple(row) for row in found] == [(str(tag), n, note, v, 7) for v in values], type(form).__name__
