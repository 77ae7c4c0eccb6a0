"""`publisher snapshot --direct`: the rows a table holds written as operations by the snapshot
itself, consistent with the writers that change the table meanwhile; rows with events waiting,
views and logical classes logged as before; killed at the worst moments and started again.

The oracles are the consumer mirror (`verify`), the documents (each object's operations and
their event-ids) and the event log (the chunks' own events, the rows logged)."""
from __future__ import annotations

import collections
import functools
import threading
import time

import pytest
from conftest import DIALECTS, on_each_database_in_turn
from harness import drain
from sqlalchemy import text
from test_crash import MARKER_TIMEOUT, kill_session
from test_snapshot import _writer, assert_mirrored, change_some, fill, make, operations
from test_snapshot_cli import (
    kill_at_chunk,
    poll_until_drained,
    populated,
    run_snapshot,
    snapshot_process,
    write_config,
)

from publisher.cli import main
from publisher.locking.lock import PublisherLock
from publisher.snapshots.snapshot import SnapshotError, SnapshotResult, snapshot, snapshot_directly


def logged_rows(h) -> collections.Counter[tuple[str, str]]:
    """(table, table_key) of each row query-back the snapshot logged and no cycle published yet."""
    rows = h.db.rows(f"SELECT table_name, table_key FROM {h.table('event_log')} "
                     "WHERE event_type = 5 AND perpetrator = 'publisher snapshot' AND status = 'N'")
    return collections.Counter((t, k) for t, k in rows)


def under_writers(h, style: str, rows: int, writers: int, **direct) -> SnapshotResult:
    """`rows` rows filled and captured, then a direct snapshot while `writers` threads update,
    delete and re-insert them; no writer's statement failed."""
    fill(h, rows)
    h.install("usr", style=style)
    stop, errors, results = threading.Event(), [], []
    threads = [threading.Thread(target=_writer, args=(h, part, writers, rows, stop, errors)) for part in range(writers)]
    for thread in threads:
        thread.start()
    try:
        results.append(snapshot_directly(h.config, h.engine, **direct))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    (result,) = results
    return result


def written_directly(output) -> collections.Counter[str]:
    """How often each object was written by a direct snapshot (negative event-ids), in `output`'s documents."""
    from lxml import etree

    written: collections.Counter[str] = collections.Counter()
    for path in sorted(output.glob("*.xml")):
        for op in etree.parse(str(path)).getroot().iter("add", "modify"):
            if int(op.get("event-id")) < 0:
                written[op.findtext("association").strip()] += 1
    return written


def chunk_events(h) -> list[tuple[str, str]]:
    """The chunks' own events: S already, one per chunk written directly."""
    return h.db.rows(f"SELECT status, table_key FROM {h.table('event_log')} "
                     "WHERE event_type = 5 AND perpetrator = 'publisher snapshot' AND status = 'S' ORDER BY record_id")


@pytest.mark.parametrize("style", ["field", "row"])
def test_rows_from_before_the_capture_are_written_directly_then_followed(style, spark, database, tmp_path):
    h = make(spark, database, tmp_path, insert_row_operation="add")
    fill(h, 45)
    h.install("usr", style=style)
    result = snapshot_directly(h.config, h.engine, chunk_rows=20)
    summary = result.summary()
    assert summary["published"] == 45 and summary["events"] == 0
    assert summary["tables"]["usr"] == {"rows": 45, "total": 45, "resumed_after": None, "published": 45}
    assert [status for status, _ in chunk_events(h)] == ["S"] * 3
    assert [key for _, key in chunk_events(h)] == ["idu=20", "idu=40", "idu=45"]
    published = h.published().operations
    assert operations(h) == collections.Counter()  # looked at once above
    assert collections.Counter(op.findtext("association").strip() for op in published) == {
        h.association(f"idu={i}"): 1 for i in range(1, 46)}
    assert {op.tag for op in published} == {"add"}
    ids = [int(op.get("event-id")) for op in published]
    assert all(i < 0 for i in ids) and len(set(ids)) == 45, "negative, never a record_id, each its own"
    assert [op.findtext("association").strip() for op in published][:3] == [
        h.association(f"idu={i}") for i in (1, 2, 3)], "key order"
    assert_mirrored(h)
    change_some(h)


