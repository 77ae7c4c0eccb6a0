"""Snapshots: every row a table held before its capture was installed reaches the consumer
once, as an `<add>` read back when it is published, consistent with the writers that change
the table meanwhile; on keys of unusual types, logical classes, and a snapshot started again
after it stopped between two chunks."""
from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time

import pytest
from harness import Harness, drain
from oracle.precedence import decide
from schemas import OTHER_USER
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from test_logical_classes import CLASSES, _ddl

from publisher.rules.precedence import CurrentRow
from publisher.service.mirror import verify
from publisher.snapshots.snapshot import SnapshotError, snapshot

USR = "CREATE TABLE {t} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), age INTEGER)"


def make(spark, database, tmp_path, ddl: str = USR, path: str = "driver", **settings) -> Harness:
    """A publisher of the tables its triggers are on; `usr` made, not yet captured."""
    h = Harness(spark, database, tmp_path, user=OTHER_USER, path=path, tables=(), **settings)
    h.db.execute(ddl.format(t=h.table("usr")))
    return h


def fill(h: Harness, rows: int, first: int = 1) -> None:
    with h.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {h.table('usr')} (idu, fname, age) VALUES (:idu, :fname, :age)"),
                     [{"idu": i, "fname": f"n{i}", "age": None if i % 7 == 0 else i % 90}
                      for i in range(first, first + rows)])


def assert_mirrored(h: Harness) -> None:
    """No event left N, none rejected, and the consumer mirror equal to the tables."""
    statuses = set(h.statuses().values())
    assert "N" not in statuses
    assert "E" not in statuses, h.rejects()
    differences = [str(d) for d in verify(h.config, h.engine)]
    assert differences == [], differences[:10]


def snapshot_events(h: Harness) -> collections.Counter[tuple[str, str]]:
    """(table, table_key) of each row query-back a snapshot logged, with how often."""
    rows = h.db.rows(f"SELECT table_name, table_key FROM {h.table('event_log')} "
                     "WHERE event_type = 5 AND perpetrator = 'publisher snapshot'")
    return collections.Counter((t, k) for t, k in rows)


def operations(h: Harness, tag: str | None = None) -> collections.Counter[str]:
    """The associations of the operations published since the last look (those of `tag`)."""
    return collections.Counter(op.findtext("association").strip() for op in h.published().operations
                               if tag is None or op.tag == tag)


@pytest.mark.parametrize("style", ["field", "row"])
def test_rows_from_before_the_capture_are_published_once_each_then_followed(
    style, spark, database, tmp_path,
) -> None:
    """With `insert_row_operation = "add"`, as for a consumer that starts empty."""
    h = make(spark, database, tmp_path, insert_row_operation="add")
    fill(h, 30)
    h.install("usr", style=style)
    drain(h)
    assert h.published().operations == []  # no events: the consumer knows none of the rows
    h.output.mkdir(parents=True, exist_ok=True)
    assert len(verify(h.config, h.engine)) >= 30
    result = snapshot(h.config, h.engine)
    assert result.summary()["events"] == 30 and result.tables["usr"].total == 30
    drain(h)
    assert operations(h, "add") == {h.association(f"idu={i}"): 1 for i in range(1, 31)}
    assert_mirrored(h)
    change_some(h)


def change_some(h: Harness) -> None:
    """Updates, deletes and re-inserts after a snapshot, drained: the consumer still equal."""
    usr = h.table("usr")
    h.db.execute(f"UPDATE {usr} SET fname = 'changed', age = NULL WHERE idu <= 5",
                 f"DELETE FROM {usr} WHERE idu BETWEEN 10 AND 14",
                 f"INSERT INTO {usr} (idu, fname, age) VALUES (12, 'again', 3), (99, 'new', NULL)")
    drain(h)
    assert_mirrored(h)


def _writer(h: Harness, part: int, parts: int, keys: int, stop: threading.Event, errors: list) -> None:
    """Updates, deletes and re-inserts random rows of its own share of the keys, one
    transaction each, until `stop`; SQLite's lock held too long by another is waited out."""
    rng = random.Random(part)
    usr = h.table("usr")
    mine = [k for k in range(1, keys + 1) if k % parts == part]
    gone: set[int] = set()
    while not stop.is_set():
        key = rng.choice(mine)
        if key in gone:
            statement, params = f"INSERT INTO {usr} (idu, fname, age) VALUES (:k, :f, NULL)", {"f": f"back{key}"}
        elif rng.random() < 0.3:
            statement, params = f"DELETE FROM {usr} WHERE idu = :k", {}
        else:
            statement, params = f"UPDATE {usr} SET fname = :f, age = :a WHERE idu = :k", {
                "f": f"w{part}-{rng.randrange(10**6)}", "a": rng.choice([None, rng.randrange(100)])}
        try:
            with h.engine.begin() as conn:
                conn.execute(text(statement), {"k": key, **params})
        except DBAPIError as exc:
            if h.dialect == "sqlite" and "locked" in str(exc):
                continue
            errors.append(exc)
            return
        if statement.startswith("DELETE"):
            gone.add(key)
        elif statement.startswith("INSERT"):
            gone.discard(key)
        stop.wait(0.002)


