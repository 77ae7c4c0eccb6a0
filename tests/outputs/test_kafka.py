"""Messages sent to a real Kafka-protocol broker (Tansu, started by the tests on a free port) and
read back with confluent-kafka: topics per table, keys and headers, JSON and Avro values, and
the delivery promises: a broker away or lost fails the cycle with nothing acknowledged, a message
too large is refused before anything is sent."""
from __future__ import annotations

import base64
import dataclasses
import gc
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Harness, read_messages
from tansu import Tansu, free_port, read_prefix, read_topic, topics

from publisher.cli import main
from publisher.errors import StageFailedError
from publisher.outputs.messages.broker import subject_token

pytestmark = pytest.mark.database


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tansu]:
    broker = Tansu(tmp_path_factory.mktemp("tansu") / "tansu.log").start()
    yield broker
    broker.stop()


@pytest.fixture
def prefix() -> str:
    """Topic prefix of this test's own."""
    return f"t{uuid.uuid4().hex[:10]}"


def with_kafka(h: Harness, url: str, prefix: str, **settings: Any) -> None:
    messages = dataclasses.replace(h.config.output.messages, enabled=True, broker=url, broker_subject=prefix,
                                   **settings)
    h.config = dataclasses.replace(h.config, output=dataclasses.replace(h.config.output, messages=messages))


def sqlite_harness(spark: Any, sqlite_database: Any, tmp_path: Path, path: str = "driver") -> Harness:
    h = Harness(spark, sqlite_database, tmp_path, path=path)
    h.create_usr()
    h.create_event_log()
    return h