def test_rows_with_events_waiting_are_logged_behind_them(spark, database, tmp_path):
    """A row changed since the capture, whose event no cycle has published yet, goes the logged
    way: its snapshot event follows its change. The consumer gets the others at once."""
    h = make(spark, database, tmp_path)
    fill(h, 12)
    h.install("usr", style="field")
    usr = h.table("usr")
    h.db.execute(f"UPDATE {usr} SET fname = 'before' WHERE idu IN (3, 8)", f"DELETE FROM {usr} WHERE idu = 5")
    result = snapshot_directly(h.config, h.engine)
    assert result.summary()["events"] == 2 and result.summary()["published"] == 9
    assert logged_rows(h) == {("usr", "idu=3"): 1, ("usr", "idu=8"): 1}
    assert set(operations(h)) == {h.association(f"idu={i}") for i in range(1, 13) if i not in (3, 5, 8)}
    drain(h)
    assert_mirrored(h)


@pytest.mark.parametrize("style", ["field", "row"])
def test_a_direct_snapshot_under_writers_ends_equal(style, spark, database, tmp_path):
    """Writers update, delete and re-insert rows while the snapshot writes; once the log is
    drained the consumer equals the table."""
    h = make(spark, database, tmp_path, query_limit=300)
    rows = 1500
    result = under_writers(h, style, rows, 4, chunk_rows=40)
    usr = result.tables["usr"]
    assert 0 < usr.published <= usr.rows <= rows
    assert sum(logged_rows(h).values()) == usr.rows - usr.published
    drain(h, cycles=50)
    assert_mirrored(h)


def test_a_logical_class_is_logged_beside_a_table_written_directly(spark, database, tmp_path):
    """grp's members are rows of another table, read when its events are published: grp goes
    the logged way; usr, a plain table here, is written directly."""
    import dataclasses

    from harness import Harness
    from schemas import OTHER_USER
    from test_logical_classes import CLASSES, _ddl

    h = Harness(spark, database, tmp_path, user=OTHER_USER, tables=())
    h.config = dataclasses.replace(h.config, classes={"grp": CLASSES["grp"]})
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname, manager) VALUES (1, 'Ann', NULL), (2, 'Bo', 1)",
                 f"INSERT INTO {h.table('grp')} (gid, name) VALUES (7, 'staff'), (8, NULL)",
                 f"INSERT INTO {h.table('grp_member')} (gid, idu) VALUES (7, 1), (7, 2), (8, 2)")
    h.install("usr", "grp")
    result = snapshot_directly(h.config, h.engine)
    assert (result.tables["grp"].published, result.tables["grp"].rows) == (0, 2)
    assert (result.tables["usr"].published, result.tables["usr"].rows) == (2, 2)
    drain(h)
    assert_mirrored(h)


def test_what_the_direct_path_refuses(spark, database, tmp_path):
    h = make(spark, database, tmp_path)
    fill(h, 3)
    h.install("usr", style="field")
    with pytest.raises(SnapshotError, match="--chunk-rows 2000000: the direct path takes at most 1,048,576"):
        snapshot_directly(h.config, h.engine, chunk_rows=2_000_000)
    assert h.published().operations == []


def test_the_command_refuses_a_subscriber_and_the_formats(database, tmp_path, capsys):
    config = populated(database, tmp_path / "publisher", users=3)
    assert main(["snapshot", "-c", str(config), "--direct", "--subscriber", "hr"]) == 2
    assert "--direct with --subscriber hr: a subscriber's documents are written by its check-outs" in \
        capsys.readouterr().err
    formats = write_config(database, tmp_path / "formats", '[output.change_tables]\nenabled = true\n')
    assert main(["snapshot", "-c", str(formats), "--direct"]) == 2
    assert "change tables or messages are on" in capsys.readouterr().err
    assert main(["snapshot", "-c", str(config), "--direct", "--dry-run"]) == 0
    assert '"dry_run": true' in capsys.readouterr().out
    assert main(["snapshot", "-c", str(config), "--parallel-rows", "10"]) == 2
    assert "snapshot --parallel-rows: only a snapshot written directly (--direct)" in capsys.readouterr().err
    assert not database.rows(f"SELECT 1 FROM {database.qualified('event_log')}"), "nothing logged"