def _snapshot_under_writers(h: Harness, chunk_rows: int, cycles_meanwhile: bool, rows: int = 2000) -> None:
    fill(h, rows)
    h.install("usr", style=h.style)  # type: ignore[attr-defined]
    stop, errors, results = threading.Event(), [], []
    writers = [threading.Thread(target=_writer, args=(h, part, 4, rows, stop, errors)) for part in range(4)]

    def run_snapshot() -> None:
        try:
            results.append(snapshot(h.config, h.engine, chunk_rows=chunk_rows))
        except Exception as exc:  # noqa: BLE001 - reported by the test's own thread
            errors.append(exc)

    taker = threading.Thread(target=run_snapshot)
    for thread in writers:
        thread.start()
    taker.start()
    if cycles_meanwhile:
        while taker.is_alive():
            h.poll()
    taker.join()
    stop.set()
    for thread in writers:
        thread.join()
    assert errors == []
    (result,) = results
    # Rows the writers deleted before the snapshot reached them are not logged, nor those they
    # inserted again ahead of it; those inserted again behind it are.
    assert 0 < result.tables["usr"].rows <= rows and result.tables["usr"].total <= rows
    assert sum(snapshot_events(h).values()) == result.tables["usr"].rows
    assert max(snapshot_events(h).values()) == 1
    drain(h, cycles=50)
    assert_mirrored(h)


@pytest.mark.parametrize("style", ["field", "row"])
def test_a_snapshot_under_writers_and_cycles_ends_equal(style, spark, database, tmp_path) -> None:
    h = make(spark, database, tmp_path, query_limit=300)
    h.style = style  # type: ignore[attr-defined]
    _snapshot_under_writers(h, chunk_rows=50, cycles_meanwhile=True)


def test_a_snapshot_under_writers_ends_equal_on_the_spark_path(spark, postgresql_database, tmp_path) -> None:
    h = make(spark, postgresql_database, tmp_path, path="spark")
    h.style = "row"  # type: ignore[attr-defined]
    _snapshot_under_writers(h, chunk_rows=25, cycles_meanwhile=False, rows=600)


def test_a_row_query_back_before_a_delete_leaves_the_insert_after_it_to_a_later_window() -> None:
    """A snapshot's event can fall between a delete and the insert of the same key: when the
    insert is beyond the window, the delete stands and the insert publishes the row later."""
    events = [{"record_id": i, "position_time": None, "class_name": "usr", "canonical_key": "idu=1",
               "event_type_code": t, "attr_name": a, "value_type": "string", "old_text": None, "new_text": n}
              for i, (t, a, n) in enumerate([(5, None, None), (4, None, None), (1, "fname", "A")], 1)]
    row = CurrentRow({"fname": "A"})
    assert [d.outcome for d in decide(events[:2], row)] == ["redundant", "survives"]
    assert [d.outcome for d in decide(events, row)] == ["wins", "redundant", "redundant"]


def test_a_delete_not_yet_committed_is_waited_for_not_logged_around(spark, database, tmp_path) -> None:
    """A delete whose event took its record_id before the snapshot read the row: the snapshot
    waits for it and passes the row over, so no snapshot event falls between that delete and
    the key's insert after it (published ahead of that insert's <add>, it would make the
    consumer refuse the <add>)."""
    h = make(spark, database, tmp_path)
    fill(h, 10)
    h.install("usr")
    usr, results = h.table("usr"), []
    with h.engine.connect() as writer:
        writer.execute(text(f"DELETE FROM {usr} WHERE idu = 5"))
        taker = threading.Thread(target=lambda: results.append(snapshot(h.config, h.engine, chunk_rows=3)))
        taker.start()
        taker.join(1.0)
        writer.commit()
    taker.join()
    h.db.execute(f"INSERT INTO {usr} (idu, fname) VALUES (5, 'again')")
    assert results and results[0].tables["usr"].rows == 9
    logged = [t for (t,) in h.db.rows(f"SELECT event_type FROM {h.table('event_log')} "
                                      "WHERE table_key = 'idu=5' ORDER BY record_id")]
    assert logged == [4, 1]
    drain(h)
    assert_mirrored(h)