def message_files(h: Harness) -> list[str]:
    folder = h.output / "messages"
    return sorted(p.name for p in folder.glob("*.jsonl")) if folder.exists() else []


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_json_messages_go_to_each_tables_topics_keyed_by_object_with_headers(
    spark, sqlite_database, tmp_path, tansu, prefix, path
):
    h = sqlite_harness(spark, sqlite_database, tmp_path, path)
    with_kafka(h, tansu.url, prefix, kafka_partitions=3)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), (2, "usr", "idu=1", "fname", "Ann", "Anna"),
          (1, "usr", "idu=2", "fname", None, "Bo"), (4, "usr", "idu=1"))
    result = h.poll()

    schema = subject_token(h.schema_label)
    data_topic, metadata_topic = f"{prefix}.data.{schema}.usr", f"{prefix}.metadata.{schema}.usr"
    assert topics(tansu.servers, prefix) == {data_topic: 3, metadata_topic: 3}
    assert result.brokered == 5 and set(h.statuses().values()) == {"S"}
    lines = (h.output / "messages" / message_files(h)[0]).read_bytes().splitlines()
    written = read_messages(h.output)
    (metadata,) = read_topic(tansu.servers, metadata_topic)
    assert metadata.value == lines[0]
    assert metadata.key == written[0]["schemaId"].encode()
    data = sorted(read_topic(tansu.servers, data_topic), key=lambda r: r.timestamp)
    assert sorted(r.value for r in data) == sorted(lines[1:]), "every data line, byte for byte"
    by_key: dict[bytes, list[dict[str, Any]]] = {}
    for record in sorted(data, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(record.key, []).append(json.loads(record.value))
        assert len({r.partition for r in data if r.key == record.key}) == 1, "one object, one partition"
    assert {k: [m["headers"]["operation"] for m in v] for k, v in by_key.items()} == {
        b"idu=1": ["INSERT", "UPDATE", "DELETE"], b"idu=2": ["INSERT"]}
    for record in data:
        message = json.loads(record.value)
        assert record.headers == {
            "operation": message["headers"]["operation"].encode(),
            "changeSequence": message["headers"]["changeSequence"].encode(),
            "event-id": message["headers"]["streamPosition"].encode(),
            "schemaId": written[0]["schemaId"].encode(),
        }


def kafka_threads() -> int:
    """The process's librdkafka threads (each named rdk:…)."""
    return sum((task / "comm").read_text().startswith("rdk:") for task in Path("/proc/self/task").iterdir())


def test_a_cycle_leaves_no_client_of_the_brokers_behind_it(spark, sqlite_database, tmp_path, tansu, prefix):
    """The cycle's producer goes with the cycle, not at a later garbage collection: its threads
    would wake through the next cycles, and its end would weigh on whichever collection came."""
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    with_kafka(h, tansu.url, prefix)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    before = kafka_threads()
    gc.disable()
    try:
        result = h.poll()
        left = kafka_threads() - before
    finally:
        gc.enable()
    assert result.brokered == 2 and set(h.statuses().values()) == {"S"}
    assert left == 0


def test_a_broker_that_is_away_fails_the_cycle_in_bounded_time_in_one_line_and_the_retry_sends(
    spark, sqlite_database, tmp_path, tansu, prefix, capsys
):
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    away = f"kafka://127.0.0.1:{free_port()}"
    with_kafka(h, away, prefix, kafka_timeout=2.0)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))

    started = time.monotonic()
    with pytest.raises(StageFailedError) as failed:
        h.poll()
    assert time.monotonic() - started < 2.0 + 10, "within kafka_timeout and the cycle's own work"
    reason = failed.value.reason
    assert reason.startswith(f"broker {away}: cannot reach the brokers within 2 s") and "\n" not in reason
    assert set(h.statuses().values()) == {"N"} and message_files(h) == []

    config = tmp_path / "publisher.toml"
    config.write_text(
        f'[database]\nurl = "{sqlite_database.url}"\n[publisher]\ntables = ["usr"]\n[output]\n'
        f'directory = "{h.output}"\n[output.messages]\nenabled = true\nbroker = "{away}"\nkafka_timeout = 2\n',
        encoding="utf-8")
    capsys.readouterr()
    assert main(["poll", "-c", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"broker {away}: cannot reach the brokers" in err[0] and "Traceback" not in err[0]

    with_kafka(h, tansu.url, prefix)
    h.poll()
    assert set(h.statuses().values()) == {"S"}
    held = read_prefix(tansu.servers, prefix)
    assert [len(records) for records in held.values()] == [1, 1], "the data message, and the metadata again"


def test_a_broker_lost_in_the_middle_of_a_cycle_fails_it_unacknowledged_and_the_retry_sends(
    spark, sqlite_database, tmp_path, prefix, monkeypatch
):
    import confluent_kafka

    broker = Tansu(tmp_path / "tansu.log").start()

    class LosingTheBroker(confluent_kafka.Producer):
        """Sends 20 records and sees them acknowledged, then the broker is killed."""

        sent = 0

        def produce(self, *args: Any, **kwargs: Any) -> None:
            super().produce(*args, **kwargs)
            LosingTheBroker.sent += 1
            if LosingTheBroker.sent == 20:
                assert self.flush(10) == 0
                broker.stop()

    try:
        h = sqlite_harness(spark, sqlite_database, tmp_path)
        with_kafka(h, broker.url, prefix, kafka_timeout=3.0)
        h.log(*[(1, "usr", f"idu={i}", "fname", None, f"n{i}") for i in range(1, 51)])
        monkeypatch.setattr(confluent_kafka, "Producer", LosingTheBroker)
        started = time.monotonic()
        with pytest.raises(StageFailedError) as failed:
            h.poll()
        assert time.monotonic() - started < 3.0 + 10
        reason = failed.value.reason
        assert reason == (f"broker {broker.url}: the brokers acknowledged 20 of 51 messages "
                          "(output.messages.kafka_timeout = 3 s): Local: Message timed out")
        assert "\n" not in reason
        assert set(h.statuses().values()) == {"N"}

        monkeypatch.undo()
        broker.start()  # empty: Tansu keeps its topics in memory
        h.poll()
        assert set(h.statuses().values()) == {"S"}
        data = read_topic(broker.servers, f"{prefix}.data.{subject_token(h.schema_label)}.usr")
        assert sorted(int(r.headers["event-id"]) for r in data) == sorted(h.statuses())
    finally:
        broker.stop()


def photo_event(idu: int, size: int) -> tuple[Any, ...]:
    return (1, "usr", f"idu={idu}", "photo", None, base64.b64encode(b"\xab" * size).decode("ascii"))


def test_a_message_over_the_producers_limit_fails_the_cycle_naming_it_before_anything_is_sent(
    spark, sqlite_database, tmp_path, tansu, prefix
):
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    with_kafka(h, tansu.url, prefix, kafka_max_message_bytes=4096)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), photo_event(2, 8192), (1, "usr", "idu=3", "fname", None, "Cy"))

    with pytest.raises(StageFailedError) as failed:
        h.poll()
    reason = failed.value.reason
    assert f"the data message of record_id 2 (table {h.schema_label}.usr, key idu=2) is " in reason
    size = int(reason.split(" is ", 1)[1].split(" bytes", 1)[0])
    assert size > 4 * 8192 // 3
    assert ("over the producer's message.max.bytes (output.messages.kafka_max_message_bytes) of 4096 bytes; "
            "nothing of the cycle was sent. Raise output.messages.kafka_max_message_bytes") in reason
    assert set(h.statuses().values()) == {"N"} and message_files(h) == []
    assert all(records == [] for records in read_prefix(tansu.servers, prefix).values())


def test_a_message_over_the_topics_max_message_bytes_is_refused_by_name(
    spark, sqlite_database, tmp_path, tansu, prefix
):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"{prefix}.data.main.usr"
    admin = AdminClient({"bootstrap.servers": tansu.servers})
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config={"max.message.bytes": "2048"})])
    created[topic].result(10)
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    with_kafka(h, tansu.url, prefix)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), photo_event(2, 4096))

    with pytest.raises(StageFailedError) as failed:
        h.poll()
    reason = failed.value.reason
    assert "the data message of record_id 2 (table main.usr, key idu=2) is " in reason
    assert f"over topic {topic}'s max.message.bytes of 2048 bytes; nothing of the cycle was sent" in reason
    assert f"Raise max.message.bytes of topic {topic}" in reason
    assert all(records == [] for records in read_prefix(tansu.servers, prefix).values())


