"""Acknowledgement on its own: exactly the read rows change, in statements of bounded size,
all or nothing."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from harness import Harness
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.databases.postgresql import arrays
from publisher.dialects import families
from publisher.model.events import Status
from publisher.model.runs import IdRun, StatusRun, changed_runs, coded_runs, id_runs, joined_runs, status_runs
from publisher.outputs.outcomes import STATUS_CODES
from publisher.pipeline import acknowledge as ack
from publisher.pipeline import planning
from publisher.pipeline.acknowledge import AcknowledgeError, acknowledge_runs


@settings(max_examples=budget(300))
@given(st.sets(st.integers(min_value=-5, max_value=200)))
def test_id_runs_cover_exactly_the_ids_in_maximal_runs(ids: set[int]) -> None:
    runs = id_runs(ids)
    covered = [rid for run in runs for rid in range(run.first, run.last + 1)]
    assert covered == sorted(ids)
    assert all(run.count == run.last - run.first + 1 >= 1 for run in runs)
    assert all(later.first > earlier.last + 1 for earlier, later in zip(runs, runs[1:]))


@pytest.fixture
def small_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Statements carry at most 3 ids or 2 ranges, so a few rows show the chunking (listed, or
    as arrays on PostgreSQL)."""
    for family in families():
        monkeypatch.setattr(type(family.value_lists()), "ids_per_statement", 3)
        monkeypatch.setattr(type(family.value_lists()), "ranges_per_statement", 2)


def log_events(h: Harness, count: int) -> list[int]:
    return h.log(*[(4, "usr", f"idu={n}") for n in range(count)])


def test_only_the_read_rows_change_in_bounded_statements(spark, database, tmp_path, small_statements):
    from sqlalchemy import event

    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 20)
    # Rows inside the window that the cycle did not read, as when their transaction commits late.
    unread = {ids[4], ids[9], ids[10], ids[15]}
    read = [rid for rid in ids if rid not in unread]
    exceptions = {ids[1]: Status.WARNING, ids[2]: Status.ERROR, ids[7]: Status.ERROR, ids[8]: Status.ERROR,
                  ids[12]: Status.ERROR, ids[19]: Status.WARNING}

    statements: list[str] = []
    event.listen(h.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    written = acknowledge(h, id_runs(read), exceptions)

    expected = {rid: (exceptions.get(rid, Status.SUCCESS).value if rid in read else "N") for rid in ids}
    assert h.statuses() == expected
    assert written == {Status.WARNING: 2, Status.ERROR: 4, Status.SUCCESS: len(read) - 6}
    changes = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
    # W: 2 ids in 1 statement; E: 4 ids in 2; S: 4 runs of read ids in 2 statements of <= 2 ranges.
    assert len(id_runs(read)) == 4
    assert len(changes) == 1 + 2 + 2


def test_a_row_that_is_no_longer_new_rolls_everything_back(spark, database, tmp_path, small_statements):
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 8)
    h.db.execute(
        f"UPDATE {h.table('event_log')} SET status = 'S' WHERE record_id = {ids[6]}"
    )
    with pytest.raises(AcknowledgeError, match="expected to mark 7 event log rows S, but 6 were still new"):
        acknowledge(h, [IdRun(ids[0], ids[-1])], {ids[0]: Status.ERROR})
    assert h.statuses() == {**{rid: "N" for rid in ids}, ids[6]: "S"}


# --- statuses as runs: what a cycle of any size hands over ---------------------------------------


def acknowledge(h, read, exceptions):
    """Every read event S, but for the exceptions."""
    return acknowledge_runs(h.engine, h.acknowledging(), status_runs(read, exceptions), run_post_polling=False)


def runs_of(outcomes) -> Iterator[StatusRun]:
    """(record_id, status) in record_id order, as runs of one status."""
    return joined_runs((status, IdRun(rid, rid)) for rid, status in outcomes)


OUTCOMES = st.sampled_from([Status.SUCCESS, Status.WARNING, Status.ERROR])


