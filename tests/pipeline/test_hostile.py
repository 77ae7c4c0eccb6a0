"""Trust nothing in the event log: its text never reaches SQL as SQL nor XML raw.

Triggers and anyone with insert rights fill the event log, so every column may hold anything:
SQL-injection payloads, 1 MB values, control characters, bytes that are not UTF-8. Whatever
a row holds, it is published correctly or it gets `E` and a line in rejects.jsonl; the cycle
goes on, the valid rows around it publish, and only published tables are ever queried back.
"""
from __future__ import annotations

import base64
import dataclasses
import re
from typing import Any

import pytest
from conftest import spark_on_one_database
from harness import TEST_TABLES, Harness, assert_mirrored
from hunting import budget
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lxml import etree
from oracle.classify import classify_event
from sqlalchemy import text

from publisher.capture.install import triggered_tables
from publisher.config import EVENT_LOG_COLUMNS
from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.canonical import canonical_key
from publisher.model.catalog import Catalog, ColumnInfo, TableInfo
from publisher.model.events import EVENT_FIELDS, EVENT_SCHEMA, UNREADABLE
from publisher.model.keys import KeyKind
from publisher.model.operation import AttrChange, Operation, OperationKind, Value, association
from publisher.model.values import ValueType, xml_problem
from publisher.model.xds import build_operation
from publisher.rules.classify import CLASSIFIED_NAMES, ClassifyContext, Disposition
from publisher.rules.classify_batch import BatchClassifier
from publisher.service.stats import backlog

# A user no test database logs in as, so that trigger-logged rows on PostgreSQL are not loopback.
OTHER_USER = "publisher_app"
MEGABYTE = 1 << 20
GRP_DDL = "CREATE TABLE {table} (name VARCHAR(64), site INTEGER, descr VARCHAR(64), PRIMARY KEY (name, site))"
XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
SPECIALS = ",;'+\"=\\<>&\t\n\r\x01\x08\x0b\x1b\x7f\x85\ufffe\uffff\U0001f600 "


def make(spark, path, db, tmp_path, /, **settings: Any) -> Harness:
    h = Harness(spark, db, tmp_path, path=path, **settings)
    h.create_usr()
    h.create_event_log()
    return h


def reasons(h: Harness) -> dict[int, str]:
    return {r["record_id"]: r["reason"] for r in h.rejects()}


def operation(h: Harness, key: str, table: str = "usr") -> etree._Element:
    """The one published operation of an object, from all documents so far."""
    wanted = h.association(key, table)
    (found,) = [op for op in h.published(new_only=False).operations if op.findtext("association") == wanted]
    return found


def added(op: etree._Element, attr: str) -> str | None:
    return op.findtext(f"*[@attr-name='{attr}']//value")


def assert_documents_carry_only_xml_characters(h: Harness) -> None:
    for path in h.output.glob("*.xml"):
        data = path.read_bytes()
        etree.fromstring(data)
        assert XML_INVALID.search(data.decode("utf-8")) is None, path.name


def insert_sql(h: Harness, values_sql: str, **params: Any) -> int:
    """One event row whose values are SQL expressions, e.g. CAST(X'FF' AS TEXT) on SQLite."""
    with h.engine.begin() as conn:
        return int(conn.execute(
            text(
                f"INSERT INTO {h.table('event_log')} (status, event_type, perpetrator, table_name, table_key, "
                f"column_name, old_value, new_value) VALUES ('N', {values_sql}) RETURNING record_id"
            ),
            params,
        ).scalar_one())


# --- the allow-list -----------------------------------------------------------------------------


