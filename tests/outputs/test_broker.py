"""Messages sent to the real NATS JetStream server of the machine (127.0.0.1:4222): the stream
holds the cycle's message file, in order, on the subjects of each table; a broker that is away
fails the cycle before anything is acknowledged; a cycle published again is stored once."""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from harness import Harness, read_messages
from nats.js.api import StreamConfig

from publisher.config import ConfigError, MessagesConfig
from publisher.config.loading import load_config
from publisher.errors import StageFailedError
from publisher.outputs.messages.broker import MESSAGE_ID_HEADER, BrokerError, publish_file, sent_size, subject_token

NATS_URL = os.environ.get("PUBLISHER_TEST_NATS_URL", "nats://127.0.0.1:4222")


@dataclasses.dataclass(frozen=True)
class Stream:
    name: str
    prefix: str


@pytest.fixture
def stream() -> Iterator[Stream]:
    """A stream and subject prefix of this test's own, deleted afterwards."""
    token = uuid.uuid4().hex[:10]
    made = Stream(f"T{token}", f"t{token}")
    yield made

    async def delete() -> None:
        connection = await nats.connect(NATS_URL)
        try:
            await connection.jetstream().delete_stream(made.name)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await connection.close()

    asyncio.run(delete())


def stored(stream: Stream) -> list[tuple[str, dict[str, Any], str]]:
    """(subject, message, Nats-Msg-Id) of every message the stream holds, in stream order."""

    async def fetch() -> list[tuple[str, dict[str, Any], str]]:
        connection = await nats.connect(NATS_URL)
        try:
            manager = connection.jetstream()
            count = (await manager.stream_info(stream.name)).state.messages
            out = []
            for seq in range(1, count + 1):
                msg = await manager.get_msg(stream.name, seq)
                out.append((msg.subject, json.loads(msg.data), (msg.headers or {}).get(MESSAGE_ID_HEADER)))
            return out
        finally:
            await connection.close()

    return asyncio.run(fetch())


def with_broker(h: Harness, stream: Stream, url: str = NATS_URL) -> None:
    messages = MessagesConfig(enabled=True, broker=url, broker_subject=stream.prefix, broker_stream=stream.name)
    h.config = dataclasses.replace(h.config, output=dataclasses.replace(h.config.output, messages=messages))


def test_the_stream_holds_the_cycles_messages_in_order_on_each_tables_subjects(harness, stream):
    h = harness
    with_broker(h, stream)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), (2, "usr", "idu=1", "fname", "Ann", "Anna"), (4, "usr", "idu=2"))
    first = h.poll()
    h.log((1, "usr", "idu=3", "fname", None, "Cy"))
    second = h.poll()

    written = read_messages(h.output)
    held = stored(stream)
    assert [message for _, message, _ in held] == written
    assert first.brokered == 4 and second.brokered == 1, "metadata once, then a data message per change"
    schema = subject_token(h.schema_label)
    assert [subject for subject, _, _ in held] == [f"{stream.prefix}.metadata.{schema}.usr"] + [
        f"{stream.prefix}.data.{schema}.usr"
    ] * 4
    assert held[0][2] == written[0]["schemaId"]
    assert len({msg_id for _, _, msg_id in held}) == 5


def test_a_cycle_sent_again_is_stored_once(sqlite_database, spark, tmp_path, stream):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    with_broker(h, stream)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), (4, "usr", "idu=2"))
    h.poll()
    (path,) = sorted((h.output / "messages").glob("*.jsonl"))

    again = publish_file(path, h.config.output.messages)

    assert (again.messages, again.duplicates) == (3, 3)
    assert len(stored(stream)) == 3


def test_a_broker_that_is_away_fails_the_cycle_before_it_acknowledges(sqlite_database, spark, tmp_path, stream):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    with_broker(h, stream, url="nats://127.0.0.1:1")
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))

    with pytest.raises(StageFailedError) as failed:
        h.poll()
    assert "nats://127.0.0.1:1" in failed.value.reason
    assert set(h.statuses().values()) == {"N"}

    with_broker(h, stream)
    h.poll()
    assert set(h.statuses().values()) == {"S"}
    held = [message for _, message, _ in stored(stream)]
    assert [m["headers"]["operation"] for m in held if "headers" in m] == ["INSERT"]
    assert [m["lineage"]["tableVersion"] for m in held if "lineage" in m] == [1], (
        "the metadata of the failed cycle is sent with the next one"
    )


def message_files(h: Harness) -> list[str]:
    """What the messages folder holds besides the table versions, hidden files included."""
    folder = h.output / "messages"
    return sorted(p.name for p in folder.iterdir() if p.name != ".table-versions.json") if folder.exists() else []


def test_a_cycle_the_broker_refuses_leaves_no_message_file_so_its_retry_writes_the_messages_once(
    sqlite_database, spark, tmp_path, stream
):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    with_broker(h, stream, url="nats://127.0.0.1:1")
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    with pytest.raises(StageFailedError):
        h.poll()
    assert message_files(h) == [], "no message file of a cycle whose messages the broker did not take"

    with_broker(h, stream)
    h.poll()
    (name,) = message_files(h)
    assert [message for _, message, _ in stored(stream)] == read_messages(h.output)
    assert [m["headers"]["operation"] for m in read_messages(h.output) if "headers" in m] == ["INSERT"]