@settings(max_examples=budget(300))
@given(st.dictionaries(st.integers(min_value=-5, max_value=200), OUTCOMES))
def test_status_runs_give_every_read_id_its_status_in_maximal_runs(outcomes: dict[int, Status]) -> None:
    exceptions = {rid: status for rid, status in outcomes.items() if status is not Status.SUCCESS}
    runs = status_runs(id_runs(outcomes), exceptions)
    assert [(rid, status) for status, run in runs for rid in range(run.first, run.last + 1)] == sorted(
        outcomes.items()
    )
    assert all(
        later[1].first > earlier[1].last + 1 or later[0] is not earlier[0] for earlier, later in zip(runs, runs[1:])
    )
    assert list(runs_of(sorted(outcomes.items()))) == runs
    # the same runs found over columns, as the cycles find them (`coded_runs`)
    ids = np.array(sorted(outcomes), dtype=np.int64)
    codes = np.array([STATUS_CODES.index(outcomes[rid].value) for rid in sorted(outcomes)], dtype=np.int64)
    assert [(Status(STATUS_CODES[code]), IdRun(first, last)) for code, first, last in coded_runs(ids, codes)] == runs


class Replayed:
    """Runs made afresh on each iteration, as when they are read from files: never held whole."""

    def __init__(self, outcomes: dict[int, Status]) -> None:
        self.outcomes = outcomes
        self.iterations = 0

    def __iter__(self):
        self.iterations += 1
        return runs_of((rid, self.outcomes[rid]) for rid in sorted(self.outcomes))


def updates(engine, statements: list[str]):
    from sqlalchemy import event

    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))


def test_streamed_runs_are_acknowledged_exactly_in_bounded_statements(spark, database, tmp_path, small_statements):
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 40)
    unread = {ids[5], ids[6], ids[30]}
    pattern = [Status.ERROR, Status.ERROR, Status.SUCCESS, Status.WARNING, Status.ERROR, Status.SUCCESS]
    outcomes = {rid: pattern[i % len(pattern)] for i, rid in enumerate(ids) if rid not in unread}
    runs = Replayed(outcomes)

    statements: list[str] = []
    updates(h.engine, statements)
    written = acknowledge_runs(h.engine, h.acknowledging(), runs, run_post_polling=False)

    assert runs.iterations == 2
    assert h.statuses() == {rid: outcomes[rid].value if rid in outcomes else "N" for rid in ids}
    counts = {status: list(outcomes.values()).count(status) for status in set(outcomes.values())}
    assert written == counts
    changes = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
    # at most 3 ids per W or E statement, 2 ranges per S statement
    assert len(changes) == -(-counts[Status.WARNING] // 3) + -(-counts[Status.ERROR] // 3) + 2


def test_a_long_run_of_rejected_rows_is_cut_into_statements_of_bounded_ids(spark, database, tmp_path, small_statements):
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 10)
    statements: list[str] = []
    updates(h.engine, statements)
    runs = [(Status.ERROR, IdRun(ids[0], ids[-1]))]
    written = acknowledge_runs(h.engine, h.acknowledging(), runs, run_post_polling=False)
    assert written == {Status.ERROR: 10}
    assert set(h.statuses().values()) == {"E"}
    # 3 + 3 + 3 + 1 ids, and no S statement for a read range that holds no S row
    assert len([s for s in statements if s.lstrip().upper().startswith("UPDATE")]) == 4


def test_runs_out_of_order_or_given_once_are_refused_before_anything_changes(spark, database, tmp_path):
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 6)
    once = iter([(Status.SUCCESS, IdRun(ids[0], ids[-1]))])
    with pytest.raises(TypeError, match="not an iterator"):
        acknowledge_runs(h.engine, h.acknowledging(), once, run_post_polling=False)
    overlapping = [(Status.ERROR, IdRun(ids[0], ids[2])), (Status.SUCCESS, IdRun(ids[2], ids[5]))]
    with pytest.raises(ValueError, match="out of record_id order"):
        acknowledge_runs(h.engine, h.acknowledging(), overlapping, run_post_polling=False)
    assert set(h.statuses().values()) == {"N"}


def test_on_postgresql_one_range_of_consecutive_ids_is_marked_without_an_analyze(
    spark, postgresql_database, tmp_path, monkeypatch
):
    """A window of consecutive ids leaves one S range, which joins with nothing: however large,
    it needs no fresh statistics, and the W and E rows within it are set first as before."""
    monkeypatch.setattr(arrays, "TRUSTED_JOIN", 10)
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 30)
    exceptions = {ids[4]: Status.WARNING, ids[9]: Status.ERROR}

    statements: list[str] = []
    updates(h.engine, statements)
    written = acknowledge(h, id_runs(ids), exceptions)

    assert h.statuses() == {rid: exceptions.get(rid, Status.SUCCESS).value for rid in ids}
    assert written == {Status.WARNING: 1, Status.ERROR: 1, Status.SUCCESS: 28}
    changes = [s.upper() for s in statements if s.lstrip().upper().startswith(("UPDATE", "ANALYZE"))]
    assert [s.split()[0] for s in changes] == ["UPDATE", "UPDATE", "UPDATE"]


