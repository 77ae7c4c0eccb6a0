"""Schemas the other tests did not invent: keys of every type, link tables, an object deleted and
created again in one cycle, values whose text depends on the session. Each ends with the consumer
mirror equal to the source, on SQLite and PostgreSQL, in the driver and as Spark jobs."""
from __future__ import annotations

import pytest
from harness import Harness, assert_mirrored, drain

from publisher.errors import StageFailedError
from publisher.pipeline import cycle

PUBLISHER_USER = "publisher_app"
"""Triggers on PostgreSQL record session_user; the publisher must not take it for its own."""


def harness_for(spark, cycle_path, database, tmp_path, **settings) -> Harness:
    h = Harness(spark, database, tmp_path, user=PUBLISHER_USER, path=cycle_path, **settings)
    h.create_event_log()
    return h


def blob(h: Harness, hex_digits: str) -> str:
    """A binary literal in the test database's dialect."""
    return f"x'{hex_digits}'" if h.dialect == "sqlite" else f"'\\x{hex_digits}'::bytea"




TYPED_KEYS = {
    "postgresql": (
        "CREATE TABLE {s}.acct (c char(6), b boolean, ts timestamptz, t timestamp(6), u uuid, n numeric(10,2), "
        "d date, f float8, h bytea, v text, photo bytea, PRIMARY KEY (c, b, ts, t, u, n, d, f, h))",
        ["c", "b", "ts", "t", "u", "n", "d", "f", "h"],
        [
            ("'ab'", "true", "'2026-03-01 10:00:00.5+05:30'", "'2026-03-01 10:00:00.25'",
             "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "1.50", "'2026-03-01'", "0.1", "'\\x00ff'"),
            ("'a b '", "false", "'1999-12-31 23:59:59.999999-08'", "'2000-01-01 00:00:00'",
             "'00000000-0000-0000-0000-000000000001'", "-2", "'1970-01-01'", "1e20", "''"),
        ],
    ),
    "sqlite": (
        "CREATE TABLE acct (c TEXT, b BOOLEAN, t TIMESTAMP, n NUMERIC, r REAL, v TEXT, photo BLOB, "
        "PRIMARY KEY (c, b, t, n, r))",
        ["c", "b", "t", "n", "r"],
        [
            ("'ab  '", "1", "'2026-03-01 10:00:00.5'", "1.50", "0.1 + 0.2"),
            ("'x,\"y\"=+<>'", "0", "'2026-03-01T10:00:00Z'", "'7'", "1e20"),
        ],
    ),
}


@pytest.mark.parametrize("style", ["field", "row"])
def test_keys_of_every_type_are_found_by_query_back(spark, cycle_path, database, tmp_path, style):
    """char(n), boolean, timestamptz, fractional timestamps, uuid, numeric, float and bytea keys:
    the trigger's text of a key and the row read back name one object, so nothing becomes W."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    ddl, key, rows = TYPED_KEYS[h.dialect]
    h.db.execute(ddl.format(s=h.db.schema))
    h.install("acct", style=style)
    table = h.table("acct")
    where = " AND ".join(f"{k} = {v}" for k, v in zip(key, rows[0]))
    statements = [
        f"INSERT INTO {table} ({', '.join(key)}, v, photo) VALUES ({', '.join(row)}, 'first', {blob(h, '0102')})"
        for row in rows
    ]
    if h.dialect == "postgresql":
        statements.insert(0, "SET LOCAL TIME ZONE 'America/Caracas'")
    h.db.execute(*statements)
    h.db.execute(f"UPDATE {table} SET v = 'second', photo = {blob(h, '0304')} WHERE {where}")
    drain(h)
    assert "W" not in h.statuses().values()
    assert "E" not in h.statuses().values(), h.rejects()
    assert_mirrored(h)
    h.db.execute(f"DELETE FROM {table} WHERE {where}")
    drain(h)
    assert_mirrored(h)
    assert len(h.db.rows(f"SELECT * FROM {table}")) == 1


@pytest.mark.parametrize("style", ["field", "row"])
def test_link_table_inserts_are_published(spark, cycle_path, database, tmp_path, style):
    """A table of key columns only (a membership) publishes its inserts, not only its deletes."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    h.db.execute(f"CREATE TABLE {h.table('member')} (grp INTEGER, person VARCHAR(20), PRIMARY KEY (grp, person))")
    h.install("member", style=style)
    table = h.table("member")
    h.db.execute(f"INSERT INTO {table} VALUES (1, 'ann'), (1, 'bob'), (2, 'ann')")
    drain(h)
    published = h.published().describe()
    assert sorted(a for _, a, _ in published) == sorted(
        h.association(k, "member") for k in ("grp=1+person=ann", "grp=1+person=bob", "grp=2+person=ann")
    )
    assert_mirrored(h)
    h.db.execute(f"DELETE FROM {table} WHERE person = 'bob'", f"UPDATE {table} SET grp = 3 WHERE grp = 2")
    drain(h)
    assert_mirrored(h)


def test_object_deleted_and_created_again_in_one_cycle(spark, cycle_path, database, tmp_path):
    """insert; delete; insert of one key: the photo read back comes after the delete."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    h.create_usr()
    if h.dialect == "sqlite":
        h.install("usr")
        table = h.table("usr")
        h.db.execute(
            f"INSERT INTO {table} (idu, fname, photo) VALUES (1, 'Ann', x'01')",
            f"DELETE FROM {table} WHERE idu = 1",
            f"INSERT INTO {table} (idu, fname, photo) VALUES (1, 'Ann', x'02')",
        )
    else:
        # PostgreSQL logs binary values, so the shape is logged by hand: the same events a
        # trigger that reads binary columns back would log.
        h.reconfigure(tables=("usr",))
        h.insert_usr(1, fname="Ann", photo=b"\x02")
        h.log((1, "usr", "idu=1", "fname", None, "Ann"), (7, "usr", "idu=1", "photo"), (4, "usr", "idu=1"),
              (1, "usr", "idu=1", "fname", None, "Ann"), (7, "usr", "idu=1", "photo"))
    drain(h)
    kinds = [(op.tag, [a.get("attr-name") for a in op if a.tag.endswith("attr")]) for op in h.published().operations]
    assert kinds == [("add", ["fname"]), ("delete", []), ("add", ["fname"]), ("modify", ["photo"])]
    assert_mirrored(h)


ROUND_TRIP = {
    "postgresql": (
        "CREATE TABLE {s}.vals (id integer PRIMARY KEY, iv interval, arr integer[], tarr text[], jb jsonb, js json, "
        "tz timetz, tm time, f8 float8, f4 real, num numeric, ts timestamptz, tsn timestamp, d date, b boolean, "
        "bin bytea, u uuid, ip inet, txt text, big bigint)",
        "INSERT INTO {s}.vals VALUES (1, '1 day 02:03:04.5', '{{1,2,3}}', '{{\"a b\",NULL,\"c,d\"}}', "
        "'{{\"b\": [1, 2], \"a\": \"x\"}}', '{{\"b\":  1}}', '10:00:00.5+05:30', '23:59:59.999', 0.1, 0.1, "
        "1.50, '2026-03-01 10:00:00.5+05:30', '2026-03-01 10:00:00.5', '2026-03-01', true, '\\x00ff', "
        "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '10.0.0.1/8', 'trailing  ', 9007199254740993)",
        ["SET LOCAL intervalstyle = 'iso_8601'", "SET LOCAL datestyle = 'SQL, DMY'",
         "SET LOCAL extra_float_digits = 0", "SET LOCAL TIME ZONE 'Asia/Tokyo'"],
    ),
    "sqlite": (
        "CREATE TABLE vals (id INTEGER PRIMARY KEY, r REAL, num NUMERIC, dec DECIMAL(10, 2), b BOOLEAN, "
        "ts TIMESTAMP, d DATE, txt TEXT, big INTEGER, anything)",
        "INSERT INTO vals VALUES (1, 0.1 + 0.2, '1.50', 2.5, 1, '2026-03-01 10:00:00.5', '2026-03-01', "
        "'trailing  ', 9007199254740993, 1e300)",
        [],
    ),
}


def test_logged_and_read_back_values_publish_the_same_text(spark, cycle_path, database, tmp_path):
    """A value a field-style trigger logs and the same value read back by query-back publish one
    text, whatever the changing session's date, interval and float settings: else a later
    <remove-value> names a value the consumer never received."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    ddl, insert, session = ROUND_TRIP[h.dialect]
    h.db.execute(ddl.format(s=h.db.schema))
    h.install("vals", style="field")
    h.db.execute(*session, insert.format(s=h.db.schema))
    drain(h)
    h.log((6, "vals", "id=1"))
    drain(h)
    added, modified = h.published().operations
    logged = {a.get("attr-name"): a.findtext("value") for a in added.iter("add-attr")}
    read_back = {a.get("attr-name"): a.findtext("add-value/value") for a in modified.iter("modify-attr")}
    assert logged == read_back
    assert len(logged) == len(read_back) == len(h.db.rows(f"SELECT * FROM {h.table('vals')}")[0]) - 1
    assert_mirrored(h)


def test_event_naming_a_key_column(spark, cycle_path, database, tmp_path):
    """An insert's field event for a key column publishes no key attribute; an update of a key
    column in place is an error, never a removal of the key attribute."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=("usr",))
    h.create_usr()
    h.insert_usr(1, fname="Ann")
    ids = h.log((1, "usr", "idu=1", "idu", None, "1"), (1, "usr", "idu=1", "fname", None, "Ann"),
                (2, "usr", "idu=1", "IDU", "1", "2"), (8, "usr", "idu=1", "idu"))
    drain(h)
    (op,) = h.published().operations
    assert op.tag == "add"
    assert [a.get("attr-name") for a in op.iter("add-attr")] == ["fname"]
    statuses = h.statuses()
    assert [statuses[i] for i in ids] == ["S", "S", "E", "E"]
    assert {r["record_id"]: r["reason"] for r in h.rejects()} == {
        ids[2]: "event type 2 names key column usr.idu: a key is not changed in place"
        " (a key change is a delete of the old key and an insert of the new)",
        ids[3]: "event type 8 names key column usr.idu: a key is not changed in place"
        " (a key change is a delete of the old key and an insert of the new)",
    }


KEY_TYPE_ERRORS = {
    "postgresql": (
        "CREATE TABLE {s}.dev (u uuid, d date, b boolean, v text, PRIMARY KEY (u, d, b))",
        [
            ("u=notauuid+d=2026-01-01+b=true", "column 'u' needs a uuid, got 'notauuid'"),
            ("u=a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11+d=2026-02-30+b=true",
             "column 'd' needs a date (YYYY-MM-DD), got '2026-02-30'"),
            ("u=a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11+d=2026-02-01+b=maybe",
             "column 'b' needs a boolean (true/false), got 'maybe'"),
        ],
    ),
    "sqlite": (
        "CREATE TABLE dev (u INTEGER, d TEXT, b BOOLEAN, v TEXT, PRIMARY KEY (u, d, b))",
        [("u=notanumber+d=x+b=1", "column 'u' needs an integer, got 'notanumber'")],
    ),
}


def test_logged_keys_are_checked_against_the_key_column_type(spark, cycle_path, database, tmp_path):
    """`u=notauuid` on a uuid key is an error with its reason, never a published association."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=("dev",))
    ddl, cases = KEY_TYPE_ERRORS[h.dialect]
    h.db.execute(ddl.format(s=h.db.schema))
    ids = h.log(*((1, "dev", key, "v", None, "x") for key, _ in cases))
    drain(h)
    assert h.published().operations == []
    assert [h.statuses()[i] for i in ids] == ["E"] * len(cases)
    assert [r["reason"] for r in h.rejects()] == [f"table_key {key!r}: {why}" for key, why in cases]


def test_row_deleted_and_inserted_again_when_inserts_publish_adds(spark, cycle_path, database, tmp_path):
    """With insert_row_operation = "add", a row deleted and inserted again in one cycle is
    published as a delete and an add: a lone <add> would land on an object the consumer holds."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=(), insert_row_operation="add")
    h.create_usr()
    h.install("usr", style="row")
    h.insert_usr(1, fname="Ann")
    drain(h)
    h.db.execute(f"DELETE FROM {h.table('usr')} WHERE idu = 1")
    h.insert_usr(1, fname="Bob", age=7)
    drain(h)
    published = h.published(new_only=False).describe()
    assert [tag for tag, _, _ in published] == ["add", "delete", "add"]
    assert_mirrored(h)


def test_an_insert_logs_its_values_before_the_binary_column_it_reads_back(spark, cycle_path, database, tmp_path):
    """SQLite reads a binary column back (type 7): logged after the row's type-1 events, it no
    longer splits them into two <add>s, the second of which a consumer refuses."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    h.create_usr()
    h.install("usr")
    h.insert_usr(1, fname="Jack", photo=b"\xbb\xbb", age=40, active=True)
    drain(h)
    kinds = [op.tag for op in h.published().operations]
    assert kinds == (["add", "modify"] if h.dialect == "sqlite" else ["add"])
    assert_mirrored(h)


def test_row_adds_when_a_cycle_ends_on_a_delete_of_a_row_that_exists_again(spark, cycle_path, database, tmp_path):
    """insert_row_operation = "add", a window cut by query_limit after a delete: the delete is
    published, and the next cycle's insert is an <add> the consumer accepts, update included."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=(), insert_row_operation="add")
    h.create_usr()
    h.install("usr", style="row")
    table = h.table("usr")
    h.insert_usr(1, fname="one")
    drain(h)
    h.db.execute(f"DELETE FROM {table} WHERE idu = 1")
    h.insert_usr(1, fname="two")
    h.db.execute(f"DELETE FROM {table} WHERE idu = 1")
    h.insert_usr(1, fname="three")
    h.reconfigure(query_limit=3)
    h.poll()
    h.db.execute(f"UPDATE {table} SET fname = 'four' WHERE idu = 1")
    drain(h)
    assert [op.tag for op in h.published(new_only=False).operations] == ["add", "delete", "add"]
    assert_mirrored(h)


def test_an_update_from_a_value_that_cannot_be_published_still_publishes_the_new_value(
    spark, cycle_path, database, tmp_path
):
    """The old value (PostgreSQL 'infinity', a SQLite date-time that is no time) cannot be named
    in a <remove-value>: the update removes all values and adds the new one."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    h.create_usr()
    h.install("usr")
    table = h.table("usr")
    never = "'infinity'" if h.dialect == "postgresql" else "'never'"
    h.db.execute(f"INSERT INTO {table} (idu, fname, born) VALUES (1, 'Ann', {never})")
    drain(h)
    assert list(h.statuses().values()).count("E") == 1  # the insert of a value that cannot be published
    h.published()
    h.db.execute(f"UPDATE {table} SET born = '2030-01-01 00:00:00' WHERE idu = 1")
    drain(h)
    (modify,) = h.published().operations
    assert [child.tag for child in modify.find("modify-attr")] == ["remove-all-values", "add-value"]
    assert modify.findtext("modify-attr/add-value/value") == "1893456000"
    assert_mirrored(h)


def test_a_key_column_a_table_key_cannot_name_refuses_the_table(spark, cycle_path, database, tmp_path):
    """A key column named `a=b` cannot appear in a table_key: the table is refused by name (its
    events are E with the reason) and the mirror leaves it out instead of failing."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=("odd",))
    h.db.execute(f'CREATE TABLE {h.table("odd")} ("a=b" INTEGER PRIMARY KEY, v TEXT)')
    h.db.execute(f"INSERT INTO {h.table('odd')} VALUES (1, 'x')")
    (event,) = h.log((1, "odd", '"a=b"=1', "v", None, "x"))
    drain(h)
    assert h.statuses()[event] == "E"
    assert [r["reason"] for r in h.rejects()] == [
        "key column name 'a=b' of table 'odd' cannot be written in a table_key"
        " (it holds one of , ; ' + \" = \\ < > or surrounding spaces)"
    ]
    assert_mirrored(h)


def test_query_limit_never_cuts_an_insert_or_a_transaction(spark, cycle_path, database, tmp_path):
    """Class 5: a window of one row cut a three-column insert in two, and the consumer refused
    the second <add> with the columns in it. Several rows per statement, several statements
    per transaction, a key change, a delete and a re-insert, read one row at a time."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=(), query_limit=1, batch_size=1)
    h.db.execute(
        f"CREATE TABLE {h.table('acct')} (region CHAR(2), num INTEGER, a TEXT, b TEXT, c TEXT, "
        "PRIMARY KEY (region, num))"
    )
    h.install("acct")
    table = h.table("acct")
    h.db.execute(
        f"INSERT INTO {table} VALUES ('eu', 1, 'a1', 'b1', 'c1'), ('us', 1, 'a2', 'b2', 'c2')",
        f"UPDATE {table} SET num = 2, a = 'moved' WHERE region = 'eu'",
        f"DELETE FROM {table} WHERE region = 'us'",
        f"INSERT INTO {table} VALUES ('us', 1, 'again', 'b3', NULL)",
    )
    drain(h)
    assert_mirrored(h)


def test_a_cycle_whose_acknowledgement_was_lost_is_repeated_exactly(spark, cycle_path, database, tmp_path, monkeypatch):
    """Found by the mirror: the repeat took a change logged in between into an operation whose
    event-id the consumer had applied, and the consumer dropped it."""
    h = harness_for(spark, cycle_path, database, tmp_path, tables=())
    h.db.execute(f"CREATE TABLE {h.table('acct')} (id INTEGER PRIMARY KEY, a TEXT, b TEXT)")
    h.install("acct")
    table = h.table("acct")
    h.db.execute(f"INSERT INTO {table} VALUES (1, 'a1', NULL)")
    drain(h)
    h.db.execute(f"UPDATE {table} SET a = 'a2' WHERE id = 1")

    def lost(*args, **kwargs):
        raise ConnectionError("the database went away before the statuses were committed")

    with monkeypatch.context() as patched:
        patched.setattr(cycle, "acknowledge_runs", lost)
        with pytest.raises(StageFailedError, match="stage acknowledge"):
            h.poll()
    h.db.execute(f"UPDATE {table} SET b = 'b2' WHERE id = 1")
    drain(h)
    assert_mirrored(h)
