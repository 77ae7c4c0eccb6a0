"""A cycle whose rows are all rejected: every reject is written and every row marked E, and on
the Spark path the driver holds none of them (its memory does not grow with the rows)."""
from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import tracemalloc

import pyarrow as pa
from conftest import spark_on_one_database
from harness import Harness
from hunting import budget
from hypothesis import example, given, settings
from hypothesis import strategies as st

from publisher.config import SparkConfig
from publisher.model.events import Status
from publisher.outputs.outcomes import DECIDED, READ, StatusPieces, _OutcomeWriter, outcome_name
from publisher.pipeline.stages import REJECT_FIELDS

REASON = "event_type '9' is not one of 1..8"


def log_rejected(h: Harness, count: int, start: int = 0) -> list[int]:
    """`count` rows with event type 9, logged set-based; their record_ids."""
    log = h.table(h.config.event_log.table)
    if h.dialect == "sqlite":
        numbers = (
            f"WITH RECURSIVE n(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM n WHERE i < {start + count - 1}) "
            "SELECT i FROM n"
        )
    elif h.dialect == "mariadb":
        numbers = f"SELECT seq AS i FROM seq_{start}_to_{start + count - 1}"  # MariaDB's sequence engine
    else:
        numbers = f"SELECT i FROM generate_series({start}, {start + count - 1}) AS i"
    key = "CONCAT('idu=', i)" if h.dialect == "mariadb" else "'idu=' || i"
    before = set(h.statuses())
    h.db.execute(
        f"INSERT INTO {log} (status, event_type, table_name, table_key) "
        f"SELECT 'N', 9, 'usr', {key} FROM ({numbers}) AS numbers"
    )
    return sorted(set(h.statuses()) - before)


def on_path(h: Harness, cycle_path: str, events: int) -> Harness:
    """Large cycles: on the driver path, one that still runs in the driver alone."""
    h.reconfigure(query_limit=max(events, h.config.publisher.query_limit))
    if cycle_path == "driver":
        h.config = dataclasses.replace(h.config, spark=SparkConfig(small_cycle_events=events))
    return h


