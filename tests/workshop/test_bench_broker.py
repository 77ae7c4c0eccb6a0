"""`publisher bench --formats --broker`: the backlog drained a second time with its messages
also sent to a Kafka broker (Tansu, started on a free port), timed beside the files-only drain."""
from __future__ import annotations

from pathlib import Path

import pytest
from tansu import Tansu, read_prefix

from publisher.cli import main
from publisher.workshop.bench.report import format_report
from publisher.workshop.bench.run import BenchOptions, run_benchmark

pytestmark = pytest.mark.database


def test_the_bench_times_the_drain_to_kafka_beside_the_files_only_drain(spark, tmp_path: Path) -> None:
    broker = Tansu(tmp_path / "tansu.log").start()
    try:
        options = BenchOptions(
            database="sqlite", rows=200, events=2_000, latency_cycles=1, reference_sample=100, master="local[2]",
            warm_up=False, workdir=tmp_path, cold=False, formats=True, broker=broker.url, encoding="avro",
        )
        report = run_benchmark(options, spark)
        held = read_prefix(broker.servers, "publisher")
    finally:
        broker.stop()

    drain, brokered = report.drain, report.brokered
    assert brokered is not None
    assert brokered.events == drain.events == 2_000, "the same backlog, set back to new"
    assert brokered.statuses == drain.statuses and brokered.messages == drain.messages > 0
    data = [record for topic, records in held.items() if ".data." in topic for record in records]
    assert len(data) == brokered.messages, "every message of the second drain sent, none of the first's"
    assert all(record.value[:2] == b"\xc3\x01" for record in data), "in Avro"
    summary = report.summary()["broker"]
    assert summary["encoding"] == "avro" and summary["drain"]["messages"] == brokered.messages
    assert summary["ratio"] == round(brokered.seconds / drain.seconds, 3)
    table = format_report(report)
    assert f"messages to Kafka / files only     {brokered.seconds / drain.seconds:,.2f}x (warm drains, avro)" in table
    assert "messages to Kafka (avro; the backlog set back to new and drained again" in table


@pytest.mark.parametrize(("argv", "why"), [
    (["--broker", "kafka://127.0.0.1:9092"],
     "bench --broker: the messages it sends are those of --formats; add --formats"),
    (["--formats", "--broker", "nats://127.0.0.1:4222"],
     "bench --broker: expected kafka://host:port[,host:port], got 'nats://127.0.0.1:4222'"),
    (["--formats", "--encoding", "avro"],
     "bench --encoding: the encoding of the messages sent to a broker; it needs --broker"),
    (["--capture", "--formats", "--broker", "kafka://127.0.0.1:9092"],
     "bench --broker: measures the drain's messages sent to a broker, not --capture"),
])
def test_the_broker_options_refuse_what_they_cannot_measure(capsys, argv: list[str], why: str) -> None:
    assert main(["bench", *argv]) == 2
    assert capsys.readouterr().err == f"publisher: {why}\n"
