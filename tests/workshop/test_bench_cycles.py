"""The bench's drains compare cycle for cycle: a backlog made in small transactions gives cycles of
query_limit events, and each cycle's resident sizes are recorded."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import DIALECTS, POSTGRES_URL
from sqlalchemy import create_engine, text

from publisher.cli import main
from publisher.config import DatabaseConfig
from publisher.workshop.bench.mix import WorkloadError
from publisher.workshop.bench.report import format_report
from publisher.workshop.bench.run import BenchOptions, run_benchmark
from publisher.workshop.bench.workload import ROUNDS, rounds_of


def test_the_events_per_transaction_set_how_many_transactions_make_the_backlog() -> None:
    assert rounds_of(5_000_000, None) == ROUNDS
    assert rounds_of(5_000_000, 1_000) == 5_000
    assert rounds_of(1_000_001, 1_000) == 1_001, "none larger than asked"
    assert rounds_of(10_000, 1_000) == ROUNDS, "never fewer than the workload's rounds"
    with pytest.raises(WorkloadError, match="at least 1"):
        rounds_of(1_000, 0)


def test_bench_refuses_transactions_of_no_event(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--transaction-events", "0"])
    assert "--transaction-events" in capsys.readouterr().err


@pytest.mark.skipif("postgresql" not in DIALECTS, reason="transactions are logged on PostgreSQL")
def test_small_transactions_make_every_cycle_query_limit_events(spark, tmp_path: Path) -> None:
    """Twenty transactions of 150 events would make cycles of 600 (a cut window takes the rest of
    its transaction); transactions of 40 keep each cycle within 40 events past query_limit."""
    schema = f"bc_{uuid.uuid4().hex[:10]}"
    events, limit, per_transaction = 3_000, 500, 40
    options = BenchOptions(
        url=POSTGRES_URL, rows=300, events=events, query_limit=limit, latency_cycles=1, reference_sample=100,
        master="local[2]", schema=schema, warm_up=False, workdir=tmp_path, cold=False,
        transaction_events=per_transaction,
    )
    report = run_benchmark(options, spark)
    engine = create_engine(DatabaseConfig(url=POSTGRES_URL).sqlalchemy_url())
    try:
        with engine.connect() as conn:
            transactions = conn.execute(text(
                f"SELECT COUNT(DISTINCT transaction_id) FROM {schema}.event_log WHERE status <> 'N'"
            )).scalar_one()
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    finally:
        engine.dispose()

    drained = report.drain
    assert report.workload.transactions == events // per_transaction
    assert transactions == events // per_transaction + options.latency_cycles
    assert sum(drained.cycle_events) == drained.events == events
    assert all(limit <= n < limit + per_transaction for n in drained.cycle_events[:-1]), drained.cycle_events
    assert len(drained.cycle_memory) == drained.cycles
    for memory in drained.cycle_memory:
        assert 0 < memory["driver_bytes"] <= memory["driver_peak_bytes"]
    peaks = [memory["driver_peak_bytes"] for memory in drained.cycle_memory]
    assert max(peaks) <= report.memory.driver, "the process's peak holds every cycle's"
    assert report.summary()["drain"]["cycle_memory"] == drained.cycle_memory
    assert f"({drained.cycles} cycles)" in format_report(report)
