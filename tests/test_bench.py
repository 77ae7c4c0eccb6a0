"""`publisher bench` end to end at tiny sizes on SQLite: the backlog drains and the report adds up."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from lxml import etree
from sqlalchemy import create_engine, text

from publisher.bench.run import BenchOptions, format_report, run_benchmark
from publisher.bench.workload import Backlog

ROWS, EVENTS, LATENCY_CYCLES, SAMPLE = 200, 2_000, 3, 200


def test_bench_drains_the_backlog_and_its_report_adds_up(spark, tmp_path: Path) -> None:
    options = BenchOptions(
        database="sqlite", rows=ROWS, events=EVENTS, latency_cycles=LATENCY_CYCLES, reference_sample=SAMPLE,
        master="local[2]", warm_up=False, workdir=tmp_path,
    )
    report = run_benchmark(options, spark)

    engine = create_engine(f"sqlite:///{tmp_path / 'bench.db'}")
    with engine.connect() as conn:
        statuses = dict(conn.execute(text("SELECT status, COUNT(*) FROM event_log GROUP BY status")).all())
    engine.dispose()
    latency_events = LATENCY_CYCLES * options.latency_events
    assert "N" not in statuses and report.left_new == 0
    assert sum(statuses.values()) == EVENTS + latency_events

    workload, drain = report.workload, report.drain
    assert workload.events == sum(workload.by_type.values()) == EVENTS
    assert drain.events == sum(drain.statuses.values()) == EVENTS
    assert drain.statuses["E"] == drain.rejected == workload.plan.malformed
    assert report.latency.events_seen == [options.latency_events] * LATENCY_CYCLES
    assert report.floor.rows == report.floor.marked == EVENTS
    assert sum(1 for _ in (tmp_path / "out").glob("*.xml")) == drain.documents + LATENCY_CYCLES

    for ratio in (report.floor_ratio, report.reference_speedup):
        assert isinstance(ratio, float) and ratio > 0 and math.isfinite(ratio)

    reference = report.reference
    documents = sorted((tmp_path / "reference").glob("*.xml"))
    operations = [op for path in documents for op in etree.parse(str(path)).getroot().find("input")]
    publishing = (reference.events - reference.loopback - reference.unchanged
                  - reference.statuses.get("E", 0) - reference.statuses.get("W", 0))
    assert reference.events == SAMPLE
    assert reference.loopback > 0 and reference.statuses.get("E", 0) > 0
    assert len(documents) == len(operations) == reference.documents == publishing
    assert len({op.get("event-id") for op in operations}) == len(operations)

    table = format_report(report)
    assert "publisher time / floor time" in table and "commit -> documents on disk" in table


@pytest.mark.parametrize(("backlog", "status"), [(Backlog.REJECTED, "E"), (Backlog.GONE, "W")])
def test_a_rewritten_backlog_drains_with_every_row_rejected_or_gone(spark, tmp_path: Path, backlog, status) -> None:
    """The all-E and all-W cycles the goals name are bench runs too: every row of the drain
    gets that status and nothing is published."""
    options = BenchOptions(
        database="sqlite", rows=ROWS, events=EVENTS, latency_cycles=1, reference_sample=SAMPLE,
        master="local[2]", warm_up=False, workdir=tmp_path, backlog=backlog,
    )
    report = run_benchmark(options, spark)
    assert report.workload.backlog is backlog and report.workload.events == EVENTS
    assert report.drain.statuses == {status: EVENTS}
    assert report.drain.documents == 0
    assert report.drain.rejected == (EVENTS if status == "E" else 0)
    assert f"backlog                            {backlog.value}" in format_report(report)


def test_subscribers_check_the_backlog_out_beside_the_status_mode(spark, tmp_path: Path) -> None:
    options = BenchOptions(
        database="sqlite", rows=ROWS, events=EVENTS, latency_cycles=1, reference_sample=SAMPLE,
        master="local[2]", warm_up=False, workdir=tmp_path, subscribers=2, query_limit=700,
    )
    report = run_benchmark(options, spark)

    assert len(report.subscribers) == 2
    for number, subscriber in enumerate(report.subscribers, start=1):
        assert subscriber.events == sum(subscriber.statuses.values()) == EVENTS
        assert subscriber.cycles >= 3, "windows of query_limit events"
        assert subscriber.statuses["E"] == report.drain.statuses["E"]
        assert subscriber.operations >= report.drain.operations, "the status mode's loopback rows are theirs"
        assert sum(1 for _ in (tmp_path / f"subscriber-{number}").glob("*.xml")) == subscriber.documents
    assert report.drain.events == EVENTS and report.left_new == 0
    assert "subscriber bench-2 (one check-out of the backlog in" in format_report(report)