@spark_on_one_database("sqlite")
def test_default_publishes_the_triggered_tables_and_a_configured_list_only_those(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, user=OTHER_USER, tables=())
    h.db.execute(
        f"CREATE TABLE {h.table('plain')} (id INTEGER PRIMARY KEY, v VARCHAR(20))",
        f"CREATE VIEW {h.table('view_usr')} AS SELECT idu AS pk_idu, fname FROM {h.table('usr')}",
    )
    h.install("usr")
    assert triggered_tables(h.config, h.engine) == ("usr",)
    h.db.execute(
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')",
        f"INSERT INTO {h.table('plain')} (id, v) VALUES (1, 'p')",
    )
    (by_trigger,) = [i for i in h.statuses()]
    plain, view, nosuch, event_log, shouted = h.log(
        (5, "plain", "id=1"),
        (5, "view_usr", "pk_idu=1"),
        (4, "nosuch", "id=1"),
        (5, "event_log", "record_id=1"),
        (4, "USR", "idu=9"),
    )

    h.poll()
    assert h.published().describe() == [
        ("add", h.association("idu=1"), by_trigger),
        ("delete", h.association("idu=9"), shouted),
    ]
    assert h.statuses() == {by_trigger: "S", plain: "E", view: "E", nosuch: "E", event_log: "E", shouted: "S"}
    why = reasons(h)
    assert why[plain] == "table 'plain' is not published (has no publisher triggers)"
    assert why[view] == "table 'view_usr' is not published (has no publisher triggers)"
    assert why[event_log] == "table 'event_log' is not published (has no publisher triggers)"
    assert "'nosuch' does not exist" in why[nosuch]

    h.reconfigure(tables=("PLAIN", "view_usr"))
    plain, view, usr = h.log((5, "plain", "id=1"), (5, "view_usr", "pk_idu=1"), (4, "usr", "idu=1"))
    h.poll()
    assert h.published().describe() == [
        ("modify", h.association("id=1", "plain"), plain),
        ("modify", h.association("pk_idu=1", "view_usr"), view),
    ]
    assert {i: h.statuses()[i] for i in (plain, view, usr)} == {plain: "S", view: "S", usr: "E"}
    assert reasons(h)[usr] == "table 'usr' is not published (not in publisher.tables)"


# --- SQL injection ------------------------------------------------------------------------------


@spark_on_one_database("postgresql")
def test_sql_injection_payloads_are_rejected_or_published_verbatim(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, user=OTHER_USER)
    h.db.execute(
        GRP_DDL.format(table=h.table("grp")),
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')",
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (2, 'Bob')",
        f"INSERT INTO {h.table('grp')} (name, site, descr) VALUES ('g', 1, 'd')",
    )
    rejected = h.log(
        (4, "usr; DROP TABLE usr; --", "idu=1"),
        (5, "usr WHERE 1=1; --", "idu=1"),
        (7, "usr", "idu=1", '"usr"."fname"'),
        (8, "usr", "idu=1", "fname; DELETE FROM usr; --"),
        (5, "usr", "idu=1); DELETE FROM usr; --"),
        (5, "usr", "idu=1 OR 1=1"),
        (5, "usr", 'idu="1 OR 1=1"'),
        (2, "usr", "idu=1", "age", "1", "1; DROP TABLE usr"),
    )
    (valid_first,) = h.log((6, "usr", "idu=1"))
    grp_key = "name=\"x' OR '1'='1\"+site=2"
    vanished, grp_add, value_add, value_update = h.log(
        (5, "grp", "name=\"x'); DROP TABLE usr; --\"+site=1"),
        (1, "grp", grp_key, "descr", None, "d"),
        (1, "usr", "idu=3", "fname", None, "fname' OR '1'='1"),
        (2, "usr", "idu=2", "fname", "Bob", "Robert'); DELETE FROM usr WHERE ('1'='1"),
    )
    (by_perpetrator,) = h.log((1, "usr", "idu=4", "lname", None, "'); DROP TABLE usr; --"),
                              perpetrator="x'; DROP TABLE usr; --")
    if h.dialect == "sqlite":
        rejected += h.log(("1; DROP TABLE usr", "usr", "idu=1"))
    before = h.statuses()

    h.poll()
    statuses = h.statuses()
    assert set(statuses) == set(before)
    assert {i: statuses[i] for i in rejected} == {i: "E" for i in rejected}
    assert set(reasons(h)) == set(rejected)
    assert statuses[vanished] == "W"
    assert {statuses[i] for i in (valid_first, grp_add, value_add, value_update, by_perpetrator)} == {"S"}
    assert added(operation(h, "idu=1"), "fname") == "Ann"
    assert operation(h, grp_key, "grp").findtext("association") == h.association(grp_key, "grp")
    assert added(operation(h, "idu=3"), "fname") == "fname' OR '1'='1"
    modify = operation(h, "idu=2")
    assert modify.findtext(".//remove-value/value") == "Bob"
    assert modify.findtext(".//add-value/value") == "Robert'); DELETE FROM usr WHERE ('1'='1"
    assert added(operation(h, "idu=4"), "lname") == "'); DROP TABLE usr; --"
    assert h.db.rows(f"SELECT idu, fname FROM {h.table('usr')} ORDER BY idu") == [(1, "Ann"), (2, "Bob")]
    assert h.db.rows(f"SELECT name, site FROM {h.table('grp')}") == [("g", 1)]


