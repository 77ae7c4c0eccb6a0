"""Cycle features end to end on a real database (docs/concepts: the event log, keys, XDS, delivery,
loopback): loopback, future events, query limit, batch size, deleting processed rows, post-polling
statements, renamed event-log columns, foreign statuses, compound and quoted keys, views, and the
real triggers.

Cycles are expensive, so each test runs as few as its point needs.
"""
from __future__ import annotations

import re

from conftest import POSTGRES_URL, spark_on_one_database
from harness import Harness
from lxml import etree
from sqlalchemy import text
from sqlalchemy.engine import make_url
from xml_compare import assert_same_xml

from publisher.config import EventLogColumns
from publisher.model.keys import KeyPart, parse_key

# A user name no test database logs in as: triggers on PostgreSQL record session_user, which
# would otherwise be the publisher's own user and make every trigger-logged row loopback.
OTHER_USER = "publisher_app"
SPECIAL_NAME = "x, ; ' + \" = \\ < >"
SPECIAL_KEY = r"""name="x, ; ' + \" = \\ < >"+site=7"""
DOCUMENT_NAME = re.compile(r"^(\d{12})-(\d{7})\.xml$")


def make(spark, path, db, tmp_path, /, user: str | None = None, **settings) -> Harness:
    """A harness with usr and the event log; `user` is the publisher's database user (loopback)."""
    h = Harness(spark, db, tmp_path, user=user, path=path, **settings)
    h.create_usr()
    h.create_event_log()
    return h


def set_event_time(h: Harness, record_id: int, offset: str) -> None:
    """Move one row's event_time to now plus `offset` ('+1 day', '-2 minutes')."""
    c = h.config.event_log.columns
    sign, amount = offset[0], offset[1:].strip()
    if h.dialect == "sqlite":
        value = f"strftime('%Y-%m-%d %H:%M:%f', 'now', '{sign}{amount}')"
    elif h.dialect == "mariadb":
        number, unit = amount.split()
        value = f"UTC_TIMESTAMP(6) {sign} INTERVAL {number} {unit.rstrip('s').upper()}"
    else:
        value = f"now() {sign} interval '{amount}'"
    h.db.execute(
        f"UPDATE {h.table(h.config.event_log.table)} SET {c.event_time} = {value} "
        f"WHERE {c.record_id} = {record_id}"
    )


def logged_ids(h: Harness) -> list[int]:
    c = h.config.event_log.columns
    return [int(r[0]) for r in h.db.rows(
        f"SELECT {c.record_id} FROM {h.table(h.config.event_log.table)} ORDER BY {c.record_id}"
    )]


def count(h: Harness, table: str) -> int:
    return int(h.db.rows(f"SELECT COUNT(*) FROM {h.table(table)}")[0][0])


# --- loopback (§5.2) -------------------------------------------------------------------------


@spark_on_one_database("sqlite")
def test_loopback_rows_get_s_unpublished_unless_allowed(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, user="Pub_User")
    own = h.log((1, "usr", "idu=1", "fname", None, "Ann"), perpetrator="  pub_user ")
    other = h.log((1, "usr", "idu=2", "fname", None, "Bob"), perpetrator="alice")
    anonymous = h.log((1, "usr", "idu=3", "fname", None, "Cy"), perpetrator=None)
    result = h.poll()
    assert h.published().describe() == [
        ("add", h.association("idu=2"), other[0]),
        ("add", h.association("idu=3"), anonymous[0]),
    ]
    assert h.statuses() == {own[0]: "S", other[0]: "S", anonymous[0]: "S"}
    assert result.statuses == {"S": 3}
    assert result.rejected == 0
    assert result.loopback == {"  pub_user ": 1} and result.summary()["loopback"] == 1

    h.reconfigure(allow_loopback=True)
    allowed = h.log((1, "usr", "idu=4", "fname", None, "Dee"), perpetrator="PUB_USER")
    h.poll()
    assert h.published().describe() == [("add", h.association("idu=4"), allowed[0])]
    assert h.statuses()[allowed[0]] == "S"