def test_a_held_lock_stops_the_direct_path_before_it_reads(database, tmp_path, capsys):
    """Another publisher writing the status mode's documents: a direct snapshot would write
    among its cycles, so it exits (when_locked = "exit") naming the holder."""
    config_path = populated(database, tmp_path / "publisher", users=3)
    text_now = config_path.read_text(encoding="utf-8")
    config_path.write_text(text_now.replace("[publisher]\n", '[publisher]\nwhen_locked = "exit"\n'), encoding="utf-8")
    from publisher.config.loading import load_config

    config = load_config(config_path)
    with PublisherLock(config) as lock:
        assert lock.held
        assert main(["snapshot", "-c", str(config_path), "--direct"]) == 1
    assert "is already being published by" in capsys.readouterr().err
    assert not list((tmp_path / "publisher").rglob("*.xml"))
    assert not database.rows(f"SELECT 1 FROM {database.qualified('event_log')}"), "nothing logged"


@pytest.mark.process
def test_a_direct_snapshot_killed_at_each_chunk_continues_and_ends_equal(spark, database, tmp_path, capsys):
    """Killed after each of its first chunks, writers changing rows between the runs: every run
    continues after the last chunk it committed, no object is written twice, and once the log
    is drained the consumer equals the tables."""
    config = populated(database, tmp_path / "publisher")
    usr = database.qualified("usr")
    for run in range(1, 5):  # member's 12 rows in three chunks, then usr's first
        kill_at_chunk(config, tmp_path / f"m{run}", "--direct", "--chunk-rows", "5")
    database.execute(f"DELETE FROM {usr} WHERE idu = 15", f"INSERT INTO {usr} VALUES (99, 'new', 'row')",
                     f"UPDATE {usr} SET fname = 'changed' WHERE idu IN (2, 18)")
    summary = run_snapshot(config, "--direct", "--chunk-rows", "5")
    assert summary["tables"]["usr"]["resumed_after"] == "idu=5"
    assert summary["tables"]["member"]["rows"] == 0 and summary["tables"]["usr"]["rows"] == 15
    poll_until_drained(database, config)
    written = written_directly(tmp_path / "publisher" / "out")
    assert written and max(written.values()) == 1, written.most_common(3)
    assert main(["verify", "-c", str(config)]) == 0, capsys.readouterr()


@pytest.mark.process
def test_a_direct_snapshot_killed_between_its_documents_and_its_commit_loses_nothing(
    spark, database, tmp_path, capsys,
):
    """The worst moment: a chunk's documents written, its progress not committed. The chunk is
    written again when the snapshot continues (the same rows, under new event-ids: a <modify>
    that replaces every attribute, applied twice to the same effect)."""
    config = populated(database, tmp_path / "publisher")
    markers = tmp_path / "m"
    markers.mkdir()
    process = snapshot_process(config, "--direct", "--chunk-rows", "5", failpoint="write", markers=markers)
    try:
        deadline = time.monotonic() + MARKER_TIMEOUT
        while not (markers / "write.reached").exists():
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        kill_session(process.pid)
        process.wait(timeout=30)
    database.execute(f"UPDATE {database.qualified('member')} SET idg = 'moved' WHERE idu = 2 AND idg = 'z'")
    run_snapshot(config, "--direct", "--chunk-rows", "5")
    poll_until_drained(database, config)
    assert main(["verify", "-c", str(config)]) == 0, capsys.readouterr()


def test_waiting_keys_are_read_as_the_cycle_reads_them(spark, database, tmp_path):
    """An event whose table_name is spelled in another case, or whose key is spelled another way,
    still holds its row back; an event of another table does not."""
    h = make(spark, database, tmp_path)
    fill(h, 4)
    h.install("usr", style="field")
    log = h.table("event_log")
    with h.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {log} (status, event_type, perpetrator, table_name, table_key) "
                          "VALUES ('N', 5, 'someone', 'USR', 'idu = 02'), ('N', 5, 'someone', 'other', 'idu=3')"))
    result = snapshot_directly(h.config, h.engine)
    assert result.tables["usr"].published == 3
    assert logged_rows(h) == {("usr", "idu=2"): 1}


# --- a large table in key ranges, taken at once by Spark's tasks ----------------------------------

def ranges_of(h) -> list[tuple]:
    return h.db.rows(f"SELECT part, after_key, upto_key, last_key, finished_at IS NOT NULL "
                     f"FROM {h.table('event_log_snapshot_range')} ORDER BY part")