@pytest.mark.parametrize("dialect", ["postgresql", "mariadb"])
def test_in_a_deadlock_with_the_application_the_snapshot_gives_way(spark, request, tmp_path, dialect) -> None:
    """The application holds a row the chunk waits for, then wants a row the chunk has share-
    locked: the chunk rolls back and is tried again, and every statement of the application
    succeeds."""
    h = make(spark, request.getfixturevalue(f"{dialect}_database"), tmp_path)
    fill(h, 20)
    h.install("usr")
    usr, results = h.table("usr"), []
    with h.engine.connect() as application:
        application.execute(text(f"UPDATE {usr} SET fname = 'first' WHERE idu = 10"))
        taker = threading.Thread(target=lambda: results.append(snapshot(h.config, h.engine, chunk_rows=20)))
        taker.start()
        time.sleep(0.1)  # the chunk has share-locked rows 1..9 and waits for row 10
        application.execute(text(f"UPDATE {usr} SET fname = 'second' WHERE idu = 3"))
        application.commit()
    taker.join(60)
    assert results and results[0].tables["usr"].rows == 20
    assert h.db.rows(f"SELECT fname FROM {usr} WHERE idu IN (3, 10) ORDER BY idu") == [("second",), ("first",)]
    drain(h)
    assert_mirrored(h)


ODD_TEXTS = ("a'b", "c,d", "e+f", "g=h", "plain", "x\"y", "")
"""Every character a table_key quotes, and the empty text."""

ODD_KEYS = {
    "postgresql": (
        "CREATE TABLE {t} (u uuid, d date, s text, note text, n integer, PRIMARY KEY (u, d, s))",
        "CREATE TABLE {l} (u uuid, s text, PRIMARY KEY (u, s))",
        lambda i: f"'00000000-0000-0000-0000-00000000000{i}'",
    ),
    "mariadb": (
        "CREATE TABLE {t} (u CHAR(36), d DATE, s VARCHAR(64), note TEXT, n INTEGER, PRIMARY KEY (u, d, s))",
        "CREATE TABLE {l} (u CHAR(36), s VARCHAR(64), PRIMARY KEY (u, s))",
        lambda i: f"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1{i}'",
    ),
    "sqlite": (
        "CREATE TABLE {t} (u TEXT, d REAL, s TEXT, note TEXT, n INTEGER, PRIMARY KEY (u, d, s))",
        "CREATE TABLE {l} (u TEXT, s TEXT, PRIMARY KEY (u, s))",
        lambda i: f"'k{i},=+'",
    ),
}
DAYS = {"postgresql": ("'2026-03-01'", "'1970-01-01'"), "mariadb": ("'2026-03-01'", "'1970-01-01'"),
        "sqlite": ("0.1 + 0.2", "1e20", "-2.5", "10.0")}


@pytest.mark.parametrize("style", ["field", "row"])
def test_compound_keys_of_unusual_types_are_logged_once_per_row(style, spark, database, tmp_path) -> None:
    """Chunks of 4 rows end inside runs of equal first key columns, so a chunk's next one
    begins after a compound key; SQLite's REAL key column is compared as its text."""
    table_ddl, link_ddl, first = ODD_KEYS[database.dialect]
    h = make(spark, database, tmp_path, ddl=table_ddl)
    h.db.execute(link_ddl.format(l=h.table("link")))
    values = []
    for i in range(3):
        for day in DAYS[h.dialect]:
            for j, s in enumerate(ODD_TEXTS):
                note = "NULL" if j % 2 else "'n,o=t+e'"
                number = "NULL" if j % 3 else str(j)
                values.append(f"({first(i)}, {day}, '{s.replace(chr(39), chr(39) * 2)}', {note}, {number})")
    h.db.execute(f"INSERT INTO {h.table('usr')} (u, d, s, note, n) VALUES {', '.join(values)}",
                 f"INSERT INTO {h.table('link')} (u, s) SELECT DISTINCT u, s FROM {h.table('usr')}")
    h.install("usr", "link", style=style)
    result = snapshot(h.config, h.engine, chunk_rows=4)
    links = 3 * len(ODD_TEXTS)
    assert {n: t.total for n, t in result.tables.items()} == {"usr": len(values), "link": links}
    logged = snapshot_events(h)
    assert max(logged.values()) == 1
    assert collections.Counter(t for t, _ in logged) == {"usr": len(values), "link": links}
    drain(h)
    published = operations(h)  # the vendor's <modify> of each row, by default
    assert len(published) == len(values) + links and set(published.values()) == {1}
    assert_mirrored(h)