@pytest.mark.parametrize("trusted_join", [10**9, 30])
def test_on_postgresql_scattered_rows_go_by_id_and_a_large_range_join_on_fresh_statistics(
    spark, postgresql_database, tmp_path, monkeypatch, trusted_join
):
    """Statistics taken before a burst of events make the planner join every row with every
    range (quadratic): once ids spanned × ranges reach TRUSTED_JOIN, W and E rows go as an
    array of ids, which no plan joins so, and S ranges are planned on fresh statistics."""
    monkeypatch.setattr(arrays, "TRUSTED_JOIN", trusted_join)
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 30)
    unread = set(ids[3::4])
    read = [rid for rid in ids if rid not in unread]
    exceptions = {ids[1]: Status.WARNING, ids[2]: Status.ERROR, ids[20]: Status.ERROR}

    statements: list[str] = []
    updates(h.engine, statements)
    written = acknowledge(h, id_runs(read), exceptions)

    assert h.statuses() == {rid: (exceptions.get(rid, Status.SUCCESS).value if rid in read else "N") for rid in ids}
    assert written == {Status.WARNING: 1, Status.ERROR: 2, Status.SUCCESS: len(read) - 3}
    changes = [s.upper() for s in statements if s.lstrip().upper().startswith(("UPDATE", "ANALYZE"))]
    # W: 1 range × 1 id; E: 2 ranges × 19 ids = 38; S: 8 ranges × 30 ids = 240
    by_ids = ["ANY(" in s and "UNNEST" not in s for s in changes[:2]]
    assert by_ids == [False, trusted_join == 30]
    assert "UNNEST" in changes[0]
    assert [s.split()[0] for s in changes[2:]] == (["ANALYZE", "UPDATE"] if trusted_join == 30 else ["UPDATE"])
    assert "UNNEST" in changes[-1]


# --- on PostgreSQL, the statuses are written beside the cycle's output -----------------------


def locked_by_another_session(h: Harness, record_id: int, seconds: float = 20.0) -> bool:
    """Whether the row becomes locked by another session's open UPDATE within `seconds`, while it
    still reads N here (nothing committed)."""
    import time

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    log = h.table("event_log")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with h.engine.connect() as conn:
            try:
                conn.execute(text(f"SELECT 1 FROM {log} WHERE record_id = {record_id} FOR UPDATE NOWAIT"))
            except OperationalError as exc:
                if "could not obtain lock" in str(exc):
                    return True
                raise
            finally:
                conn.rollback()
        time.sleep(0.05)
    return False


def test_on_postgresql_the_statuses_are_marked_beside_and_committed_only_at_the_finish(
    spark, postgresql_database, tmp_path, small_statements
):
    """The rows are updated while the caller writes (they are locked by the marking), yet every
    other session sees them new until `finish`, which commits the statuses the runs give."""
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 10)
    exceptions = {ids[2]: Status.WARNING, ids[5]: Status.ERROR}

    pending = ack.MarkingBeside(h.engine, h.acknowledging(), status_runs(id_runs(ids), exceptions))
    assert locked_by_another_session(h, ids[-1])
    assert set(h.statuses().values()) == {"N"}
    written = pending.finish(published=True)

    assert written == {Status.WARNING: 1, Status.ERROR: 1, Status.SUCCESS: 8}
    assert h.statuses() == {rid: exceptions.get(rid, Status.SUCCESS).value for rid in ids}


def test_on_postgresql_marking_abandoned_or_refused_leaves_every_row_new(
    spark, postgresql_database, tmp_path, small_statements
):
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 6)

    abandoned = ack.MarkingBeside(h.engine, h.acknowledging(), status_runs(id_runs(ids), {}))
    assert locked_by_another_session(h, ids[0])
    abandoned.abandon()
    assert set(h.statuses().values()) == {"N"}

    h.db.execute(f"UPDATE {h.table('event_log')} SET status = 'S' WHERE record_id = {ids[3]}")
    refused = ack.MarkingBeside(h.engine, h.acknowledging(), status_runs(id_runs(ids), {ids[0]: Status.ERROR}))
    with pytest.raises(AcknowledgeError, match="expected to mark 5 event log rows S, but 4 were still new"):
        refused.finish(published=False)
    assert h.statuses() == {**{rid: "N" for rid in ids}, ids[3]: "S"}