@pytest.mark.parametrize("style", ["field", "row"])
def test_a_large_table_is_taken_in_key_ranges_on_spark_under_writers(style, spark, database, tmp_path):
    """Key ranges taken at once by Spark's tasks, each chunk by chunk, while writers change the
    rows: every range ends, each row is written at most once, and once the log is drained the
    consumer equals the table."""
    h = make(spark, database, tmp_path, query_limit=300)
    rows = 900
    result = under_writers(h, style, rows, 3, chunk_rows=40, spark=lambda: spark, parallel_rows=100)
    cut = ranges_of(h)
    assert len(cut) >= 2 and all(finished for *_, finished in cut), cut
    assert [after for _, after, *_ in cut[1:]] == [upto for _, _, upto, *_ in cut[:-1]], "ranges meet"
    assert cut[0][1] is None and cut[-1][2] is None, "from the first row to the last"
    usr = result.tables["usr"]
    assert 0 < usr.published <= usr.rows <= rows
    assert sum(logged_rows(h).values()) == usr.rows - usr.published
    written = collections.Counter(op.findtext("association").strip() for op in h.published().operations)
    assert max(written.values()) == 1
    drain(h, cycles=50)
    assert_mirrored(h)


def test_key_ranges_cut_on_a_compound_key_meet_without_a_gap(spark, database, tmp_path):
    """A key of text and date, with texts that need quoting: the bounds are keys, each range
    reads after its start up to its end inclusive, and every row is written exactly once."""
    h = make(spark, database, tmp_path,
             ddl="CREATE TABLE {t} (code VARCHAR(16) NOT NULL, born DATE NOT NULL, note VARCHAR(20), "
                 "PRIMARY KEY (code, born))")
    usr = h.table("usr")
    h.db.execute(*(f"INSERT INTO {usr} (code, born, note) VALUES ('{c}', '2020-01-{d:02d}', NULL)"
                   for c in ("a,1", "b=2", "c 3", "d'4".replace("'", "''")) for d in range(1, 29)))
    h.install("usr", style="row")
    result = snapshot_directly(h.config, h.engine, chunk_rows=10, spark=lambda: spark, parallel_rows=20)
    assert result.tables["usr"].published == 112 and len(ranges_of(h)) >= 2
    written = collections.Counter(op.findtext("association").strip() for op in h.published().operations)
    assert len(written) == 112 and set(written.values()) == {1}
    assert_mirrored(h)


@pytest.mark.parametrize(("database", "taker"), [(d, "threads") for d in DIALECTS]
                         + on_each_database_in_turn([("tasks",)], first="postgresql"), indirect=["database"])
@pytest.mark.process
def test_key_ranges_killed_while_they_are_taken_continue_each_after_its_last_chunk(database, tmp_path, capsys, taker):
    """SIGKILL while the driver's threads (a local master) or Spark's tasks (`small_cycle_events =
    0`) take their ranges (the process group: driver, JVM, workers); the run after continues
    every unfinished range where it stopped, none writes a row twice, and the consumer ends
    equal."""
    config = populated(database, tmp_path / "publisher", users=400,
                       spark="small_cycle_events = 0\n" if taker == "tasks" else "")
    options = ("--direct", "--table", "usr", "--chunk-rows", "30", "--parallel-rows", "100")
    ranges = f"SELECT part, last_key, finished_at FROM {database.qualified('event_log_snapshot_range')}"

    def takers() -> int:
        """Every range recorded: each runs at once (a thread, or a task of as many as the cores)."""
        try:
            return max(1, len(database.rows(ranges)))
        except Exception:  # noqa: BLE001 - the range table is made by the snapshot itself
            return 1

    kill_at_chunk(config, tmp_path / "m1", *options, takers=takers)
    cut = database.rows(ranges)
    assert len(cut) >= 2 and any(finished is None for *_, finished in cut)
    usr = database.qualified("usr")
    database.execute(f"UPDATE {usr} SET fname = 'changed' WHERE idu IN (1, 200, 399)",
                     f"DELETE FROM {usr} WHERE idu = 300")
    summary = run_snapshot(config, *options)
    assert summary["tables"]["usr"]["rows"] > 0
    assert summary["tables"]["usr"]["ranges"] == {
        "count": len(cut), "finished_before": sum(finished is not None for *_, finished in cut),
        "continued": sum(last is not None and finished is None for _, last, finished in cut)}
    assert summary["tables"]["usr"]["ranges"]["continued"] >= 1
    assert run_snapshot(config, "--direct", "--table", "member")["published"] == 12
    poll_until_drained(database, config)
    written = written_directly(tmp_path / "publisher" / "out")
    assert written and max(written.values()) == 1, written.most_common(3)
    assert main(["verify", "-c", str(config)]) == 0, capsys.readouterr()


