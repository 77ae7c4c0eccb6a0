"""Query-back finds each object by its key, whatever the key's text or size: on PostgreSQL a
one-column key goes as one array parameter, whose literal must carry any text as itself."""
from __future__ import annotations

import base64
from urllib.parse import quote

import pytest
from hunting import budget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from publisher.config import DatabaseConfig
from publisher.model.canonical import canonical_key_of
from publisher.model.catalog import PublishedTables, reflect_catalog
from publisher.model.keys import KeyKind
from publisher.pipeline.queryback import CurrentRows, QueryBackContext
from publisher.pipeline.row_reading import RowReading

KEY_TEXTS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


def _reader(database, table: str) -> CurrentRows:
    catalog = reflect_catalog(database.engine, database.schema, PublishedTables((table,), True))
    url = DatabaseConfig(url=database.url).sqlalchemy_url()
    return CurrentRows(QueryBackContext(url, database.schema, catalog.tables))


def test_text_keys_with_array_syntax_are_found_as_themselves(database):
    keys = ['a"b', "a\\b", "a,b", "{x}", "NULL", "", " sp ", "é", "\\\"", "}"]
    database.execute(f"CREATE TABLE {database.qualified('t')} (k varchar(20) PRIMARY KEY, v varchar(20))")
    with database.engine.begin() as conn:
        for i, key in enumerate(keys):
            conn.execute(text(f"INSERT INTO {database.qualified('t')} VALUES (:k, :v)"), {"k": key, "v": f"v{i}"})
    canonical = [canonical_key_of([key], [("k", KeyKind.TEXT)]) for key in keys]
    absent = canonical_key_of(["nope"], [("k", KeyKind.TEXT)])
    with _reader(database, "t") as reader:
        found = reader.read({"t": [*canonical, absent]})
    assert {key: row.values["v"] for (_, key), row in found.items()} == {c: f"v{i}" for i, c in enumerate(canonical)}
    assert all(not row.problems for row in found.values())


def test_integer_keys_beyond_the_column_are_simply_not_found(database):
    """A key no row can have is an object that is gone (W), not a key the database refuses (E)."""
    database.execute(f"CREATE TABLE {database.qualified('n')} (k integer PRIMARY KEY, v integer)",
                     f"INSERT INTO {database.qualified('n')} VALUES (1, 10), (2, 20)")
    wanted = ["k=1", "k=2", "k=3000000000", "k=-9223372036854775808", "k=9223372036854775807", "k=7"]
    with _reader(database, "n") as reader:
        found = reader.read({"n": wanted})
    assert {key: row.values["v"] for (_, key), row in found.items()} == {"k=1": "10", "k=2": "20"}
    assert all(not row.problems for row in found.values())


@settings(max_examples=budget(25), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(KEY_TEXTS, min_size=1, max_size=20, unique=True))
def test_any_text_key_is_found_by_query_back(postgresql_database, keys: list[str]):
    database = postgresql_database
    table = database.qualified("h")
    database.execute(f"DROP TABLE IF EXISTS {table}", f"CREATE TABLE {table} (k text PRIMARY KEY, v int)")
    with database.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {table} VALUES (:k, :v)"), [{"k": k, "v": i} for i, k in enumerate(keys)])
    canonical = [canonical_key_of([key], [("k", KeyKind.TEXT)]) for key in keys]
    with _reader(database, "h") as reader:
        found = reader.read({"h": canonical})
    assert {key: row.values["v"] for (_, key), row in found.items()} == {c: str(i) for i, c in enumerate(canonical)}


def test_every_slice_reads_on_the_capture_text_settings(postgresql_database):
    """Each slice's reads end their transaction; the session's text settings must outlive it,
    or a server whose defaults differ (here day-first dates, Tokyo time) would give the second
    slice's date-times another text than the first's."""
    database = postgresql_database
    table = database.qualified("d")
    database.execute(f"CREATE TABLE {table} (k int PRIMARY KEY, at timestamptz, on_day date)",
                     f"INSERT INTO {table} VALUES (1, '2026-11-23 07:00:00+00', '2026-02-01')")
    catalog = reflect_catalog(database.engine, database.schema, PublishedTables(("d",), True))
    url = database.url + "?options=" + quote("-c datestyle=SQL,DMY -c timezone=Asia/Tokyo")
    with CurrentRows(QueryBackContext(url, database.schema, catalog.tables)) as reader:
        first = reader.read({"d": ["k=1"]})
        second = reader.read({"d": ["k=1"]})
    assert first[("d", "k=1")].problems == {} and second[("d", "k=1")].problems == {}
    assert second[("d", "k=1")].values == first[("d", "k=1")].values


@pytest.mark.parametrize(("ddl", "rows", "wanted", "found"), [
    ("CREATE TABLE {t} (k integer[] PRIMARY KEY, v int)", "('{{}}', 1), ('{{1,2}}', 2)",
     ["k={}", 'k="{1,2}"', "k={3}"], {"k={}": "1", 'k="{1,2}"': "2"}),
    ("CREATE DOMAIN {t}_d AS int[]; CREATE TABLE {t} (k {t}_d PRIMARY KEY, v int)", "('{{1}}', 1)",
     ["k={1}", "k={2}"], {"k={1}": "1"}),
    ("CREATE TYPE {t}_c AS (a int, b text); CREATE TABLE {t} (k {t}_c PRIMARY KEY, v int)", "('(1,a)', 1)",
     ['k="(1,a)"', 'k="(2,b)"'], {'k="(1,a)"': "1"}),
], ids=["array", "domain-over-array", "composite"])
def test_keys_of_types_without_an_array_of_their_own_are_found(postgresql_database, ddl, rows, wanted, found):
    """A key column whose type PostgreSQL cannot put in an array parameter (an array, a domain
    over one, a composite type) has its keys bound one parameter each."""
    database = postgresql_database
    table = database.qualified("a")
    database.execute(*ddl.format(t=table).split("; "), f"INSERT INTO {table} VALUES {rows.format()}")
    with _reader(database, "a") as reader:
        read = reader.read({"a": wanted})
    assert {key: row.values["v"] for (_, key), row in read.items()} == found


def test_a_binary_value_is_read_back_as_its_base64_on_one_line(mariadb_database):
    """MariaDB's reads select a binary value's bytes and encode them, where the triggers log
    `REPLACE(TO_BASE64(...))` (whose time grows with the square of the value's length): the
    same text, found by a binary key compared as its base64."""
    database = mariadb_database
    table = database.qualified("pic")
    database.execute(f"CREATE TABLE {table} (k VARBINARY(4) PRIMARY KEY, img LONGBLOB, note VARBINARY(8))")
    data = bytes(range(256)) * 40
    with database.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {table} VALUES (:k, :img, NULL)"), {"k": b"\xaa\xaa", "img": data})
    key = canonical_key_of([base64.b64encode(b"\xaa\xaa").decode()], [("k", KeyKind.BINARY)])
    with _reader(database, "pic") as reader:
        found = reader.read({"pic": [key]})
    assert {key: row.values for (_, key), row in found.items()} == {
        key: {"img": base64.b64encode(data).decode(), "note": None}}
    catalog = reflect_catalog(database.engine, database.schema, PublishedTables(("pic",), True))
    selected = str(RowReading(catalog.tables["pic"], database.schema, database.engine.dialect).select())
    assert selected.count("TO_BASE64") == 1, "the key's text alone"