def test_loopback_user_defaults_to_the_connection_user(spark, cycle_path, postgresql_database, tmp_path):
    """No database.user: the URL's user is the publisher, and its trigger-logged changes loop back."""
    user = make_url(POSTGRES_URL).username
    assert user  # the test server's URL names its user
    h = make(spark, cycle_path, postgresql_database, tmp_path)
    h.install("usr")
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')")
    (by_trigger,) = logged_ids(h)
    shouted = h.log((1, "usr", "idu=2", "fname", None, "Bob"), perpetrator=f" {user.upper()} ")
    anonymous = h.log((1, "usr", "idu=3", "fname", None, "Cy"))
    h.poll()
    assert h.published().describe() == [("add", h.association("idu=3"), anonymous[0])]
    assert h.statuses() == {by_trigger: "S", shouted[0]: "S", anonymous[0]: "S"}


# --- future events (§5.1) --------------------------------------------------------------------


@spark_on_one_database("postgresql")
def test_future_events_order_by_time_and_wait_for_their_time(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, future_events=True)
    # the future row lies between the others in record_id order, inside the cycle's id range
    late, future, early = h.log(
        (4, "usr", "idu=1"),
        (1, "usr", "idu=2", "fname", None, "Bob"),
        (1, "usr", "idu=1", "fname", None, "Ann"),
    )
    set_event_time(h, late, "-1 minutes")
    set_event_time(h, early, "-2 minutes")
    set_event_time(h, future, "+1 day")

    result = h.poll()
    assert result.events == 2
    # in event_time order the add of idu=1 (logged last) comes before its delete
    assert h.published().describe() == [
        ("add", h.association("idu=1"), early),
        ("delete", h.association("idu=1"), late),
    ]
    assert h.statuses() == {late: "S", early: "S", future: "N"}

    assert h.poll().idle  # still in the future
    set_event_time(h, future, "-1 minutes")
    result = h.poll()
    assert result.events == 1
    assert h.published().describe() == [("add", h.association("idu=2"), future)]
    assert h.statuses() == {late: "S", early: "S", future: "S"}


# --- query limit, batch size, foreign statuses (§1, §4, §5.1, §6) ----------------------------


@spark_on_one_database("mariadb")
def test_query_limit_and_batch_size_across_cycles(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, query_limit=3, batch_size=2)
    (staged,) = h.log((1, "usr", "idu=9", "fname", None, "Staged"), status="X")
    ids = h.log(*[(4, "usr", f"idu={n}") for n in range(1, 6)])

    first = h.poll()
    assert (first.events, first.operations, first.documents) == (3, 3, 2)
    docs = h.published()
    assert [len(d.find("input")) for d in docs.documents] == [2, 1]
    assert docs.describe() == [("delete", h.association(f"idu={n}"), ids[n - 1]) for n in (1, 2, 3)]
    assert h.statuses() == {staged: "X", **{i: "S" for i in ids[:3]}, **{i: "N" for i in ids[3:]}}

    second = h.poll()
    assert (second.events, second.operations, second.documents) == (2, 2, 1)
    assert h.published().describe() == [("delete", h.association(f"idu={n}"), ids[n - 1]) for n in (4, 5)]
    assert h.statuses() == {staged: "X", **{i: "S" for i in ids}}

    names = first.files + second.files
    matches = [DOCUMENT_NAME.match(n) for n in names]
    assert all(matches), names
    assert [m.group(2) for m in matches] == ["0000000", "0000001", "0000000"]
    assert matches[0].group(1) == matches[1].group(1) < matches[2].group(1)
    # every file of the output, in name order, is the publication order
    everything = h.published(new_only=False)
    assert [p.name for p in sorted((h.output).glob("*.xml"))] == names
    assert everything.describe() == [("delete", h.association(f"idu={n}"), ids[n - 1]) for n in range(1, 6)]
    assert h.poll().idle  # the X row is never read