def published_usr(spark, database, tmp_path, rows: int) -> Harness:
    """usr with its triggers, published by a user other than the writer, and `rows` rows inserted."""
    h = Harness(spark, database, tmp_path, user="publisher_app")
    h.create_usr()
    h.install("usr")
    insert_usr_rows(h, range(1, rows + 1))
    return h


def insert_usr_rows(h: Harness, idus) -> None:
    for idu in idus:
        h.insert_usr(idu, fname=f"n{idu}")


def test_on_postgresql_a_cycle_marks_while_it_writes_and_a_failed_write_leaves_the_rows_new(
    spark, postgresql_database, tmp_path, monkeypatch
):
    """The cycle's statuses are written while its documents are, committed once they are
    durable: while they are written the rows are locked by the marking and still new; a write
    that fails leaves them new, and the next cycle publishes them."""
    from publisher.errors import StageFailedError
    from publisher.pipeline.driver import InDriver

    monkeypatch.setattr(planning, "MARKED_BESIDE_EVENTS", 1)
    h = published_usr(spark, postgresql_database, tmp_path, 3)
    ids = sorted(h.statuses())
    seen: list[tuple[bool, set[str]]] = []
    write = InDriver.write_documents

    def failing_write(self, resolved, cycle_number):
        seen.append((locked_by_another_session(h, ids[-1]), set(h.statuses().values())))
        raise OSError("the disk is full")

    monkeypatch.setattr(InDriver, "write_documents", failing_write)
    with pytest.raises(StageFailedError, match="the disk is full"):
        h.poll()
    assert seen == [(True, {"N"})]
    assert set(h.statuses().values()) == {"N"}

    monkeypatch.setattr(InDriver, "write_documents", write)
    result = h.poll()
    assert result.statuses == {"S": 3}
    assert set(h.statuses().values()) == {"S"}
    assert [kind for kind, *_ in h.published().describe()] == ["add", "add", "add"]


@settings(max_examples=budget(300))
@given(st.dictionaries(st.integers(min_value=-5, max_value=60), st.tuples(OUTCOMES, OUTCOMES)))
def test_changed_runs_name_exactly_the_ids_whose_status_changed_in_maximal_runs(pairs) -> None:
    """The rows an early acknowledgement marks again once the outcomes are known."""
    before = list(runs_of(sorted((rid, old) for rid, (old, _) in pairs.items())))
    after = list(runs_of(sorted((rid, new) for rid, (_, new) in pairs.items())))
    changes = changed_runs(before, after)
    named = {rid: (old, new) for old, new, run in changes for rid in range(run.first, run.last + 1)}
    assert named == {rid: pair for rid, pair in pairs.items() if pair[0] is not pair[1]}
    assert all(not (a[:2] == b[:2] and a[2].last + 1 == b[2].first) for a, b in zip(changes, changes[1:]))
    assert [run.first for *_, run in changes] == sorted(run.first for *_, run in changes)


def test_changed_runs_refuse_runs_of_other_ids() -> None:
    with pytest.raises(ValueError, match="record_id 5 has a status after but none before"):
        changed_runs([(Status.SUCCESS, IdRun(1, 4))], [(Status.SUCCESS, IdRun(1, 5))])
    with pytest.raises(ValueError, match="record_id 7 has a status before but none after"):
        changed_runs([(Status.SUCCESS, IdRun(1, 4)), (Status.ERROR, IdRun(7, 7))], [(Status.SUCCESS, IdRun(1, 4))])


def test_on_postgresql_statuses_marked_early_are_settled_with_the_outcomes(
    spark, postgresql_database, tmp_path, small_statements
):
    """Begun with the statuses classification gives (E for a rejected row, S for the rest),
    settled with those the cycle ends with: the rows whose status differs are marked again in
    the same transaction, and the counts are the final statuses'."""
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = log_events(h, 12)
    classified = {ids[0]: Status.ERROR, ids[7]: Status.ERROR}
    final = {ids[0]: Status.ERROR, ids[7]: Status.ERROR, ids[2]: Status.WARNING, ids[3]: Status.WARNING,
             ids[4]: Status.WARNING, ids[5]: Status.WARNING, ids[6]: Status.WARNING, ids[11]: Status.ERROR}

    pending = ack.MarkingBeside(h.engine, h.acknowledging(), status_runs(id_runs(ids), classified))
    assert locked_by_another_session(h, ids[5])
    pending.settle(status_runs(id_runs(ids), final))
    assert set(h.statuses().values()) == {"N"}
    written = pending.finish(published=False)

    assert h.statuses() == {rid: final.get(rid, Status.SUCCESS).value for rid in ids}
    assert written == {Status.ERROR: 3, Status.WARNING: 5, Status.SUCCESS: 4}


