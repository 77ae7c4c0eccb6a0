"""Which rows a cycle takes: `query_limit` never cuts one insert's events (nor, where the event
log records transactions, one transaction's) across two cycles, and future-event processing
reads event_time as a time, whatever form it was written in."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import DIALECTS, spark_on_one_database
from harness import Harness
from sqlalchemy import create_engine, text

from publisher.config import DatabaseConfig
from publisher.errors import StageFailedError
from publisher.outputs.cycle_files import WINDOW_FILE
from publisher.pipeline.window import window_pin
from publisher.service.mirror import verify

# A user no test database logs in as: PostgreSQL's triggers record session_user, which would
# otherwise be the publisher's own user and make every trigger-logged row loopback.
OTHER_USER = "publisher_app"


def publisher(h: Harness, **settings: object) -> Harness:
    """The harness with triggers on usr (field style), publishing other users' changes."""
    h.config = dataclasses.replace(h.config, database=dataclasses.replace(h.config.database, user=OTHER_USER))
    h.reconfigure(**settings)
    return h


def drain(h: Harness) -> list[int]:
    """Poll until nothing is new; the events of each cycle."""
    counts = []
    for _ in range(50):
        result = h.poll()
        if result.idle:
            return counts
        counts.append(result.events)
    pytest.fail("the event log never drained")


def adds(h: Harness) -> Counter[str]:
    """How many <add>s each object got, over everything published."""
    return Counter(op.findtext("association").strip() for op in h.published(new_only=False).operations
                   if op.tag == "add")


def insert_usr(h: Harness, *idus: int) -> None:
    """One statement inserting a row with three non-NULL non-key columns per key."""
    values = ", ".join(f"({idu}, 'first{idu}', 'last{idu}', {20 + idu})" for idu in idus)
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname, lname, age) VALUES {values}")


def new_ids(h: Harness) -> list[int]:
    return [rid for rid, status in h.statuses().items() if status == "N"]


# --- query_limit and one insert's events ------------------------------------------------------


@spark_on_one_database("sqlite")
@pytest.mark.parametrize("query_limit", [1, 2])
def test_a_three_column_insert_is_published_by_one_cycle(harness, query_limit):
    h = publisher(harness, query_limit=query_limit)
    h.install("usr")
    insert_usr(h, 1)
    insert_usr(h, 2)
    assert len(new_ids(h)) == 6

    assert drain(h) == [3, 3]
    assert adds(h) == {h.association("idu=1"): 1, h.association("idu=2"): 1}
    (first, second) = [op for op in h.published(new_only=False).operations]
    assert [a.get("attr-name") for a in first.findall("add-attr")] == ["fname", "lname", "age"]
    assert [a.get("attr-name") for a in second.findall("add-attr")] == ["fname", "lname", "age"]
    assert set(h.statuses().values()) == {"S"}


@spark_on_one_database("postgresql")
def test_a_statement_inserting_several_rows(harness):
    """SQLite cannot tell transactions apart: each object's events of the statement stay
    together. PostgreSQL's triggers record the transaction and MariaDB's the statement, which
    is taken whole."""
    h = publisher(harness, query_limit=2)
    h.install("usr")
    insert_usr(h, 1, 2, 3)

    counts = drain(h)
    assert counts == ([3, 3, 3] if h.dialect == "sqlite" else [9])
    assert adds(h) == {h.association(f"idu={n}"): 1 for n in (1, 2, 3)}
    assert set(h.statuses().values()) == {"S"}