# --- delete processed rows and post-polling statements (§5.5, §6) ----------------------------


@spark_on_one_database("sqlite")
def test_delete_processed_rows_keeps_errors_and_post_polling_runs_after_publishing(
    spark, cycle_path, database, tmp_path
):
    marker = database.qualified("marker")
    h = make(
        spark, cycle_path, database, tmp_path,
        user="pub",
        delete_processed_rows=True,
        post_polling_statements=(f"INSERT INTO {marker} (n) VALUES (1)",),
    )
    h.db.execute(f"CREATE TABLE {marker} (n INTEGER)")
    valid = h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    loop = h.log((1, "usr", "idu=2", "fname", None, "Bob"), perpetrator="pub")
    vanished = h.log((6, "usr", "idu=99"))
    bad = h.log((9, "usr", "idu=1"))

    result = h.poll()
    assert h.published().describe() == [("add", h.association("idu=1"), valid[0])]
    assert result.statuses == {"S": 2, "W": 1, "E": 1}
    assert h.statuses() == {bad[0]: "E"}
    assert count(h, "marker") == 1
    assert {valid[0], loop[0], vanished[0]}.isdisjoint(h.statuses())

    assert h.poll().idle
    assert count(h, "marker") == 1  # not after an idle cycle

    only_loop = h.log((1, "usr", "idu=3", "fname", None, "Cy"), perpetrator="PUB")
    result = h.poll()
    assert result.events == 1 and result.documents == 0
    assert h.published().documents == []
    assert h.statuses() == {bad[0]: "E"}
    assert only_loop[0] not in h.statuses()
    assert count(h, "marker") == 1  # nothing published, nothing run


# --- renamed event log columns (§1, §6) ------------------------------------------------------


RENAMED = EventLogColumns(
    record_id="rec",
    status="state",
    event_type="kind",
    event_time="stamp",
    perpetrator="who",
    table_name="tbl",
    table_key="objkey",
    column_name="col",
    old_value="before_value",
    new_value="after_value",
)


@spark_on_one_database("postgresql")
def test_renamed_event_log_columns_with_triggers(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, columns=RENAMED, user=OTHER_USER, future_events=True)
    h.install("usr", style="row")
    (staged,) = h.log((1, "usr", "idu=1", "fname", None, "Staged"), status="X")
    h.db.execute(
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')",
        f"UPDATE {h.table('usr')} SET fname = 'Anne' WHERE idu = 1",
    )
    rows = h.db.rows(
        f"SELECT rec, kind, tbl, objkey, col FROM {h.table('event_log')} WHERE state = 'N' ORDER BY rec"
    )
    assert [r[1:] for r in rows] == [(5, "usr", "idu=1", None), (6, "usr", "idu=1", None)]
    inserted, updated = (int(r[0]) for r in rows)

    result = h.poll()
    assert result.events == 2
    (op,) = h.published().operations
    assert (op.tag, op.findtext("association"), op.get("event-id")) == (
        "modify", h.association("idu=1"), str(inserted))
    fname = {m.get("attr-name"): m for m in op.findall("modify-attr")}["fname"]
    assert fname.findtext("add-value/value") == "Anne"
    assert h.statuses() == {staged: "X", inserted: "S", updated: "S"}


# --- compound and quoted keys (§2) -----------------------------------------------------------


GRP_DDL = "CREATE TABLE {table} (name VARCHAR(64), site INTEGER, descr VARCHAR(64), PRIMARY KEY (name, site))"


