"""`publisher bench` end to end at tiny sizes: the backlog drains and the report adds up."""
from __future__ import annotations

import math
import re
import uuid
from pathlib import Path

import pytest
from conftest import DIALECTS, MARIADB_URL, POSTGRES_URL
from lxml import etree
from sqlalchemy import create_engine, text

from publisher.cli import main
from publisher.config import DatabaseConfig
from publisher.workshop.bench.capture import CaptureOptions, format_capture_report, run_capture_bench
from publisher.workshop.bench.mix import Backlog
from publisher.workshop.bench.report import format_report
from publisher.workshop.bench.run import BenchOptions, run_benchmark
from publisher.workshop.bench.snapshot import SnapshotOptions, format_snapshot_report, run_snapshot_bench

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

    cold = report.cold
    assert cold is not None and cold.cycle["events"] == EVENTS
    assert cold.cycle["statuses"] == drain.statuses, "the cold poll and the drain publish the same backlog"
    assert sum(1 for _ in (tmp_path / "cold").glob("*.xml")) == cold.cycle["documents"] == drain.documents
    assert 0 < cold.before_cycle < cold.seconds and report.cold_ratio == cold.seconds / report.floor.seconds

    table = format_report(report)
    assert "publisher time / floor time" in table and "commit -> documents on disk" in table
    assert "cold poll time / floor time" in table


@pytest.mark.parametrize(("backlog", "status"), [(Backlog.REJECTED, "E"), (Backlog.GONE, "W")])
def test_a_rewritten_backlog_drains_with_every_row_rejected_or_gone(spark, tmp_path: Path, backlog, status) -> None:
    """The all-E and all-W cycles the goals name are bench runs too: every row of the drain
    gets that status and nothing is published."""
    options = BenchOptions(
        database="sqlite", rows=ROWS, events=EVENTS, latency_cycles=1, reference_sample=SAMPLE,
        master="local[2]", warm_up=False, workdir=tmp_path, backlog=backlog, cold=False,
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
        master="local[2]", warm_up=False, workdir=tmp_path, subscribers=2, query_limit=700, cold=False,
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


# --- bench --capture: what the triggers cost the application, on the real servers ----------------

CAPTURE_URLS = {"postgresql": POSTGRES_URL, "mariadb": MARIADB_URL}


@pytest.mark.parametrize("database", [d for d in ("postgresql", "mariadb") if d in DIALECTS])
def test_capture_bench_logs_the_styles_events_and_divides_the_tps_it_shows(database: str) -> None:
    schema = f"cb_{uuid.uuid4().hex[:10]}"
    options = CaptureOptions(database=database, url=CAPTURE_URLS[database], seconds=1, rounds=1, schema=schema)
    report = run_capture_bench(options)
    summary = report.summary()

    configurations = summary["configurations"]
    runs = {name: c["runs"] for name, c in configurations.items()}
    # PostgreSQL's native capture too: `make test` installs its library on the server.
    native = ("native-field", "native-row") if database == "postgresql" else ()
    assert {name: len(r) for name, r in runs.items()} == {c: 1 for c in ("none", "field", "row", *native)}
    for (run,) in runs.values():
        assert run["transactions"] > 0
        assert run["tps"] == pytest.approx(run["transactions"] / run["seconds"], rel=0.01)
    # Without triggers nothing is logged. Row style logs one event per statement of every committed
    # transaction, so the count checks the transactions too; field style 2 per UPDATE (balance and
    # updated_at; 1 when both UPDATEs of a transaction hit one key), 3 per INSERT, 1 per DELETE.
    assert runs["none"][0]["events"] == 0
    for style in ("row", *native[1:]):
        (row,) = runs[style]
        assert row["events"] == 4 * row["transactions"]
    for style in ("field", *native[:1]):
        (field,) = runs[style]
        assert 7 * field["transactions"] <= field["events"] <= 8 * field["transactions"]

    for style in ("field", "row", *native):
        shown = configurations[style]["median_tps"]
        assert shown == runs[style][0]["tps"]
        assert summary["slowdown"][style] == round(configurations["none"]["median_tps"] / shown, 2)
    table = format_capture_report(report)
    assert f"{summary['slowdown']['row']:.2f}x" in table.splitlines()[4]

    engine = create_engine(DatabaseConfig(url=CAPTURE_URLS[database]).sqlalchemy_url())
    with engine.connect() as conn:
        left = conn.execute(text("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = :s"),
                            {"s": schema}).scalar_one()
    engine.dispose()
    assert left == 0


@pytest.mark.parametrize(("argv", "why"), [
    (["--capture", "--database", "sqlite"], "sqlite has no concurrent writers"),
    (["--capture", "--url", "sqlite:///x.db"], "sqlite has no concurrent writers"),
    (["--database", "mariadb"], "measures only --capture"),
    (["--url", "mysql://root@127.0.0.1:3306/x"], "--database mariadb measures only --capture"),
    (["--url", "oracle://u@h/db"], "the publisher does not speak 'oracle'"),
    (["--capture", "--url", "no url"], "'no url' is not a SQLAlchemy URL"),
])
def test_capture_bench_refuses_what_it_cannot_measure(capsys, argv: list[str], why: str) -> None:
    assert main(["bench", *argv]) == 2
    assert why in capsys.readouterr().err


# --- bench --snapshot: a snapshot of a large table, logged then drained, on PostgreSQL -----------

@pytest.mark.skipif("postgresql" not in DIALECTS, reason="measured on PostgreSQL only")
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "logged"])
def test_snapshot_bench_publishes_every_row_once_and_drops_its_schema(spark, tmp_path: Path, direct: bool) -> None:
    schema = f"sb_{uuid.uuid4().hex[:10]}"
    rows, limit = 2_000, 700
    options = SnapshotOptions(url=POSTGRES_URL, rows=rows, query_limit=limit, master="local[2]", schema=schema,
                              warm_up=False, workdir=tmp_path, direct=direct, chunk_rows=300 if direct else None)
    report = run_snapshot_bench(options, spark)
    summary = report.summary()

    assert report.floor.rows == rows and report.floor.bytes_read > 0
    drained = 0 if direct else rows
    assert summary["logging"]["events"] == drained and summary["logging"]["published"] == rows - drained
    assert summary["drain"]["operations"] == summary["drain"]["events"] == drained
    assert summary["drain"]["statuses"] == ({} if direct else {"S": rows})
    assert summary["drain"]["cycles"] >= drained // limit, "windows of query_limit events"
    assert summary["left_new"] == 0 and summary["complete"] is True
    documents = sorted((tmp_path / "out").glob("*.xml"))
    assert len(documents) >= report.drain.documents > 0 or direct
    operations = [op for path in documents for op in etree.parse(str(path)).getroot().find("input")]
    assert len(operations) == 2 * rows, "each row by the snapshot, then again by the resync"
    assert len({op.findtext("association") for op in operations}) == rows
    assert summary["resync"]["drain"]["operations"] == rows and summary["resync"]["snapshot_ratio"] > 0
    assert {a.get("attr-name") for op in operations[rows:] for a in op.iter("modify-attr")} >= {"resynced"}
    written = summary["write_floor"]["bytes_written"]
    on_disk = sum(path.stat().st_size for path in (tmp_path / "out").rglob("*") if path.is_file())
    assert 0 < written < on_disk, "the snapshot's documents, written before the resync's"
    assert report.copy_and_write_ratio == pytest.approx(
        report.seconds / (report.floor.seconds + report.written.seconds))
    assert re.search(r"every row published +yes", format_snapshot_report(report))
    assert re.search(r"resync of one column .* the snapshot", format_snapshot_report(report))

    assert_schema_dropped(schema)