@spark_on_one_database("sqlite")
def test_a_cycle_of_rejected_rows_writes_every_reject_and_marks_every_row_e(harness, cycle_path):
    h = on_path(harness, cycle_path, 30_000)
    ids = log_rejected(h, 30_000)

    result = h.poll()
    assert (result.events, result.rejected, result.statuses) == (30_000, 30_000, {"E": 30_000})
    assert result.distributed == (cycle_path == "spark")
    assert set(h.statuses().values()) == {"E"}
    lines = (h.output / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    rejects = [json.loads(line) for line in lines]
    assert [r["record_id"] for r in rejects] == ids
    assert {r["reason"] for r in rejects} == {REASON}
    first = dict(rejects[0])
    assert first.pop("event_time")
    assert first == {
        "record_id": ids[0], "reason": REASON, "event_type": "9", "perpetrator": None, "table_name": "usr",
        "table_key": "idu=0", "column_name": None, "old_value": None, "new_value": None,
    }
    assert list(h.output.glob(".*.staged")) == []
    assert h.poll().idle


@spark_on_one_database("postgresql")
def test_mixed_outcomes_keep_their_order_across_partitions(harness, cycle_path):
    """S, W and E rows interleaved: the status runs and rejects the executors stage per
    partition join up into exactly what the driver path writes."""
    h = on_path(harness, cycle_path, 3_000)
    h.insert_usr(1, fname="Ann")
    events = []
    for n in range(1_000):
        events += [(9, "usr", f"idu={n}"), (6, "usr", f"idu={1_000_000 + n}"), (4, "usr", f"idu={n + 2}")]
    ids = h.log(*events)

    result = h.poll()
    assert result.statuses == {"E": 1_000, "W": 1_000, "S": 1_000}
    expected = {rid: "EWS"[index % 3] for index, rid in enumerate(ids)}
    assert h.statuses() == expected
    assert [r["record_id"] for r in h.rejects()] == [rid for rid in ids if expected[rid] == "E"]


def driver_peak(h: Harness, count: int, start: int) -> int:
    """The driver's peak Python heap, in bytes, over a cycle of `count` rejected rows."""
    log_rejected(h, count, start)
    gc.collect()
    tracemalloc.start()
    try:
        result = h.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.distributed and result.statuses == {"E": count}
    return peak


def test_the_driver_does_not_hold_the_rejected_rows(spark, sqlite_database, tmp_path):
    h = Harness(spark, sqlite_database, tmp_path, path="spark", query_limit=100_000)
    h.create_usr()
    h.create_event_log()
    driver_peak(h, 100, 0)  # the first cycle loads what every cycle shares

    small = driver_peak(h, 20_000, 1_000)
    large = driver_peak(h, 60_000, 100_000)
    assert large < 1.5 * small, f"driver peak {small / 2**20:.1f} MiB for 20k rows, {large / 2**20:.1f} MiB for 60k"
    assert h.rejects()[-1]["record_id"] == max(h.statuses())


def test_a_cycle_whose_every_object_is_gone_marks_every_row_w(harness, cycle_path):
    """Consecutive W rows that two read partitions hold meet in one resolve partition as one
    run (one object's, here); acknowledging splits it where the read partitions meet."""
    h = on_path(harness, cycle_path, 3_000)
    ids = h.log(*[(5 + n % 2, "usr", "idu=1000000") for n in range(3_000)])

    result = h.poll()
    assert result.statuses == {"W": 3_000}
    assert h.statuses() == dict.fromkeys(ids, "W")
    assert h.poll().idle


_STATUS = st.sampled_from([Status.SUCCESS, Status.SUCCESS, Status.ERROR])
_DECIDED = st.sampled_from([None, Status.WARNING, Status.WARNING, Status.ERROR])


@settings(max_examples=budget(200))
@given(
    st.lists(st.tuples(st.sampled_from([1, 1, 1, 2]), _STATUS, _DECIDED, st.integers(0, 1)), min_size=1,
             max_size=60),
    st.integers(1, 4),
)
@example([(1, Status.SUCCESS, Status.WARNING, 0)] * 4, 2)  # one decided run across the read partitions
def test_staged_statuses_read_back_as_every_row_s_own(tmp_path_factory, rows, read_parts):
    """Read rows (ids with gaps) staged in consecutive read partitions, decided statuses staged
    in either of two resolve partitions: read back, each id has its decided status, else its
    status as read, in runs covering exactly the read ids."""
    directory = tmp_path_factory.mktemp("staged")
    ids = list(itertools.accumulate(step for step, *_ in rows))
    as_read = {rid: status for rid, (_, status, _, _) in zip(ids, rows, strict=True)}
    decided = {rid: (outcome, part) for rid, (_, status, outcome, part) in zip(ids, rows, strict=True)
               if outcome is not None and status is Status.SUCCESS}
    cut = -(-len(ids) // read_parts)
    staged = {READ: [], DECIDED: []}
    for part, start in enumerate(range(0, len(ids), cut)):
        chunk = ids[start:start + cut]
        staged[READ].append(_stage_statuses(directory, READ, part, chunk, [as_read[r].value for r in chunk]))
    for part in range(2):
        chunk = sorted(rid for rid, (_, p) in decided.items() if p == part)
        if chunk:
            staged[DECIDED].append(_stage_statuses(directory, DECIDED, part, chunk,
                                                   [decided[r][0].value for r in chunk]))
    runs = list(StatusPieces(tuple(staged[READ]), tuple(staged[DECIDED])))
    got = {rid: status for status, run in runs for rid in range(run.first, run.last + 1)}
    assert got == {rid: decided[rid][0] if rid in decided else as_read[rid] for rid in ids}
    assert sum(run.count for _, run in runs) == len(ids)


def _stage_statuses(directory, kind, part, record_ids, statuses):
    writer = _OutcomeWriter(directory, 1, kind, REJECT_FIELDS)
    try:
        writer.add(pa.RecordBatch.from_pydict({"part": [part] * len(record_ids), "record_id": record_ids,
                                               "status": statuses}))
        writer.finish()
    finally:
        writer.close()
    return directory / outcome_name(1, part, kind, "statuses")