@spark_on_one_database("mariadb")
def test_compound_quoted_key_round_trips(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, user=OTHER_USER)
    h.db.execute(GRP_DDL.format(table=h.table("grp")))
    h.install("grp")
    with h.engine.begin() as conn:
        conn.execute(
            text(f"INSERT INTO {h.table('grp')} (name, site, descr) VALUES (:n, 7, 'd1')"), {"n": SPECIAL_NAME}
        )
        conn.execute(text(f"INSERT INTO {h.table('grp')} (name, site, descr) VALUES ('plain', 8, 'd2')"))
    logged = h.db.rows(f"SELECT record_id, table_key FROM {h.table('event_log')} ORDER BY record_id")
    assert [r[1] for r in logged] == [SPECIAL_KEY, "name=plain+site=8"]
    special_id, plain_id = (int(r[0]) for r in logged)

    h.poll()
    published = h.published()
    assert published.describe() == [
        ("add", h.association(SPECIAL_KEY, "grp"), special_id),
        ("add", h.association("name=plain+site=8", "grp"), plain_id),
    ]
    association = published.operations[0].findtext("association").strip()
    key, _, rest = association.rpartition(",table=")
    assert rest == f"grp,schema={h.schema_label}"
    assert parse_key(key) == (KeyPart("name", SPECIAL_NAME), KeyPart("site", "7"))
    assert_same_xml(
        published.operations[0],
        etree.fromstring(
            f'<add class-name="grp"><association>{association.replace("&", "&amp;").replace("<", "&lt;")}'
            '</association><add-attr attr-name="descr"><value type="string">d1</value></add-attr></add>'
        ),
    )
    assert h.statuses() == {special_id: "S", plain_id: "S"}


# --- views (§2, §3) --------------------------------------------------------------------------


@spark_on_one_database("sqlite")
def test_view_with_pk_prefixed_key_columns(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path)
    h.db.execute(
        f"CREATE VIEW {h.table('view_usr')} AS SELECT idu AS pk_empno, fname FROM {h.table('usr')}",
        f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')",
    )
    queried, added, vanished = h.log(
        (5, "view_usr", "pk_empno=1"),
        (1, "view_usr", "pk_empno=2", "fname", None, "Bob"),
        (6, "view_usr", "pk_empno=3"),
    )
    h.db.execute(f"UPDATE {h.table('usr')} SET fname = 'Anne' WHERE idu = 1")  # read at publication

    result = h.poll()
    published = h.published()
    assert published.describe() == [
        ("modify", h.association("pk_empno=1", "view_usr"), queried),
        ("add", h.association("pk_empno=2", "view_usr"), added),
    ]
    modify, add = published.operations
    assert_same_xml(modify, etree.fromstring(
        f'<modify class-name="view_usr"><association>{h.association("pk_empno=1", "view_usr")}</association>'
        '<modify-attr attr-name="fname"><remove-all-values/><add-value><value type="string">Anne</value>'
        '</add-value></modify-attr></modify>'
    ))
    assert_same_xml(add, etree.fromstring(
        f'<add class-name="view_usr"><association>{h.association("pk_empno=2", "view_usr")}</association>'
        '<add-attr attr-name="fname"><value type="string">Bob</value></add-attr></add>'
    ))
    assert h.statuses() == {queried: "S", added: "S", vanished: "W"}
    assert result.statuses == {"S": 2, "W": 1}


# --- the real triggers end to end (§1, §3, §4) -----------------------------------------------


BORN_LITERAL = {"sqlite": "'2001-02-03 04:05:06'", "postgresql": "'2001-02-03 04:05:06+00'",
                "mariadb": "'2001-02-03 04:05:06'"}
BORN_EPOCH = "981173106"  # 2001-02-03T04:05:06Z