@pytest.mark.parametrize(("argv", "why"), [
    (["--snapshot", "--capture"], "choose one"),
    (["--snapshot", "--database", "sqlite"], "postgresql only"),
    (["--snapshot", "--url", "sqlite:///x.db"], "postgresql only"),
    (["--snapshot-logged"], "it needs --snapshot"),
    (["--triggerless", "--snapshot"], "choose one"),
    (["--triggerless", "--database", "mariadb"], "postgresql only"),
    (["--triggerless", "--url", "sqlite:///x.db"], "postgresql only"),
])
def test_snapshot_bench_refuses_what_it_cannot_measure(capsys, argv: list[str], why: str) -> None:
    assert main(["bench", *argv]) == 2
    assert why in capsys.readouterr().err


# --- bench --triggerless: a triggerless cycle over a large table, on PostgreSQL ------------------


def test_triggerless_bench_publishes_exactly_the_changed_rows_and_drops_its_schema(spark, tmp_path: Path) -> None:
    from publisher.workshop.bench.triggerless import (
        TriggerlessOptions,
        format_triggerless_report,
        run_triggerless_bench,
    )

    schema = "triggerless_bench_test"
    report = run_triggerless_bench(TriggerlessOptions(url=POSTGRES_URL, rows=3000, schema=schema,
                                                      workdir=tmp_path), spark)
    assert report.changed_rows == 30 and report.changed.tables["usr"].modify == 30
    assert report.first.recorded_only and report.first.operations == 0 and report.idle.operations == 0
    assert not report.first_comparison.recorded_only and report.first_comparison.operations == 0
    assert report.complete and report.floor.rows == 3000
    assert re.search(r"exactly the changed rows published +yes", format_triggerless_report(report))
    assert_schema_dropped(schema)


def assert_schema_dropped(schema: str) -> None:
    engine = create_engine(DatabaseConfig(url=POSTGRES_URL).sqlalchemy_url())
    with engine.connect() as conn:
        left = conn.execute(text("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = :s"),
                            {"s": schema}).scalar_one()
    engine.dispose()
    assert left == 0


def test_the_floor_marks_copies_and_leaves_the_event_log_as_it_was(spark, postgresql_database, tmp_path: Path) -> None:
    """On PostgreSQL the floor's UPDATE is also timed on a copy with the event log's indexes;
    both copies are dropped, and the event log's rows stay new for the publisher."""
    from harness import Harness

    from publisher.workshop.bench.floor import measure_floor

    h = Harness(spark, postgresql_database, tmp_path)
    h.create_event_log()
    h.log(*[(2, "usr", f"idu={i}", "fname", "a", "b") for i in range(1, 51)])
    h.log((2, "usr", "idu=99", "fname", "a", "b"), status="S")
    floor = measure_floor(h.config, h.engine)
    assert floor.rows == floor.marked == 50
    assert floor.indexed_mark_seconds is not None and floor.indexed_mark_seconds > 0
    log = h.config.event_log.table
    with h.engine.connect() as conn:
        tables = conn.execute(text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
                              {"s": h.config.database.schema}).scalars().all()
        statuses = dict(conn.execute(text(f"SELECT status, COUNT(*) FROM {h.table(log)} GROUP BY status")).all())
    assert log in tables and not [t for t in tables if t.startswith(f"{log}_floor")]
    assert statuses == {"N": 50, "S": 1}