@spark_on_one_database("mariadb")
def test_hand_logged_events_of_one_statement_stay_together(harness):
    """Rows without a transaction_id: on SQLite one statement's rows for an object share their
    event_time; elsewhere the consecutive rows of one object are kept together."""
    h = publisher(harness, query_limit=1)
    ids = h.log(
        (1, "usr", "idu=1", "fname", None, "Ann"),
        (1, "usr", "idu=1", "lname", None, "Lee"),
        (1, "usr", "idu=1", "age", None, "30"),
        (2, "usr", "idu=1", "fname", "Ann", "Anne"),
        (1, "usr", "idu=2", "fname", None, "Bob"),
    )
    log = h.table("event_log")
    h.db.execute(
        f"UPDATE {log} SET event_time = '2026-01-01 00:00:00' WHERE record_id IN ({ids[0]}, {ids[1]}, {ids[2]})",
        f"UPDATE {log} SET event_time = '2026-01-01 00:00:01' WHERE record_id = {ids[3]}",
    )

    counts = drain(h)
    assert counts == ([3, 1, 1] if h.dialect == "sqlite" else [4, 1])
    assert adds(h) == {h.association("idu=1"): 1, h.association("idu=2"): 1}


def test_a_cut_transaction_is_taken_whole(spark, cycle_path, postgresql_database, tmp_path):
    """Several statements in one transaction, cut by query_limit; and two transactions whose
    events interleave, so that taking the rest of one takes part of the other."""
    h = Harness(spark, postgresql_database, tmp_path, user=OTHER_USER, path=cycle_path, query_limit=2)
    h.create_usr()
    h.create_event_log()
    h.install("usr")
    usr = h.table("usr")
    with h.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age) VALUES (1, 'Ann', 'Lee', 30)"))
        conn.execute(text(f"UPDATE {usr} SET fname = 'Anne' WHERE idu = 1"))
        conn.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age) VALUES (2, 'Bob', 'Ray', 40)"))
    insert_usr(h, 3)

    # Two sessions at once: one, two, one, two, each insert logging 3 events.
    engine = create_engine(postgresql_database.url)
    try:
        with engine.connect() as first, engine.connect() as second:
            for conn, idu in ((first, 4), (second, 5), (first, 6), (second, 7)):
                conn.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age) VALUES ({idu}, 'a', 'b', 1)"))
            first.commit()
            second.commit()
    finally:
        engine.dispose()
    insert_usr(h, 8)

    assert drain(h) == [7, 3, 12, 3]
    assert adds(h) == {h.association(f"idu={n}"): 1 for n in range(1, 9)}
    assert set(h.statuses().values()) == {"S"}


def test_a_transaction_larger_than_query_limit_still_progresses(spark, cycle_path, postgresql_database, tmp_path):
    h = Harness(spark, postgresql_database, tmp_path, user=OTHER_USER, path=cycle_path, query_limit=4)
    h.create_usr()
    h.create_event_log()
    h.install("usr")
    insert_usr(h, *range(1, 11))
    insert_usr(h, 11)

    assert drain(h) == [30, 3]
    assert sum(adds(h).values()) == 11


def test_a_transaction_that_commits_after_the_window_is_planned_waits_whole_for_the_next(
    spark, postgresql_database, tmp_path,
):
    """A transaction running when the window is planned, whose record_ids lie inside it and past
    it, commits before the rows are read: none of its rows is read then, so no cycle publishes
    part of it (a field-style insert cut so gives the consumer two <add>s of one object). The
    window kept for a repeat keeps the snapshot it was planned in."""
    h = Harness(spark, postgresql_database, tmp_path, user=OTHER_USER, path="driver")
    h.create_usr()
    h.create_event_log()
    h.install("usr")
    usr = h.table("usr")
    engine = create_engine(postgresql_database.url)
    try:
        with engine.connect() as late, engine.connect() as other:
            other.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age) VALUES (2, 'b', 'b', 2)"))
            late.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age) VALUES (1, 'a', 'a', 1)"))
            other.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age) VALUES (3, 'c', 'c', 3)"))
            other.commit()
            window = h.window()
            assert window is not None and window.planned_in is not None
            h.output.mkdir(parents=True, exist_ok=True)
            (h.output / WINDOW_FILE).write_text(window_pin(window), encoding="utf-8")
            late.execute(text(f"UPDATE {usr} SET fname = 'al' WHERE idu = 1"))
            late.commit()
    finally:
        engine.dispose()
    late_ids = [rid for rid, status in h.statuses().items() if rid > 3 and rid not in range(7, 10)]
    assert window.lo == 1 and window.hi == 9 and late_ids == [4, 5, 6, 10]

    assert h.poll().events == 6
    assert [rid for rid, status in h.statuses().items() if status == "N"] == late_ids
    assert h.poll().events == 4
    assert adds(h) == {h.association(f"idu={n}"): 1 for n in (1, 2, 3)}
    assert [str(d) for d in verify(h.config, h.engine)] == []