def test_a_logical_class_snapshot_carries_its_childrens_values(spark, database, tmp_path) -> None:
    h = Harness(spark, database, tmp_path, user=OTHER_USER, tables=())
    h.config = dataclasses.replace(h.config, classes=CLASSES)
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    q = {n: h.table(n) for n in ("usr", "usr_phone", "grp", "grp_member")}
    h.db.execute(f"INSERT INTO {q['usr']} (idu, fname, manager) VALUES (1, 'Ann', NULL), (2, 'Bo', 1), (3, 'Cy', 9)",
                 f"INSERT INTO {q['usr_phone']} (idu, phone, kind) VALUES (1, '555-1', 'home'), (1, '555-2', NULL), "
                 "(2, '555-3', NULL)",
                 f"INSERT INTO {q['grp']} (gid, name) VALUES (7, 'staff'), (8, NULL)",
                 f"INSERT INTO {q['grp_member']} (gid, idu) VALUES (7, 1), (7, 2), (7, 99)")
    h.install("usr", "grp")
    with pytest.raises(SnapshotError, match="usr_phone.*child table of logical class 'usr'"):
        snapshot(h.config, h.engine, tables=["usr_phone"])
    assert snapshot_events(h) == {}
    result = snapshot(h.config, h.engine, chunk_rows=2)
    assert {n: t.total for n, t in result.tables.items()} == {"usr": 3, "grp": 2}
    drain(h)
    published = {op.findtext("association").strip(): op for op in h.published().operations}
    ann = published[h.association("idu=1")]
    assert sorted(v.text for a in ann if a.get("attr-name") == "phone" for v in a.iter("value")) == ["555-1", "555-2"]
    staff = published[h.association("gid=7", table="grp")]
    assert len([v for a in staff if a.get("attr-name") == "member" for v in a.iter("value")]) == 3
    assert_mirrored(h)


def test_where_dry_run_and_a_refused_condition(spark, database, tmp_path) -> None:
    h = make(spark, database, tmp_path)
    fill(h, 40)
    h.install("usr")
    dry = snapshot(h.config, h.engine, where="age > 20", dry_run=True)
    assert dry.summary() == {"snapshot": "status mode", "dry_run": True,
                             "rows": {"usr": len([i for i in range(1, 41) if i % 7 and i % 90 > 20])}}
    assert snapshot_events(h) == {}
    with pytest.raises(SnapshotError) as refused:
        snapshot(h.config, h.engine, where="no_such_column = 1")
    assert "table usr" in str(refused.value) and "no_such_column" in str(refused.value)
    assert snapshot_events(h) == {}
    result = snapshot(h.config, h.engine, where="idu <= 10 AND age IS NOT NULL", chunk_rows=3)
    assert result.tables["usr"].rows == 9
    assert sorted(snapshot_events(h)) == sorted(("usr", f"idu={i}") for i in range(1, 11) if i != 7)
    drain(h)
    assert sorted(operations(h)) == sorted(h.association(f"idu={i}") for i in range(1, 11) if i != 7)


class Crash(Exception):
    pass


def test_a_snapshot_stopped_between_chunks_continues_after_its_last(spark, database, tmp_path) -> None:
    h = make(spark, database, tmp_path)
    fill(h, 23)
    h.install("usr", style="row")
    chunks = []

    def crash_after_two(table: str, rows: int, total: int, seconds: float) -> None:
        chunks.append(rows)
        if len(chunks) == 2:
            raise Crash

    with pytest.raises(Crash):
        snapshot(h.config, h.engine, chunk_rows=5, progress=crash_after_two)
    assert sum(snapshot_events(h).values()) == 10
    resumed = snapshot(h.config, h.engine, chunk_rows=5, progress=lambda *progress: chunks.append(progress[1]))
    assert resumed.tables["usr"].resumed_after == "idu=10"
    assert (resumed.tables["usr"].rows, resumed.tables["usr"].total) == (13, 23)
    assert chunks == [5, 10, 15, 20, 23]
    assert snapshot_events(h) == {("usr", f"idu={i}"): 1 for i in range(1, 24)}
    again = snapshot(h.config, h.engine, chunk_rows=5)  # finished: a new snapshot, from the first row
    assert again.tables["usr"].resumed_after is None and again.tables["usr"].rows == 23
    drain(h)
    assert_mirrored(h)


def test_progress_lines_say_rows_rate_and_time_left_and_never_more_than_all_of_a_total():
    """A line at most every few seconds, and one when the table is done; rows inserted while the
    snapshot runs take it past the count it began with, which is then named as such."""
    from publisher.snapshots.snapshot import ProgressLines

    lines: list[str] = []
    progress = ProgressLines(lines.append)
    progress("usr", 250, 1000, 2.0)
    progress("usr", 500, 1000, 4.0)
    progress("usr", 1200, 1000, 8.0)
    progress("usr", 1200, 1000, 8.1)  # the last chunk, empty: the table is done, as said already
    assert lines == ["snapshot usr: 250 of 1,000 rows, 125 rows/s, about 6 s left",
                     "snapshot usr: 1,200 rows (1,000 when it began), 150 rows/s"]
