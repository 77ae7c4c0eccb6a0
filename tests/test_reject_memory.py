"""A cycle whose rows are all rejected: every reject is written and every row marked E, and on
the Spark path the driver holds none of them (its memory does not grow with the rows)."""
from __future__ import annotations

import dataclasses
import gc
import json
import tracemalloc

from harness import Harness

from publisher.config import SparkConfig

REASON = "event_type '9' is not one of 1..8"


def log_rejected(h: Harness, count: int, start: int = 0) -> list[int]:
    """`count` rows with event type 9, logged set-based; their record_ids."""
    log = h.table(h.config.event_log.table)
    if h.dialect == "sqlite":
        numbers = (
            f"WITH RECURSIVE n(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM n WHERE i < {start + count - 1}) "
            "SELECT i FROM n"
        )
    else:
        numbers = f"SELECT i FROM generate_series({start}, {start + count - 1}) AS i"
    before = set(h.statuses())
    h.db.execute(
        f"INSERT INTO {log} (status, event_type, table_name, table_key) "
        f"SELECT 'N', 9, 'usr', 'idu=' || i FROM ({numbers}) AS numbers"
    )
    return sorted(set(h.statuses()) - before)


def on_path(h: Harness, cycle_path: str, events: int) -> Harness:
    """Large cycles: on the driver path, one that still runs in the driver alone."""
    h.reconfigure(query_limit=max(events, h.config.publisher.query_limit))
    if cycle_path == "driver":
        h.config = dataclasses.replace(h.config, spark=SparkConfig(small_cycle_events=events))
    return h


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