# --- what user trials found ------------------------------------------------------------------------

def taken_in_a_thread(h, **options) -> tuple[threading.Thread, list[SnapshotResult], list[Exception]]:
    """A direct snapshot taken on a thread of its own (started), its result and its errors."""
    results: list[SnapshotResult] = []
    errors: list[Exception] = []

    def run() -> None:
        try:
            results.append(snapshot_directly(h.config, h.engine, **options))
        except Exception as exc:  # noqa: BLE001 - reported by the test's own thread
            errors.append(exc)

    taker = threading.Thread(target=run)
    taker.start()
    return taker, results, errors


@pytest.mark.parametrize("server", ["postgresql_database", "mariadb_database"])
def test_rows_written_directly_wait_for_no_writer(spark, server, request, tmp_path):
    """The rows a chunk writes directly are read as last committed, without a lock: an
    application transaction holding one of them, changed and not yet committed, neither waits
    for the snapshot nor is waited for (the logged path would wait, and lock every row it
    reads). Its change, committed afterwards, is published after the row's document."""
    h = make(spark, request.getfixturevalue(server), tmp_path)
    fill(h, 30)
    h.install("usr", style="field")
    usr = h.table("usr")
    writer = h.engine.connect()
    writer.execute(text(f"UPDATE {usr} SET fname = 'late' WHERE idu = 12"))
    writer.execute(text(f"DELETE FROM {usr} WHERE idu = 13"))
    writer.execute(text(f"INSERT INTO {usr} (idu, fname) VALUES (13, 'again')"))
    try:
        taker, results, errors = taken_in_a_thread(h, chunk_rows=8)
        taker.join(timeout=60)
        assert not taker.is_alive(), "the snapshot waited for the application's transaction"
        assert errors == []
        assert (results[0].tables["usr"].rows, results[0].tables["usr"].published) == (30, 30)
        assert logged_rows(h) == {}
    finally:
        writer.commit()
        writer.close()
    drain(h)
    assert_mirrored(h)
    assert h.db.rows(f"SELECT fname FROM {usr} WHERE idu IN (12, 13) ORDER BY idu") == [("late",), ("again",)]


def test_a_key_changed_while_a_chunk_waits_for_its_row_leaves_no_row_behind(spark, postgresql_database, tmp_path):
    """The row a chunk ends on has an event waiting, so the chunk logs it under the share lock; a
    writer changes its key and commits while the chunk waits for that lock. PostgreSQL hands the
    row back with its new key, out of the chunk: had that key bounded the next chunk, the rows
    in between would have been passed over. The row read before the lock is not written."""
    h = make(spark, postgresql_database, tmp_path)
    fill(h, 20)
    h.install("usr", style="row")
    usr = h.table("usr")
    h.db.execute(f"UPDATE {usr} SET fname = 'waiting' WHERE idu = 5")
    writer = h.engine.connect()
    writer.execute(text(f"UPDATE {usr} SET idu = 1005 WHERE idu = 5"))
    taker, results, errors = taken_in_a_thread(h, chunk_rows=5)
    deadline = time.monotonic() + 30
    while not h.db.rows("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FOR SHARE%'"):
        assert time.monotonic() < deadline, "the chunk never waited for the writer's row"
        time.sleep(0.005)
    writer.commit()
    writer.close()
    taker.join()
    assert errors == []
    taken = results[0].tables["usr"]
    assert (taken.rows, taken.published) == (20, 19), "1005 later, behind its waiting event; none passed over"
    drain(h)
    assert_mirrored(h)