# --- huge values --------------------------------------------------------------------------------


@spark_on_one_database("mariadb")
def test_megabyte_values_publish_intact_or_are_rejected_with_a_short_reason(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path)
    h.db.execute(GRP_DDL.format(table=h.table("grp")))
    huge_text = ("λ" + "x" * 1023) * (MEGABYTE // 1024)
    huge_photo = base64.b64encode(bytes(range(256)) * (MEGABYTE // 256 * 3 // 4)).decode("ascii")
    huge_name = "k" * MEGABYTE
    published = h.log(
        (1, "usr", "idu=1", "lname", None, huge_text),
        (1, "usr", "idu=1", "photo", None, huge_photo),
        (1, "grp", f"name={huge_name}+site=1", "descr", None, "d"),
    )
    rejected = h.log(
        (4, "usr", "idu=" + "9" * MEGABYTE),
        (4, "usr", "idu=" + "9" * 19),
        (4, "usr", 'idu="' + "a" * MEGABYTE + '"'),
        (1, "usr", "idu=2", "age", None, "7" * MEGABYTE),
        (1, "usr", "idu=2", "born", None, "1" * MEGABYTE),
        (1, "usr", "idu=2", "fname", None, huge_text + "\x01"),
        (4, "usr", "x" * MEGABYTE + "=1"),
    )
    if h.dialect == "sqlite":  # PostgreSQL's table_name and column_name are varchar(255)
        rejected += h.log((4, "u" * MEGABYTE, "idu=1"), (1, "usr", "idu=2", "f" * MEGABYTE, None, "v"))

    h.poll()
    statuses = h.statuses()
    assert {statuses[i] for i in published} == {"S"}
    assert {i: statuses[i] for i in rejected} == {i: "E" for i in rejected}
    why = reasons(h)
    assert set(why) == set(rejected)
    assert all(len(reason) < 1000 for reason in why.values()), [len(r) for r in why.values()]
    assert "64-bit" in why[rejected[1]]
    assert "too many" in why[rejected[3]] and "too many" in why[rejected[4]]
    assert "U+0001" in why[rejected[5]]
    add = operation(h, "idu=1")
    assert added(add, "lname") == huge_text
    assert added(add, "photo") == huge_photo
    assert operation(h, f"name={huge_name}+site=1", "grp") is not None
    assert_documents_carry_only_xml_characters(h)


# --- characters XML cannot carry ----------------------------------------------------------------


@spark_on_one_database("sqlite")
def test_characters_xml_cannot_carry_are_rejected_and_the_rest_encoded(spark, cycle_path, database, tmp_path):
    weird, odd, odd_column = "we\x01ird", "odd", "c\x02"
    h = make(spark, cycle_path, database, tmp_path, tables=TEST_TABLES + (weird, odd))
    h.db.execute(
        GRP_DDL.format(table=h.table("grp")),
        f'CREATE TABLE {h.table(h.db.quote(weird))} (id INTEGER PRIMARY KEY, v VARCHAR(9))',
        f'CREATE TABLE {h.table(odd)} (id INTEGER PRIMARY KEY, {h.db.quote(odd_column)} VARCHAR(9))',
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (2, 'a\x03b')",
    )
    bad_values = ["a\x01b", "\x1b[31mred", "x\ufffe", "v\x0bt", "\x08"] + (["nul\x00"] if h.dialect == "sqlite" else [])
    rejected = h.log(
        *[(1, "usr", "idu=1", "fname", None, v) for v in bad_values],
        (4, "grp", 'name="a\x01"+site=1'),
        (4, "grp", "name=a\x02b+site=1"),
        (4, "usr\x01", "idu=1"),
        (1, "usr", "idu=1", "fname\x01", None, "v"),
        (5, weird, "id=1"),
        (5, odd, "id=1"),
        (8, "usr", "idu=2", "fname"),
    )
    kept = "<&>\"' \t\n\r \x7f\x85\u2028\U0001f600 end"
    published = h.log(
        (1, "usr", "idu=1", "fname", None, kept),
        (4, "grp", 'name="<&>\t"+site=1'),
        # an old value XML cannot carry is not named: the update removes all values instead
        (2, "usr", "idu=3", "lname", "\x0c", "ok\u2028\x85\u2029"),
    )

    h.poll()
    statuses = h.statuses()
    assert {i: statuses[i] for i in rejected} == {i: "E" for i in rejected}
    assert {statuses[i] for i in published} == {"S"}
    why = reasons(h)
    assert set(why) == set(rejected)
    for record_id, code in zip(rejected, ["0001", "001B", "FFFE", "000B", "0008"]):
        assert f"U+{code}" in why[record_id]
    assert "XML 1.0 cannot carry" in why[rejected[-3]] and "XML 1.0 cannot carry" in why[rejected[-2]]
    assert "U+0003" in why[rejected[-1]]
    assert added(operation(h, "idu=1"), "fname") == kept
    assert operation(h, 'name="<&>\t"+site=1', "grp").tag == "delete"
    lname = operation(h, "idu=3").find("modify-attr")
    assert [child.tag for child in lname] == ["remove-all-values", "add-value"]
    assert added(operation(h, "idu=3"), "lname") == "ok\u2028\x85\u2029"
    assert_documents_carry_only_xml_characters(h)


def test_text_that_is_not_utf8_is_rejected_and_the_cycle_goes_on(spark, cycle_path, sqlite_database, tmp_path):
    """SQLite stores any bytes as TEXT (PostgreSQL's UTF8 database refuses them on the way in)."""
    h = make(spark, cycle_path, sqlite_database, tmp_path)
    (first,) = h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    columns = "event_type, perpetrator, table_name, table_key, column_name, old_value, new_value"
    valid = {"event_type": "1", "perpetrator": "NULL", "table_name": "'usr'", "table_key": "'idu=2'",
             "column_name": "'fname'", "old_value": "NULL", "new_value": "'v'"}
    bad = {
        "table_name": "CAST(X'75737280' AS TEXT)",
        "table_key": "CAST(X'6964753D32FF' AS TEXT)",
        "column_name": ":raw",
        "new_value": "CAST(X'416EC3' AS TEXT)",
        "old_value": "CAST(X'EDA080' AS TEXT)",
        "perpetrator": "CAST(X'C0AF' AS TEXT)",
        "event_type": "X'FF'",
    }
    rejected = {}
    for column, sql in bad.items():
        values = ", ".join(sql if c == column else valid[c] for c in columns.split(", "))
        rejected[column] = insert_sql(h, values, raw=b"fname\xc3")
    (from_blob,) = h.log((1, "usr", "idu=3", "fname", None, "Bob".encode()))
    (last,) = h.log((1, "usr", "idu=4", "fname", None, "Dee"))
    assert backlog(h.config, h.engine)["new_by_table"] == {"usr": 9, "usr\\x80": 1}

    h.poll()
    statuses = h.statuses()
    assert {statuses[i] for i in (first, from_blob, last)} == {"S"}
    assert {statuses[i] for i in rejected.values()} == {"E"}
    why = reasons(h)
    for column, record_id in rejected.items():
        assert f"column {column} is not valid UTF-8" in why[record_id], why[record_id]
    assert {r["record_id"]: r["table_name"] for r in h.rejects()}[rejected["table_name"]] == "usr\\x80"
    assert [added(operation(h, f"idu={n}"), "fname") for n in (1, 3, 4)] == ["Ann", "Bob", "Dee"]


@pytest.mark.parametrize("style", ["field", "row"])
def test_a_null_in_a_sqlite_primary_key_fails_no_statement_and_is_refused_with_its_reason(
        spark, cycle_path, sqlite_database, tmp_path, style):
    """SQLite lets a primary key that is not INTEGER hold NULL. The application's statements on
    such a row succeed through the triggers; their events are refused, saying the key is NULL;
    the other rows publish, and a snapshot counts the rows it cannot publish."""
    from publisher.snapshots.snapshot import snapshot

    h = make(spark, cycle_path, sqlite_database, tmp_path, tables=("usr", "site"))
    h.db.execute("CREATE TABLE site (code TEXT, n INTEGER, label TEXT, PRIMARY KEY (code, n))",
                 "INSERT INTO site VALUES (NULL, 1, 'before'), ('b', NULL, 'before'), ('c', 3, 'before')")
    h.install("site", style=style)
    h.db.execute("INSERT INTO site VALUES (NULL, 2, 'new'), ('a', 1, 'new')",
                 "UPDATE site SET label = 'changed' WHERE code IS NULL OR n IS NULL",
                 "DELETE FROM site WHERE code IS NULL AND n = 2")
    h.poll()
    why = {r["table_key"]: r["reason"] for r in h.rejects()}
    assert set(why) == {"code=<NULL>+n=1", "code=<NULL>+n=2", "code=b+n=<NULL>"}, why
    assert all("the key column is NULL in this row" in reason for reason in why.values()), why
    assert set(h.statuses().values()) == {"S", "E"}
    assert added(operation(h, "code=a+n=1", "site"), "label") == "new"
    result = snapshot(h.config, h.engine, ["site"])
    taken = result.tables["site"]
    assert (taken.total, taken.rows, taken.null_keys) == (4, 2, 2)
    assert result.summary()["tables"]["site"]["null_keys"] == 2
    h.poll()
    assert_mirrored(h)


def test_a_view_row_with_a_null_pk_column_is_neither_snapshotted_nor_expected_by_verify(
        spark, cycle_path, postgresql_database, tmp_path):
    """A view's `pk_` column may be NULL where its base table's key is not: no object has that
    row's key, so a snapshot counts it apart and the mirror does not expect it."""
    from publisher.snapshots.snapshot import snapshot

    h = make(spark, cycle_path, postgresql_database, tmp_path, tables=("view_emp",))
    emp, view = h.table("emp"), h.table("view_emp")
    h.db.execute(f"CREATE TABLE {emp} (id INTEGER PRIMARY KEY, code TEXT, name TEXT)",
                 f"INSERT INTO {emp} VALUES (1, 'a', 'A'), (2, NULL, 'B'), (3, 'c', 'C')",
                 f"CREATE VIEW {view} AS SELECT code AS pk_code, name FROM {emp}")
    h.install("emp")
    taken = snapshot(h.config, h.engine).tables["view_emp"]
    assert (taken.total, taken.rows, taken.null_keys) == (3, 2, 1)
    h.poll()
    assert {op.findtext("association").split(",")[0] for op in h.published().operations} == {"pk_code=a", "pk_code=c"}
    assert_mirrored(h, rejects_allowed=False)


# --- keys the database cannot compare -------------------------------------------------------------


def test_a_key_its_column_type_cannot_take_is_rejected(spark, cycle_path, postgresql_database, tmp_path):
    h = make(spark, cycle_path, postgresql_database, tmp_path, tables=("usr", "tagged"))
    known = "6f1c58a5-2f1e-4e55-9a8b-4d1c7e0f0a11"
    h.db.execute(
        f"CREATE TABLE {h.table('tagged')} (id uuid PRIMARY KEY, label text)",
        f"INSERT INTO {h.table('tagged')} (id, label) VALUES ('{known}', 'ok')",
    )
    refused, found, later = h.log(
        (5, "tagged", "id=not-a-uuid"),
        (6, "tagged", f"id={known}"),
        (1, "usr", "idu=1", "fname", None, "Ann"),
    )
    h.poll()
    assert h.statuses() == {refused: "E", found: "S", later: "S"}
    assert "uuid" in reasons(h)[refused]
    assert added(operation(h, f"id={known}", "tagged"), "label") == "ok"


# --- generated rows -----------------------------------------------------------------------------


def hostile_text(max_size: int, nul: bool) -> st.SearchStrategy[str]:
    """Any text a driver can send: a lone surrogate cannot be encoded at all (bytes that are not
    UTF-8 come as binary instead), and PostgreSQL text holds no NUL."""
    alphabet = st.characters(exclude_characters=None if nul else "\x00", exclude_categories=("Cs",))
    return st.one_of(
        st.text(alphabet, max_size=max_size),
        st.text(st.sampled_from(SPECIALS + ("\x00" if nul else "")), max_size=max_size),
    )


def event_rows(dialect: str) -> st.SearchStrategy[tuple[Any, ...]]:
    """Rows that would publish, with none, some or all of their six columns made hostile."""
    sqlite = dialect == "sqlite"
    text_ = hostile_text(40, nul=sqlite)
    name = hostile_text(20, nul=sqlite)
    raw = st.binary(max_size=12) if sqlite else st.nothing()
    event_type = st.integers(-3, 12) | st.just(2**31 - 1)
    if sqlite:  # PostgreSQL's event_type is an integer column
        event_type |= st.sampled_from(["1", " 2 ", "1; DROP TABLE usr", "x", ""]) | text_ | raw
    usr = st.sampled_from(["usr", "USR"])
    usr_keys = st.sampled_from(["idu=1", "idu= 2", "IDU=3", "idu=4"])
    values = st.sampled_from(["Ann", "31", "true", "2024-01-01 10:00:00", "qqo=", "fname' OR '1'='1"])
    none = st.none()
    sane = st.one_of(
        st.tuples(st.sampled_from([1, 2, 3]), usr, usr_keys, st.sampled_from(["fname", "lname"]), none | text_, text_),
        st.tuples(st.just(2), usr, usr_keys, st.sampled_from(["age", "active", "born", "photo"]), values, values),
        st.tuples(st.sampled_from([4, 5, 6]), usr, usr_keys, none, none, none),
        st.tuples(st.sampled_from([7, 8]), usr, usr_keys, st.sampled_from(["fname", "photo", "age"]), none, none),
        st.tuples(st.sampled_from([4, 5]), st.just("grp"), st.sampled_from(['name="a;b"+site=1', "name=g+site=1"]),
                  none, none, none),
    )
    hostile = (
        event_type,
        st.sampled_from(["nosuch", "event_log", "usr; DROP TABLE usr; --"]) | name | raw,
        st.sampled_from(["idu=1); DELETE FROM usr; --", "idu=1 OR 1=1", "idu="]) | text_ | raw,
        none | st.sampled_from(['"usr"."fname"', "fname; --"]) | name | raw,
        none | values | text_ | raw,
        none | values | text_ | raw,
    )

    @st.composite
    def row(draw: st.DrawFn) -> tuple[Any, ...]:
        columns = list(draw(sane))
        for i in draw(st.sets(st.integers(0, 5), max_size=3)):
            columns[i] = draw(hostile[i])
        return tuple(columns)

    return row()


@spark_on_one_database("postgresql")
def test_generated_rows_publish_or_are_rejected_and_the_cycle_goes_on(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path)
    h.db.execute(
        GRP_DDL.format(table=h.table("grp")),
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')",
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (2, 'Bob')",
    )
    examples = iter(range(100, 10_000))

    @settings(max_examples=budget(15),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(rows=st.lists(event_rows(h.dialect), min_size=1, max_size=6), data=st.data())
    def cycle(rows: list[tuple[Any, ...]], data: st.DataObject) -> None:
        n = next(examples)
        at = data.draw(st.integers(0, len(rows)))
        before = h.log(*rows[:at]) if at else []
        (valid,) = h.log((1, "usr", f"idu={n}", "fname", None, f"valid {n}"))
        after = h.log(*rows[at:]) if rows[at:] else []
        ids = [*before, valid, *after]

        h.poll()
        statuses = h.statuses()
        assert {statuses[i] for i in ids} <= {"S", "W", "E"}
        errors = {i for i in ids if statuses[i] == "E"}
        assert errors == set(reasons(h)) & set(ids)
        published = h.published()  # every document parses
        (op,) = [op for op in published.operations if op.findtext("association") == h.association(f"idu={n}")]
        assert (op.tag, op.get("event-id"), added(op, "fname")) == ("add", str(valid), f"valid {n}")
        assert statuses[valid] == "S"

    cycle()
    assert_documents_carry_only_xml_characters(h)
    assert h.db.rows(f"SELECT idu, fname FROM {h.table('usr')} ORDER BY idu") == [(1, "Ann"), (2, "Bob")]


USR = TableInfo("usr", (
    ColumnInfo("idu", ValueType.INT, True, key_kind=KeyKind.INTEGER),
    ColumnInfo("fname", ValueType.STRING, False),
    ColumnInfo("photo", ValueType.OCTET, False),
    ColumnInfo("age", ValueType.INT, False),
    ColumnInfo("active", ValueType.STATE, False),
    ColumnInfo("born", ValueType.TIME, False),
))
GRP = TableInfo("grp", (
    ColumnInfo("name", ValueType.STRING, True),
    ColumnInfo("site", ValueType.INT, True),
    ColumnInfo("descr", ValueType.STRING, False),
))
CONTEXT = ClassifyContext(
    Catalog({"usr": USR, "grp": GRP}, {"secret": "table 'secret' is not published"}), "pub", False
)
ANYTHING = st.none() | st.text() | st.text(st.sampled_from(SPECIALS + "\x00")) | st.integers() | st.binary()


@settings(max_examples=budget(400))
@given(st.fixed_dictionaries(
    {role: ANYTHING for role in EVENT_LOG_COLUMNS},
    optional={UNREADABLE: st.none() | st.text()},
).flatmap(lambda row: st.fixed_dictionaries({
    **{role: st.just(value) for role, value in row.items()},
    "event_type": st.sampled_from(["1", "2", "3", "4", "5", "6", "7", "8"]) | st.just(row["event_type"]),
    "table_name": st.sampled_from(["usr", "USR", "grp", "nosuch", "secret"]) | st.just(row["table_name"]),
    "table_key": st.sampled_from(["idu=1", "name=a+site=1"]) | st.just(row["table_key"]),
    "column_name": st.sampled_from(["fname", "photo", "age", "descr"]) | st.just(row["column_name"]),
})))
def test_classify_never_raises_and_publishes_only_what_xml_can_carry(row: dict[str, Any]) -> None:
    out = classify_event(row, CONTEXT)
    assert out["disposition"] in (Disposition.PUBLISH, Disposition.LOOPBACK, Disposition.ERROR)
    if out["disposition"] == Disposition.ERROR:
        assert out["reason"]
    if out["disposition"] != Disposition.PUBLISH:
        return
    names = [out["class_name"], out["canonical_key"], out["attr_name"] or "", out["old_text"] or "",
             out["new_text"] or ""]
    assert all(xml_problem(n) is None for n in names), names
    new = Value(ValueType(out["value_type"]), out["new_text"]) if out["new_text"] is not None else None
    attrs = (AttrChange(out["attr_name"], add=new),) if out["attr_name"] else ()
    xml = build_operation(Operation(
        OperationKind.ADD, out["class_name"], association(out["canonical_key"], out["class_name"], "s"), 1, attrs
    ))
    etree.fromstring(xml)


@settings(max_examples=budget(400))
@given(st.text() | st.text(st.sampled_from(SPECIALS + "\x00")), st.sampled_from([KeyKind.INTEGER, KeyKind.TEXT]))
def test_key_parser_answers_any_text_with_a_key_or_a_value_error(key: str, kind: KeyKind) -> None:
    try:
        canonical = canonical_key(key, [("idu", kind)])
    except ValueError as exc:
        assert str(exc)
        return
    assert canonical_key(canonical, [("idu", kind)]) == canonical


TEXT_OR_NONE = st.none() | st.text(max_size=12) | st.text(st.sampled_from(SPECIALS + "\x00"), max_size=6)


def mostly(values: list[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """One of `values` four times in five, else `other`."""
    named = st.sampled_from(values)
    return st.one_of(named, named, named, named, other)


def read_rows_of(texts: st.SearchStrategy[str | None]) -> st.SearchStrategy[dict[str, Any]]:
    """Rows as a read hands them to classification: text or NULL, often naming the same target."""
    return st.fixed_dictionaries({
        "record_id": st.integers(1, 10**9),
        "status": st.just("N"),
        "event_type": mostly(["1", "2", "4", "5", "6", "7", "8", "9", " 2", "x"], texts),
        "event_time": st.none(),
        "perpetrator": mostly(["pub", " PUB ", "ann", None], texts),
        "table_name": mostly(["usr", "USR", "grp", "nosuch", "secret"], texts),
        "table_key": mostly(["idu=1", "idu=2", "idu=x", "name=a+site=1", "site=1+name=a", "idu=01", "idu=-0",
                             "idu=1 ", "IDU=1", "idu=123456789012345678", "idu=1234567890123456789"], texts),
        "column_name": mostly(["fname", "photo", "age", "active", "born", "idu", "descr"], texts),
        "old_value": mostly(["7", "yes", "1990-05-17 08:30:00", "aGk=", "1990-05-17 08:30:00+00", "0000-01-01"],
                            texts),
        "new_value": mostly(["8", "no", "not a number", "aGk=", "1990-05-17", "2024-02-30 00:00:00",
                             " 1990-05-17 08:30:00", "1990-05-17T08:30:00"], texts),
        "transaction_id": st.none() | st.sampled_from(["1", "2"]),
        UNREADABLE: st.none() | st.sampled_from(["column x is not valid UTF-8"]),
    })


def _update(record_id: int, column: str, old: str | None, new: str | None, **other: Any) -> dict[str, Any]:
    return {"record_id": record_id, "status": "N", "event_type": "2", "event_time": None, "perpetrator": "ann",
            "table_name": "usr", "table_key": "idu=1", "column_name": column, "old_value": old, "new_value": new,
            "transaction_id": None, UNREADABLE: None, **other}


@settings(max_examples=budget(150))
@given(st.lists(st.lists(read_rows_of(TEXT_OR_NONE), min_size=1, max_size=30), min_size=1, max_size=3),
       st.booleans(), st.sampled_from([2, 10**6]))
@example(  # an old value that cannot be published turns an update into type 3; a bad new value rejects it
    [[_update(1, "age", "yes", "8"), _update(2, "age", "7", "8"), _update(3, "age", "7", "no"),
      _update(4, "age", "yes", "9", perpetrator="pub"), _update(5, "age", "x", "1", unreadable="not UTF-8")]],
    False, 10**6,
)
@example(  # date-times in the plain forms encoded as columns, the rest one by one; keys spelled canonically
    [[_update(1, "born", "1990-05-17 08:30:00", "1990-05-17"), _update(2, "born", "1990-05-17", "2024-02-30 00:00:00"),
      _update(3, "born", "1990-05-17 08:30:00+00", " 1990-05-17 08:30:00"), _update(4, "born", None, "1990-05-17"),
      _update(5, "born", "0000-01-01", "1990-05-17T08:30:00"), _update(6, "born", "1990-05-17 24:00:00", "2000-01-01"),
      _update(7, "born", "x", "1990-05-17 08:30:00", event_type="1"), _update(8, "born", "1", "1990-05-17 08:30:60"),
      _update(9, "age", "1", "2", table_key="idu=01"), _update(10, "age", "1", "2", table_key="idu=-0"),
      _update(11, "age", "1", "2", table_key="idu=-12"),
      _update(12, "age", "1", "2", table_key="idu=1234567890123456789"),
      _update(13, "age", "1", "2", table_key="IDU=1"), _update(14, "age", "1", "2", table_key="idu=1 "),
      _update(15, "descr", "a", "b", table_name="grp", table_key="name=a+site=01"),
      _update(16, "descr", "a", "b", table_name="grp", table_key="site=1+name=a")]],
    False, 10**6,
)
def test_batch_classification_is_classify_event_row_by_row(
    batches: list[list[dict[str, Any]]], allow_loopback: bool, kept: int
) -> None:
    """The column-wise classifier remembers targets across batches (and forgets them when
    `kept` is reached); every row still gets exactly what `classify_event` says of it."""
    ctx = dataclasses.replace(CONTEXT, allow_loopback=allow_loopback)
    classify = BatchClassifier(ctx, future_events=False)
    classify.TARGETS_KEPT = kept
    schema = arrow_schema_of(EVENT_SCHEMA)
    for rows in batches:
        batch = rows_batch([tuple(row[name] for name in EVENT_FIELDS) for row in rows], schema)
        got = classify(batch).to_pylist()
        for row, out in zip(rows, got, strict=True):
            expected = classify_event(row, ctx)
            assert {name: out[name] for name in CLASSIFIED_NAMES} == expected, row
            assert {name: out[name] for name in EVENT_FIELDS} == row
            assert out["position_time"] is None