def test_a_transactional_cycle_is_read_whole_by_a_read_committed_consumer(
    spark, sqlite_database, tmp_path, tansu, prefix, monkeypatch
):
    import confluent_kafka

    topic = f"{prefix}.data.main.usr"
    before_commit: list[list[bytes]] = []

    class Watched(confluent_kafka.Producer):
        def commit_transaction(self, *args: Any) -> None:
            self.flush(10)
            before_commit.append([r.value for r in read_topic(tansu.servers, topic, committed_only=True)])
            super().commit_transaction(*args)

    monkeypatch.setattr(confluent_kafka, "Producer", Watched)
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    with_kafka(h, tansu.url, prefix, transactional=True)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), (1, "usr", "idu=2", "fname", None, "Bo"))
    h.poll()
    h.log((2, "usr", "idu=1", "fname", "Ann", "Anna"))
    h.poll()

    assert [len(seen) for seen in before_commit] == [0, 2], "a cycle's records are seen only once it commits"

    data = read_topic(tansu.servers, topic, committed_only=True)
    assert [json.loads(r.value)["data"]["fname"] for r in data] == ["Ann", "Bo", "Anna"]
    assert set(h.statuses().values()) == {"S"}


def test_a_subscribers_messages_go_to_topics_of_its_own(spark, sqlite_database, tmp_path, tansu, prefix):
    from test_subscriptions import Site

    from publisher.config.loading import load_config

    site = Site(spark, sqlite_database, tmp_path, {"hr": 'tables = ["usr"]'}, {"a": "hr"})
    own = prefix + "a"
    site.path.write_text(
        site.path.read_text(encoding="utf-8")
        + f'[output.messages]\nenabled = true\nbroker = "{tansu.url}"\nbroker_subject = "{prefix}"\n'
        + f'[subscribers.a.formats.messages]\nenabled = true\nbroker = "{tansu.url}"\nbroker_subject = "{own}"\n',
        encoding="utf-8")
    site.config = load_config(site.path)
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    site.poll()
    assert site.check_out("a")["events"] > 0

    status_mode = read_prefix(tansu.servers, prefix)
    subscriber = read_prefix(tansu.servers, own)
    for held, topic in ((status_mode, prefix), (subscriber, own)):
        assert [t for t in held if ".data." in t] == [f"{topic}.data.main.usr"]
        assert f"{topic}.metadata.main.usr" in held
        (record,) = held[f"{topic}.data.main.usr"]
        assert json.loads(record.value)["data"] == {"idu": 1, "fname": "Ann", "lname": "Lee"}


def test_a_transactional_cycle_that_fails_after_sending_leaves_nothing_a_read_committed_consumer_sees(
    spark, sqlite_database, tmp_path, tansu, prefix, monkeypatch
):
    from publisher.outputs.messages import kafka

    h = sqlite_harness(spark, sqlite_database, tmp_path)
    with_kafka(h, tansu.url, prefix, transactional=True)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), (1, "usr", "idu=2", "fname", None, "Bo"))
    flushed = kafka._Progress.flushed

    def a_failure_once_every_record_is_sent(self: Any) -> int:
        left = flushed(self)
        self.failed.first = "a failure after every record was sent"
        return left

    monkeypatch.setattr(kafka._Progress, "flushed", a_failure_once_every_record_is_sent)
    acknowledged = r"the brokers acknowledged 3 of 3 messages \(output.messages.kafka_timeout = 30 s\): a failure"
    with pytest.raises(StageFailedError, match=acknowledged):
        h.poll()
    topic = f"{prefix}.data.main.usr"
    assert len(read_topic(tansu.servers, topic)) == 2, "sent, in a transaction then aborted"
    assert set(h.statuses().values()) == {"N"}

    monkeypatch.undo()
    h.poll()
    assert set(h.statuses().values()) == {"S"}
    committed = [json.loads(r.value)["data"]["fname"] for r in read_topic(tansu.servers, topic, committed_only=True)]
    assert committed[-2:] == ["Ann", "Bo"]
    if committed != ["Ann", "Bo"]:
        pytest.xfail("Tansu 0.6.0 shows the records of an aborted transaction to read_committed consumers (it "
                     "hides an open transaction's only until the abort); Apache Kafka hides them")


def test_a_failure_with_sasl_credentials_names_the_broker_and_never_the_password(
    spark, sqlite_database, tmp_path, prefix
):
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    away = f"kafka://127.0.0.1:{free_port()}"
    with_kafka(h, away, prefix, kafka_timeout=2.0, kafka_security_protocol="sasl_plaintext",
               kafka_sasl_mechanism="PLAIN", kafka_sasl_username="svc", kafka_sasl_password="pa55-s3cret")
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))

    with pytest.raises(StageFailedError) as failed:
        h.poll()
    assert failed.value.reason.startswith(f"broker {away}: cannot reach the brokers within 2 s")
    assert "pa55-s3cret" not in str(failed.value) and "pa55-s3cret" not in repr(h.config)