def test_a_row_committed_while_a_mariadb_chunk_waits_for_it_is_left_to_its_own_event(spark, mariadb_database,
                                                                                     tmp_path):
    """A writer inserts a row inside a chunk and commits while the chunk, about to log the rows
    around it (they have events waiting), waits under the share lock. The locked read sees the
    row, which neither the chunk's read of its rows nor its read of the waiting events did: it
    is neither written nor logged, and its insert publishes it (written, it would have been
    published again, an <add> of an object the consumer held)."""
    h = make(spark, mariadb_database, tmp_path)
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'a'), (3, 'c')")
    h.install("usr", style="row")
    h.db.execute(f"UPDATE {h.table('usr')} SET fname = 'waiting'")
    writer = h.engine.connect()
    writer.execute(text(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (2, 'b')"))
    taker, results, errors = taken_in_a_thread(h, chunk_rows=5)
    deadline = time.monotonic() + 30
    while not h.db.rows("SELECT 1 FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"):
        if time.monotonic() > deadline:
            writer.rollback()
            taker.join()
            pytest.fail("the chunk never waited for the writer's row")
        time.sleep(0.2)  # InnoDB refreshes innodb_trx only when it was not read for 0.1 s
    writer.commit()
    writer.close()
    taker.join()
    assert errors == []
    taken = results[0].tables["usr"]
    assert (taken.rows, taken.published) == (2, 0), "1 and 3 logged, 2 left to its insert's event"
    assert logged_rows(h) == {("usr", "idu=1"): 1, ("usr", "idu=3"): 1}
    drain(h)
    assert_mirrored(h)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "logged"])
def test_keys_with_no_canonical_form_continue_and_cut_into_ranges(spark, postgresql_database, tmp_path, direct):
    """Dates BC and -infinity as keys: such rows are logged (their events say why, E); a snapshot
    stopped after a chunk ending on one continues, and key ranges may end on one."""
    from test_snapshot_run import Stop, stop_in_usr

    h = make(spark, postgresql_database, tmp_path, ddl="CREATE TABLE {t} (born DATE PRIMARY KEY, note TEXT)")
    usr = h.table("usr")
    h.db.execute(f"INSERT INTO {usr} VALUES ('-infinity', 'x')",
                 *(f"INSERT INTO {usr} VALUES ('{year:04d}-03-15 BC', 'bc')" for year in range(1, 11)),
                 *(f"INSERT INTO {usr} VALUES ('2020-01-{day:02d}', 'ad')" for day in range(1, 11)))
    h.install("usr", style="row")
    take = functools.partial(snapshot_directly, h.config, h.engine) if direct else functools.partial(
        snapshot, h.config, h.engine)
    with pytest.raises(Stop):
        take(chunk_rows=3, progress=stop_in_usr)
    ((stopped_after,),) = h.db.rows(f"SELECT last_key FROM {h.table('event_log_snapshot')}")
    assert "0009-03-15 BC" in stopped_after
    again = take(chunk_rows=3, **({"spark": lambda: spark, "parallel_rows": 4} if direct else {}))
    assert again.tables["usr"].rows == 21 - 3
    drain(h)
    published = {op.findtext("association").strip() for op in h.published().operations}
    assert {h.association(f"born=2020-01-{day:02d}") for day in range(1, 11)} <= published
    assert sorted(h.statuses().values()).count("E") == 11, "the keys no table_key can hold"


def test_a_sqlite_key_of_no_declared_type_is_compared_as_its_text(spark, sqlite_database, tmp_path):
    """SQLite keeps each value of an untyped column in its own storage class: an integer key is
    never greater than, nor equal to, the text it is spelled in. Such a key is read, bounded and
    looked up by its text, on both paths and by query-back."""
    h = make(spark, sqlite_database, tmp_path, ddl="CREATE TABLE {t} (idu PRIMARY KEY, fname TEXT)")
    usr = h.table("usr")
    h.db.execute(*(f"INSERT INTO {usr} VALUES ({i}, 'n{i}')" for i in range(1, 51)))
    h.install("usr", style="row")
    assert snapshot_directly(h.config, h.engine, chunk_rows=10).tables["usr"].published == 50
    h.db.execute(f"UPDATE {usr} SET fname = 'changed' WHERE idu IN (7, 42)")
    assert snapshot(h.config, h.engine, chunk_rows=10).tables["usr"].rows == 50
    drain(h)
    assert "W" not in h.statuses().values()
    assert_mirrored(h)