def test_on_postgresql_a_cycle_marks_while_it_resolves_and_settles_what_resolving_found(
    spark, postgresql_database, tmp_path, monkeypatch
):
    """The statuses as classified are written while the objects are resolved (the rows locked,
    still new for everyone else); an object resolving finds gone (W) and a row classification
    rejects (E) end with their own statuses. A failure while resolving leaves every row new."""
    monkeypatch.setattr(planning, "MARKED_BESIDE_EVENTS", 1)
    from publisher.errors import StageFailedError
    from publisher.pipeline.driver import InDriver

    h = Harness(spark, postgresql_database, tmp_path, user="publisher_app")
    h.create_usr()
    h.install("usr")
    h.insert_usr(1, fname="Ann")
    h.insert_usr(2, fname="Bob")
    gone, rejected = h.log((6, "usr", "idu=99"), (1, "nosuchtable", "idu=1"))
    ids = sorted(h.statuses())
    seen: list[tuple[bool, set[str]]] = []
    resolve = InDriver.resolve

    def watched(self, classified):
        seen.append((locked_by_another_session(h, ids[0]), set(h.statuses().values())))
        if len(seen) == 1:
            raise OSError("the query-back connection broke")
        return resolve(self, classified)

    monkeypatch.setattr(InDriver, "resolve", watched)
    with pytest.raises(StageFailedError, match="the query-back connection broke"):
        h.poll()
    assert set(h.statuses().values()) == {"N"}
    result = h.poll()

    assert seen == [(True, {"N"}), (True, {"N"})]
    assert h.statuses() == {**{rid: "S" for rid in ids}, gone: "W", rejected: "E"}
    assert result.statuses == {"S": len(ids) - 2, "W": 1, "E": 1}


def test_on_postgresql_a_small_cycle_marks_its_statuses_after_its_output(
    spark, postgresql_database, tmp_path, monkeypatch
):
    """Below MARKED_BESIDE_EVENTS a cycle's statuses are written in turn, after the writes: a
    small poll opens no second connection or thread."""
    from publisher.pipeline.driver import InDriver

    monkeypatch.setattr(planning, "MARKED_BESIDE_EVENTS", 4)
    h = published_usr(spark, postgresql_database, tmp_path, 3)
    ids = sorted(h.statuses())
    seen: list[bool] = []
    write = InDriver.write_documents

    def watched(self, resolved, cycle_number):
        seen.append(locked_by_another_session(h, ids[-1], seconds=0.5))
        return write(self, resolved, cycle_number)

    monkeypatch.setattr(InDriver, "write_documents", watched)
    assert h.poll().statuses == {"S": 3}
    insert_usr_rows(h, range(4, 8))
    ids = sorted(h.statuses())
    assert h.poll().statuses == {"S": 4}
    assert seen == [False, True]


@pytest.mark.parametrize("database", ["sqlite", "mariadb"], indirect=True)
def test_a_large_cycle_where_an_open_update_holds_writers_back_marks_its_statuses_after_its_output(
    spark, database, tmp_path, monkeypatch
):
    """MariaDB's range UPDATE locks the gap after the rows it marks, SQLite has one writer: however
    large the cycle, nothing is marked while its documents are written (no marking thread runs)."""
    import threading

    from publisher.pipeline.driver import InDriver

    monkeypatch.setattr(planning, "MARKED_BESIDE_EVENTS", 1)
    h = published_usr(spark, database, tmp_path, 3)
    seen: list[bool] = []
    write = InDriver.write_documents

    def watched(self, resolved, cycle_number):
        seen.append(any(thread.name.startswith("acknowledge") for thread in threading.enumerate()))
        return write(self, resolved, cycle_number)

    monkeypatch.setattr(InDriver, "write_documents", watched)
    assert h.poll().statuses == {"S": 3}
    assert seen == [False]
