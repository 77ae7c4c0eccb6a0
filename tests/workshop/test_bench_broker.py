"""`publisher bench --formats --broker`: the backlog drained again in pairs, its messages in files
only and also sent to a Kafka broker (Tansu, started on a free port), each pair's ratios
and their medians."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from tansu import Tansu, read_prefix

from publisher.cli import main
from publisher.workshop.bench.report import format_report
from publisher.workshop.bench.run import BenchOptions, run_benchmark

pytestmark = pytest.mark.database


def test_the_bench_times_pairs_of_drains_files_only_and_to_kafka_in_alternating_order(spark, tmp_path: Path) -> None:
    broker = Tansu(tmp_path / "tansu.log").start()
    try:
        options = BenchOptions(
            database="sqlite", rows=200, events=2_000, latency_cycles=1, reference_sample=100, master="local[2]",
            warm_up=False, workdir=tmp_path, cold=False, formats=True, broker=broker.url, encoding="avro",
            broker_pairs=2,
        )
        report = run_benchmark(options, spark)
        held = read_prefix(broker.servers, "publisher")
    finally:
        broker.stop()

    pairs = report.broker_pairs
    assert len(pairs) == 2
    for pair in pairs:
        files, kafka = pair.files_only, pair.to_kafka
        assert files.events == kafka.events == report.drain.events == 2_000, "the same backlog, set back to new"
        assert files.statuses == kafka.statuses and files.messages == kafka.messages > 0
        assert 0 < kafka.cpu_seconds and 0 < files.cpu_seconds
    data = [record for topic, records in held.items() if ".data." in topic for record in records]
    assert len(data) == sum(pair.to_kafka.messages for pair in pairs), "the files-only drains sent nothing"
    assert all(record.value[:2] == b"\xc3\x01" for record in data), "in Avro"
    walls = [pair.to_kafka.seconds / pair.files_only.seconds for pair in pairs]
    cpus = [pair.to_kafka.cpu_seconds / pair.files_only.cpu_seconds for pair in pairs]
    summary = report.summary()["broker"]
    assert summary["encoding"] == "avro" and summary["pairs"][1]["to_kafka"]["messages"] == pairs[1].to_kafka.messages
    assert summary["ratio"] == round(statistics.median(walls), 3)
    assert summary["cpu_ratio"] == round(statistics.median(cpus), 3)
    table = format_report(report)
    assert (f"messages to Kafka / files only     {statistics.median(walls):,.2f}x wall, "
            f"{statistics.median(cpus):,.2f}x CPU (median of 2 pairs of warm drains, avro)") in table
    assert "messages to Kafka (avro; 2 pairs of drains, files only and to the broker" in table
    assert f"= {walls[1]:,.2f}x   CPU " in table.split("  pair 2", 1)[1].splitlines()[0]


@pytest.mark.parametrize(("argv", "why"), [
    (["--broker", "kafka://127.0.0.1:9092"],
     "bench --broker: the messages it sends are those of --formats; add --formats"),
    (["--formats", "--broker", "nats://127.0.0.1:4222"],
     "bench --broker: expected kafka://host:port[,host:port], got 'nats://127.0.0.1:4222'"),
    (["--formats", "--encoding", "avro"],
     "bench --encoding: the encoding of the messages sent to a broker; it needs --broker"),
    (["--formats", "--repeat", "3"],
     "bench --repeat: repeats the pairs of drains that --broker times; it needs --broker"),
    (["--capture", "--formats", "--broker", "kafka://127.0.0.1:9092"],
     "bench --broker: measures the drain's messages sent to a broker, not --capture"),
])
def test_the_broker_options_refuse_what_they_cannot_measure(capsys, argv: list[str], why: str) -> None:
    assert main(["bench", *argv]) == 2
    assert capsys.readouterr().err == f"publisher: {why}\n"