def test_a_condition_that_closes_its_parenthesis_is_refused(spark, database, tmp_path):
    """`--where "id > 0) OR (id > 0"` would read as one condition and then escape the chunk's
    bounds (every chunk starting again from the first row)."""
    h = make(spark, database, tmp_path)
    fill(h, 10)
    h.install("usr", style="field")
    for condition in ("idu > 0) OR (idu > 0", "(idu > 0", "fname = ')' OR (idu > 0"):
        with pytest.raises(SnapshotError, match="unbalanced parentheses"):
            snapshot_directly(h.config, h.engine, where=condition)
    result = snapshot_directly(h.config, h.engine, where="fname = ')(' OR (idu > 8)")
    assert result.tables["usr"].published == 2


ALL = ("sqlite", "postgresql", "mariadb")
HIDDEN_PARENTHESES = [
    # (condition, the databases that read it past the parentheses it is wrapped in, the refusal)
    ("idu = 2 /*(*/) OR (1=1 /*)*/", ALL, "comments are refused: /* at character 9 begins a block comment; a "
     "condition has no need of one, and the parentheses inside a comment are not counted, so the condition could "
     "escape the chunks' key bounds"),
    ("idu = 2 -- (\n) OR (1=1 -- )\n", ALL, "comments are refused: -- at character 9 begins a line comment;"),
    ("idu = 2 #(\n) OR (1=1 #)\n", ("mariadb",),
     "comments are refused: # at character 9 begins a line comment on some databases;"),
    (r"fname = '\' ( ' ) OR (1=1 OR fname = ' ) \' '", ("mariadb",),
     "ambiguous quote: the quote ' at character 11 follows a backslash, which escapes it in some "
     "databases' strings and not in others', so where the quoted text ends depends on the database; "
     "write '' for a quote inside quoted text"),
    ("fname = $$'$$ ) OR (1=1 OR fname = $$'$$", ("postgresql",),
     "dollar quotes are refused: the $ at character 9 would begin a dollar-quoted string on some databases, whose "
     "parentheses are not counted; write text in '…', and a name that begins with $ in \"…\""),
    ("CAST(1 AS [']) = 2) OR (1=1 OR CAST(1 AS [']) = 2", ("sqlite",),
     "the ' at character 12 is inside the [ at character 11, which quotes a name on some databases and begins a "
     "subscript on others, so the databases disagree on where its quotes and parentheses are; write the name in "
     "\"…\" instead"),
]


def test_a_condition_whose_parentheses_a_database_reads_otherwise_is_refused(spark, database, tmp_path):
    """Parentheses hidden from the count, by a comment, a quote a backslash escapes (MariaDB), a
    dollar quote (PostgreSQL) or a [name] (SQLite), let the condition read past the parentheses
    each chunk wraps it in, on the databases named (shown first): the snapshot looped for ever.
    Each is refused on every database, before anything is counted or logged."""
    h = make(spark, database, tmp_path)
    fill(h, 10)
    h.install("usr", style="field")
    for condition, escaping, refusal in HIDDEN_PARENTHESES:
        if database.dialect in escaping:
            ((bounded,),) = h.db.rows(f"SELECT count(*) FROM {h.table('usr')} WHERE (idu > 100) AND ({condition})")
            assert bounded == 10, f"{condition!r} escapes the bound idu > 100 on {database.dialect}"
        with pytest.raises(SnapshotError) as refused:
            snapshot(h.config, h.engine, where=condition, dry_run=True)
        assert str(refused.value).startswith(f"--where {condition.strip()!r}: {refusal}"), str(refused.value)
    assert h.db.rows(f"SELECT count(*) FROM {h.table('event_log')}") == [(0,)]


def test_a_quote_never_closed_is_named_and_comment_marks_inside_quotes_are_text(spark, database, tmp_path):
    """`--where "'"` was refused for unbalanced parentheses; the quote is what is wrong."""
    h = make(spark, database, tmp_path)
    fill(h, 10)
    h.install("usr", style="field")
    for condition, at in (("'", 1), ("fname = 'n1", 9), ("fname = 'n1' OR fname = 'it''s", 25)):
        with pytest.raises(SnapshotError) as refused:
            snapshot(h.config, h.engine, where=condition, dry_run=True)
        assert str(refused.value) == (f"--where {condition!r}: unterminated quote: the quote ' at character {at} is "
                                      "never closed")
    quoted = r"fname IN ('n1', '-- /* */ # $$ ( [''', 'n\\') OR (idu > 8 AND idu - -1 > 0)"
    assert snapshot(h.config, h.engine, where=quoted, dry_run=True).tables["usr"].total == 3