@spark_on_one_database("postgresql")
def test_field_style_triggers_end_to_end(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, user=OTHER_USER)
    h.install("usr", style="field")
    usr = h.table("usr")
    h.db.execute(
        f"INSERT INTO {usr} (idu, fname, lname, age, active, born) "
        f"VALUES (1, 'Ann', 'Lee', 30, TRUE, {BORN_LITERAL[h.dialect]})",
        f"INSERT INTO {usr} (idu, fname) VALUES (2, 'Bob')",
        f"UPDATE {usr} SET lname = 'Li', age = 31 WHERE idu = 1",
        f"DELETE FROM {usr} WHERE idu = 2",
    )
    ids = logged_ids(h)
    # 5 fields of idu=1, 1 of idu=2, 2 changed fields, 1 delete
    assert len(ids) == 9

    result = h.poll()
    assert (result.events, result.operations) == (9, 4)
    published = h.published()
    assert published.describe() == [
        ("add", h.association("idu=1"), ids[0]),
        ("add", h.association("idu=2"), ids[5]),
        ("modify", h.association("idu=1"), ids[6]),
        ("delete", h.association("idu=2"), ids[8]),
    ]
    add1, add2, modify, delete = published.operations
    assert_same_xml(add1, etree.fromstring(
        f'<add class-name="usr"><association>{h.association("idu=1")}</association>'
        '<add-attr attr-name="fname"><value type="string">Ann</value></add-attr>'
        '<add-attr attr-name="lname"><value type="string">Lee</value></add-attr>'
        '<add-attr attr-name="age"><value type="int">30</value></add-attr>'
        '<add-attr attr-name="active"><value type="state">true</value></add-attr>'
        f'<add-attr attr-name="born"><value type="time">{BORN_EPOCH}</value></add-attr></add>'
    ))
    assert_same_xml(modify, etree.fromstring(
        f'<modify class-name="usr"><association>{h.association("idu=1")}</association>'
        '<modify-attr attr-name="lname"><remove-value><value type="string">Lee</value></remove-value>'
        '<add-value><value type="string">Li</value></add-value></modify-attr>'
        '<modify-attr attr-name="age"><remove-value><value type="int">30</value></remove-value>'
        '<add-value><value type="int">31</value></add-value></modify-attr></modify>'
    ))
    assert_same_xml(delete, etree.fromstring(
        f'<delete class-name="usr"><association>{h.association("idu=2")}</association></delete>'
    ))
    assert [a.get("attr-name") for a in add2.findall("add-attr")] == ["fname"]
    assert set(h.statuses().values()) == {"S"}


@spark_on_one_database("mariadb")
def test_row_style_triggers_end_to_end(spark, cycle_path, database, tmp_path):
    h = make(spark, cycle_path, database, tmp_path, user=OTHER_USER)
    h.install("usr", style="row")
    usr = h.table("usr")
    with h.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {usr} (idu, fname, photo) VALUES (1, 'Ann', :p)"), {"p": b"\x00\xff"})
        conn.execute(text(f"UPDATE {usr} SET fname = 'Anne' WHERE idu = 1"))
        conn.execute(text(f"INSERT INTO {usr} (idu, fname) VALUES (2, 'Bob')"))
        conn.execute(text(f"DELETE FROM {usr} WHERE idu = 2"))
    inserted, updated, inserted_gone, deleted = logged_ids(h)

    result = h.poll()
    published = h.published()
    # idu=1: one read for both query-backs; idu=2 is gone, so its query-back is W and the delete stands
    assert published.describe() == [
        ("modify", h.association("idu=1"), inserted),
        ("delete", h.association("idu=2"), deleted),
    ]
    attrs = {m.get("attr-name"): m for m in published.operations[0].findall("modify-attr")}
    assert set(attrs) == {"fname", "lname", "photo", "age", "active", "born"}
    assert attrs["fname"].findtext("add-value/value") == "Anne"
    assert attrs["photo"].findtext("add-value/value") == "AP8="
    assert attrs["photo"].find("add-value/value").get("type") == "octet"
    assert attrs["lname"].find("remove-all-values") is not None and attrs["lname"].find("add-value") is None
    assert h.statuses() == {inserted: "S", updated: "S", inserted_gone: "W", deleted: "S"}
    assert result.statuses == {"S": 3, "W": 1}