def server_max_payload() -> int:
    async def ask() -> int:
        connection = await nats.connect(NATS_URL)
        try:
            return connection.max_payload
        finally:
            await connection.close()

    return asyncio.run(ask())


def photo_event(idu: int, size: int) -> tuple[Any, ...]:
    return (1, "usr", f"idu={idu}", "photo", None, base64.b64encode(b"\xab" * size).decode("ascii"))


def test_a_message_larger_than_the_server_takes_fails_the_cycle_naming_it_before_anything_is_sent(
    sqlite_database, spark, tmp_path, stream
):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    with_broker(h, stream)
    limit = server_max_payload()
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), photo_event(2, limit), (1, "usr", "idu=3", "fname", None, "Cy"))

    for _ in range(2):
        with pytest.raises(StageFailedError) as failed:
            h.poll()
        reason = failed.value.reason
        assert failed.value.stage == "changes"
        assert f"the data message of record_id 2 (table {h.schema_label}.usr, key idu=2) is " in reason
        size = int(reason.split(" is ", 1)[1].split(" bytes", 1)[0])
        assert size > 4 * limit // 3, "the photo's base64 and the rest of the message, as sent"
        assert f"over the server's max_payload of {limit} bytes; nothing of the cycle was sent" in reason
        assert f"Raise max_payload in the NATS server's configuration (at most 64 MiB) to {size} bytes" in reason
        assert 'turn the broker off for this output (output.messages.broker = "")' in reason
        assert set(h.statuses().values()) == {"N"}
        assert stored(stream) == [], "nothing of the cycle is sent"
        assert message_files(h) == []

    h.config = dataclasses.replace(h.config, output=dataclasses.replace(
        h.config.output, messages=dataclasses.replace(h.config.output.messages, broker="")))
    h.poll()
    assert set(h.statuses().values()) == {"S"}
    assert len(message_files(h)) == 1
    data = [m for m in read_messages(h.output) if "headers" in m]
    assert [m["headers"]["streamPosition"] for m in data] == ["1", "2", "3"]


def test_a_message_over_the_streams_max_msg_size_is_named_before_anything_is_sent(
    sqlite_database, spark, tmp_path, stream
):
    async def make() -> None:
        connection = await nats.connect(NATS_URL)
        try:
            await connection.jetstream().add_stream(
                StreamConfig(name=stream.name, subjects=[f"{stream.prefix}.>"], max_msg_size=4096))
        finally:
            await connection.close()

    asyncio.run(make())
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    with_broker(h, stream)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), photo_event(2, 4096), photo_event(3, 8192))

    with pytest.raises(StageFailedError) as failed:
        h.poll()
    reason = failed.value.reason
    assert f"the data message of record_id 2 (table {h.schema_label}.usr, key idu=2) is " in reason
    assert f"over stream {stream.name}'s max_msg_size of 4096 bytes (one of 2 messages of the cycle over it" in reason
    assert f"Raise the max_msg_size of stream {stream.name} to " in reason
    assert stored(stream) == [], "the small messages before it are not sent either"
    assert set(h.statuses().values()) == {"N"}


def test_a_message_that_fits_the_servers_max_payload_only_without_its_headers_is_refused_by_size(tmp_path, stream):
    """nats-py checks the payload alone; the server counts the headers too and would drop the
    connection in the middle of the cycle."""
    limit = server_max_payload()
    message: dict[str, Any] = {"schema": "s", "table": "t", "headers": {"streamPosition": "7"}, "data": {"x": ""}}
    filler = limit - len(json.dumps(message, separators=(",", ":")).encode()) - 10
    message["data"]["x"] = "y" * filler
    raw = json.dumps(message, separators=(",", ":")).encode()
    assert len(raw) < limit < sent_size(raw, "0" * 64)
    path = tmp_path / "000000000001.jsonl"
    path.write_bytes(raw + b"\n")
    options = MessagesConfig(enabled=True, broker=NATS_URL, broker_subject=stream.prefix, broker_stream=stream.name)

    with pytest.raises(BrokerError, match=f"the data message of record_id 7 \\(table s.t\\) is {len(raw) + 91} bytes"):
        publish_file(path, options)
    assert stored(stream) == []


def test_a_stream_that_does_not_capture_the_subjects_is_refused_by_name(sqlite_database, spark, tmp_path, stream):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    with_broker(h, stream)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    h.poll()
    other = Stream(stream.name, stream.prefix + "x")
    with_broker(h, other)
    h.log((1, "usr", "idu=2", "fname", None, "Bo"))

    with pytest.raises(StageFailedError, match=f"stream {stream.name} does not capture {other.prefix}"):
        h.poll()


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("output.messages.broker='amqp://127.0.0.1'", "expected nats://host:port"),
        ("output.messages.broker_subject='a..b'", "output.messages.broker_subject"),
        ("output.messages.broker_stream='a.b'", "output.messages.broker_stream"),
    ],
)
def test_broker_settings_are_checked_at_start(setting, complaint):
    with pytest.raises(ConfigError, match=complaint):
        load_config(overrides=["output.messages.enabled=true", setting])


def test_a_broker_needs_the_messages_switched_on():
    with pytest.raises(ConfigError, match="needs output.messages.enabled = true"):
        load_config(overrides=["output.messages.broker='nats://127.0.0.1:4222'"])