# --- the documents the direct path writes ------------------------------------------------------------

EVERY_KIND = ("CREATE TABLE {t} (g TEXT, n INTEGER, s TEXT, b BYTEA, num NUMERIC(20, 6), ts TIMESTAMP, "
              "tz TIMESTAMPTZ, d DATE, ok BOOLEAN, big BIGINT, PRIMARY KEY (g, n))")
EVERY_VALUE = """INSERT INTO {t} SELECT (ARRAY['a', 'b,c', 'é=ü', 'x<y&z', ''])[1 + i % 5], i,
  CASE i % 6 WHEN 0 THEN NULL WHEN 1 THEN 'plain ' || i WHEN 2 THEN 'ünï ☃ 𝄞 ' || i
    WHEN 3 THEN '<&>"'' ]]> ' || chr(13) || chr(10) || i WHEN 4 THEN '' ELSE 'tab' || chr(9) || i END,
  CASE WHEN i % 4 = 0 THEN NULL ELSE decode(md5(i::text), 'hex') END,
  CASE WHEN i % 5 = 0 THEN NULL ELSE (i * 1234.567891 - 50000)::numeric(20, 6) END,
  CASE i % 5 WHEN 0 THEN NULL WHEN 1 THEN '1969-12-31 23:59:59'::timestamp + i * interval '1 hour 1 second'
    WHEN 2 THEN '0099-02-28 10:00:00'::timestamp + i * interval '1 day' WHEN 3 THEN '2024-02-29 23:59:59.5'
    ELSE '2000-01-01'::timestamp + i * interval '37 minutes' END,
  CASE WHEN i % 3 = 0 THEN NULL ELSE '2026-11-27 12:00:00+02'::timestamptz + i * interval '1 min' END,
  CASE WHEN i % 8 = 0 THEN NULL ELSE '1900-01-01'::date + i * 3 END,
  CASE WHEN i % 3 = 0 THEN NULL ELSE i % 2 = 0 END,
  CASE WHEN i % 9 = 0 THEN NULL ELSE i::bigint * 123456789012 - 999999999999999 END
FROM generate_series(1, 300) i"""


def typed_as_published(h, operations) -> None:
    """Each value an operation holds is what the value the driver reads, typed, publishes as
    (`encode_current`: a date-time's seconds from the datetime, bytes in base64), by another
    way than the text the snapshot reads."""
    import re

    from publisher.model.values import ValueType, encode_current

    with h.engine.connect() as conn:
        rows = {row.n: row._mapping for row in conn.execute(text(f"SELECT * FROM {h.table('usr')}"))}
    for op in operations:
        row = rows[int(re.search(r"[+]n=([0-9]+),table=", op.findtext("association")).group(1))]
        for attr in op.iter("modify-attr"):
            value = attr.find("add-value/value")
            name = attr.get("attr-name")
            if value is None:
                assert row[name] is None, name
            else:
                assert (value.text or "") == encode_current(ValueType(value.get("type")), row[name]), (name, row[name])


def without_event_ids(operations) -> dict[str, bytes]:
    """Each operation's bytes but its event-id, by its association."""
    from lxml import etree

    found = {}
    for op in operations:
        del op.attrib["event-id"]
        found[op.findtext("association")] = etree.tostring(op)
    return found


def test_rows_of_every_kind_of_value_are_written_as_their_row_query_backs_publish_them(
    spark, postgresql_database, tmp_path,
):
    """A compound key, NULLs, texts XML escapes, unicode, bytea, numeric, and date-times in every
    form the database writes them (before 1970, years under 1000, fractions of a second, with
    zone, dates alone): the direct path writes each row byte for byte (but its event-id) as
    the logged path's row query-back of it publishes it, and the consumer ends equal."""
    h = make(spark, postgresql_database, tmp_path, ddl=EVERY_KIND)
    h.db.execute(EVERY_VALUE.format(t=h.table("usr")))
    h.install("usr", style="field")
    assert snapshot_directly(h.config, h.engine, chunk_rows=37).summary()["published"] == 300
    written = h.published().operations
    typed_as_published(h, written)
    direct = without_event_ids(written)
    assert snapshot(h.config, h.engine, tables=["usr"]).summary()["events"] == 300
    drain(h)
    logged = without_event_ids(h.published().operations)
    assert len(direct) == 300 and direct == logged
    assert_mirrored(h)