WRITERS = 6
INSERTS_PER_WRITER = {"driver": 40, "spark": 6}
"""Per writer thread; fewer on the Spark path, where each cycle costs seconds."""


def write_concurrently(url: str, usr: str, inserts: int) -> None:
    """WRITERS sessions inserting one usr row per statement at once, autocommitting, so that
    their events interleave in record_id order."""
    engine = create_engine(DatabaseConfig(url=url).sqlalchemy_url(), isolation_level="AUTOCOMMIT",
                           pool_size=WRITERS)
    start = threading.Barrier(WRITERS)

    def write(writer: int) -> None:
        with engine.connect() as conn:
            start.wait()
            for n in range(inserts):
                idu = writer * 1000 + n
                conn.execute(text(f"INSERT INTO {usr} (idu, fname, lname, age, active, born) "
                                  f"VALUES ({idu}, 'f{idu}', 'l{idu}', {idu % 90}, TRUE, '2000-01-02 03:04:05')"))

    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(write, range(WRITERS)))
    finally:
        engine.dispose()


def test_mariadb_concurrent_inserts_are_each_one_add(spark, cycle_path, mariadb_database, tmp_path):
    """Six sessions' single-row inserts interleave their events; a window cut by query_limit
    keeps each statement's events together (the triggers' per-statement transaction_id), so
    every insert is one <add>, which the consumer takes."""
    h = Harness(spark, mariadb_database, tmp_path, user=OTHER_USER, path=cycle_path, query_limit=7, tables=())
    h.create_usr()
    h.create_event_log()
    h.install("usr")
    inserts = INSERTS_PER_WRITER[cycle_path]
    write_concurrently(mariadb_database.url, h.table("usr"), inserts)
    assert len(new_ids(h)) == WRITERS * inserts * 5

    for _ in range(WRITERS * inserts * 5 // 7 + 2):
        if h.poll().idle:
            break
    assert set(h.statuses().values()) == {"S"}
    assert sorted(adds(h).items()) == sorted(
        (h.association(f"idu={w * 1000 + n}"), 1) for w in range(WRITERS) for n in range(inserts))
    assert [str(d) for d in verify(h.config, h.engine)] == []


def test_future_mode_takes_the_rest_of_the_transaction_in_time_order(
    spark, cycle_path, postgresql_database, tmp_path
):
    """In (event_time, record_id) order one transaction's last event comes after another's:
    the window ends on it, and takes the other transaction whole on the way."""
    h = Harness(
        spark, postgresql_database, tmp_path, user=OTHER_USER, path=cycle_path, query_limit=1, future_events=True
    )
    h.create_usr()
    h.create_event_log()
    h.install("usr")
    insert_usr(h, 1)
    insert_usr(h, 2)
    insert_usr(h, 3)
    ids = new_ids(h)
    log = h.table("event_log")
    h.db.execute(
        f"UPDATE {log} SET event_time = now() - interval '1 minute' + (record_id - {ids[0]}) * interval '1 second'",
        # idu=1's last event now comes after all of idu=2's.
        f"UPDATE {log} SET event_time = now() - interval '1 minute' + interval '5500 milliseconds' "
        f"WHERE record_id = {ids[2]}",
    )

    assert drain(h) == [6, 3]
    assert adds(h) == {h.association(f"idu={n}"): 1 for n in (1, 2, 3)}


@spark_on_one_database("sqlite")
def test_future_mode_keeps_one_insert_together(harness):
    h = publisher(harness, query_limit=1, future_events=True)
    h.install("usr")
    insert_usr(h, 1)
    insert_usr(h, 2)
    assert drain(h) == [3, 3]
    assert adds(h) == {h.association("idu=1"): 1, h.association("idu=2"): 1}


@spark_on_one_database("postgresql")
def test_a_window_that_is_not_full_is_not_extended(harness):
    """Only a window that query_limit cut is looked past."""
    h = publisher(harness, query_limit=10)
    h.install("usr")
    insert_usr(h, 1, 2)
    window = h.window()
    assert window is not None and window.count == 6


# --- future events: event_time read as a time ---------------------------------------------------


def sqlite_time(moment: dt.datetime, form: str) -> str:
    """`moment` (UTC) written the way `form` says."""
    if form == "T Z":
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    if form == "+02:00":
        return (moment + dt.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S") + "+02:00"
    if form == "-05:30":
        return (moment - dt.timedelta(hours=5, minutes=30)).strftime("%Y-%m-%dT%H:%M:%S.123") + "-05:30"
    assert form == "plain"
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


ISO_FORMS = ["T Z", "+02:00", "-05:30"]


@pytest.mark.parametrize(("cycle_path", "form"), [("driver", f) for f in ISO_FORMS] + [("spark", "T Z")],
                         indirect=["cycle_path"])
def test_future_events_read_iso_forms_as_times(spark, cycle_path, sqlite_database, tmp_path, form):
    """As text, '…T01:00:00Z' sorts after every '… 05:00:00' of the day, and an offset is ignored:
    a past event was held back, a future one taken. Read as times, each is where it belongs."""
    h = Harness(spark, sqlite_database, tmp_path, path=cycle_path, future_events=True)
    h.create_usr()
    h.create_event_log()
    past, future, earliest = h.log(
        (4, "usr", "idu=1"),
        (4, "usr", "idu=2"),
        (4, "usr", "idu=3"),
    )
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    log = h.table("event_log")
    h.db.execute(
        # Two hours back: as text with +02:00 it reads as now, with T it reads as later today.
        f"UPDATE {log} SET event_time = '{sqlite_time(now - dt.timedelta(minutes=10), form)}' "
        f"WHERE record_id = {past}",
        # Two hours ahead: with -05:30 it reads, as text, as hours ago.
        f"UPDATE {log} SET event_time = '{sqlite_time(now + dt.timedelta(hours=2), form)}' "
        f"WHERE record_id = {future}",
        f"UPDATE {log} SET event_time = '{sqlite_time(now - dt.timedelta(minutes=20), 'plain')}' "
        f"WHERE record_id = {earliest}",
    )

    result = h.poll()
    assert result.events == 2
    assert h.published().describe() == [
        ("delete", h.association("idu=3"), earliest),
        ("delete", h.association("idu=1"), past),
    ]
    assert h.statuses() == {past: "S", future: "N", earliest: "S"}
    assert h.poll().idle


NO_TIMES = ["garbage", "", "now", "2460000.5", "20261123T010000", "1700000000"]


@pytest.mark.parametrize(("cycle_path", "value"), [("driver", v) for v in NO_TIMES] + [("spark", "garbage")],
                         indirect=["cycle_path"])
def test_future_events_reject_an_event_time_that_is_not_a_time(spark, cycle_path, sqlite_database, tmp_path, value):
    h = Harness(spark, sqlite_database, tmp_path, path=cycle_path, future_events=True)
    h.create_usr()
    h.create_event_log()
    bad, good = h.log((4, "usr", "idu=1"), (4, "usr", "idu=2"))
    h.db.execute(f"UPDATE {h.table('event_log')} SET event_time = '{value}' WHERE record_id = {bad}")

    result = h.poll()
    assert result.statuses == {"S": 1, "E": 1}
    assert h.statuses() == {bad: "E", good: "S"}
    (reject,) = h.rejects()
    assert reject["record_id"] == bad
    assert reject["reason"] == f"event_time {value!r} is not a time"
    assert h.published().describe() == [("delete", h.association("idu=2"), good)]
    assert h.poll().idle


def test_without_future_events_the_event_time_form_does_not_matter(spark, cycle_path, sqlite_database, tmp_path):
    h = Harness(spark, sqlite_database, tmp_path, path=cycle_path)
    h.create_usr()
    h.create_event_log()
    ids = h.log((4, "usr", "idu=1"), (4, "usr", "idu=2"))
    h.db.execute(f"UPDATE {h.table('event_log')} SET event_time = 'garbage' WHERE record_id = {ids[0]}")
    assert h.poll().statuses == {"S": 2}


def test_future_events_reject_an_infinite_postgresql_time(spark, cycle_path, postgresql_database, tmp_path):
    """The driver cannot hand over ±infinity: read as it was, it failed the whole cycle."""
    h = Harness(spark, postgresql_database, tmp_path, path=cycle_path, future_events=True)
    h.create_usr()
    h.create_event_log()
    future, past, good = h.log((4, "usr", "idu=1"), (4, "usr", "idu=2"), (4, "usr", "idu=3"))
    log = h.table("event_log")
    h.db.execute(
        f"UPDATE {log} SET event_time = 'infinity' WHERE record_id = {future}",
        f"UPDATE {log} SET event_time = '-infinity' WHERE record_id = {past}",
    )

    result = h.poll()
    assert result.statuses == {"S": 1, "E": 2}
    assert {r["record_id"]: r["reason"] for r in h.rejects()} == {
        future: "event_time 'infinity' is not a time",
        past: "event_time '-infinity' is not a time",
    }
    assert h.poll().idle

    h.reconfigure(future_events=False)
    again = h.log((4, "usr", "idu=4"))
    h.db.execute(f"UPDATE {log} SET event_time = 'infinity' WHERE record_id = {again[0]}")
    assert h.poll().statuses == {"S": 1}


# --- the window of a cycle that was not acknowledged ------------------------------------------


@spark_on_one_database("mariadb")
def test_a_window_kept_after_its_rows_were_acknowledged_gives_way_to_the_next(harness):
    """A crash between acknowledging and forgetting the window: its rows are no longer N."""
    h = publisher(harness)
    h.install("usr")
    insert_usr(h, 1)
    kept = window_pin(h.window())
    h.poll()
    assert not (h.output / WINDOW_FILE).exists()
    (h.output / WINDOW_FILE).write_text(kept, encoding="utf-8")
    insert_usr(h, 2)

    assert h.poll().events == 3
    assert adds(h) == {h.association("idu=1"): 1, h.association("idu=2"): 1}
    assert not (h.output / WINDOW_FILE).exists()
    assert h.poll().idle


@pytest.mark.parametrize(("database", "cycle_path"), [(d, "driver") for d in DIALECTS], indirect=True)
@pytest.mark.parametrize(
    ("kept", "says"),
    [
        ("{not json", "does not hold a cycle's window"),
        ('{"lo": 1, "hi": 3}', "does not hold a cycle's window"),
        (
            '{"table": "other_log", "schema": null, "lo": 1, "hi": 3, "cutoff_record_id": null}',
            "keeps the unacknowledged rows 1..3 of event log 'other_log'",
        ),
    ],
)
def test_a_kept_window_that_cannot_be_used_stops_the_cycle_with_what_to_do(harness, kept, says):
    h = publisher(harness)
    h.install("usr")
    insert_usr(h, 1)
    h.output.mkdir(parents=True, exist_ok=True)
    (h.output / WINDOW_FILE).write_text(kept, encoding="utf-8")

    with pytest.raises(StageFailedError, match=re.escape(says)) as failure:
        h.poll()
    assert str(h.output / WINDOW_FILE) in str(failure.value)
    assert set(h.statuses().values()) == {"N"}
    assert h.published().describe() == []
