"""The messages' Kafka broker: once a cycle's message file is on disk, its messages go to Kafka
topics in file order through an idempotent producer with acks=all, and the cycle acknowledges
only after the brokers have acknowledged every one of them.

Topics are named as the NATS subjects are: `<prefix>.metadata.<schema>.<table>` and
`<prefix>.data.<schema>.<table>`, created when missing. A data message's key is the object it
stands for (as `messages.message_key` says it), so one object's changes stay in order in one partition; a
metadata message's key is its schemaId. Every record carries headers: a data message's
`operation`, `changeSequence`, `event-id` (its streamPosition: the record_id of the change's
first event) and `schemaId`; a metadata message's `schemaId` and `fingerprint` (hex of the
8 bytes that prefix the Avro data messages of that version).

Every record is built and measured before the first one is sent: a record over its topic's
max.message.bytes or the producer's message.max.bytes refuses the cycle whole, naming it.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from publisher.config import MessagesConfig
from publisher.config.brokers import kafka_servers
from publisher.model.catalog import TableInfo
from publisher.outputs.messages.avro import SingleObjectEncoder, fingerprint
from publisher.outputs.messages.broker import BrokerError, Describe, Published, described, subject_of
from publisher.outputs.messages.build import field_names

RECORD_OVERHEAD = 128
"""Bytes a record costs besides its key, value and headers, as the brokers count it against
max.message.bytes: the record batch's header (61 bytes) and the record's own varints, rounded up."""
TOPIC_LIMIT = "max.message.bytes"
_LONG_NUMBER = re.compile(rb"[:,\[]-?\d{19}")
"""A JSON number that may not fit 64 bits, which orjson would read as a float: such a line is
read by `json` (a string that holds one only costs the slower reader)."""
_PRODUCER_LIMIT = "the producer's message.max.bytes (output.messages.kafka_max_message_bytes)"


@dataclass(frozen=True)
class TableVersion:
    """What the data messages of one table are sent with: its current version's schemaId and
    data schema, and the table that gives their keys."""

    table: TableInfo
    schema_id: str
    data_schema: Mapping[str, Any]


Headers = list[tuple[str, str | bytes | None]]


@dataclass(slots=True)
class Record:
    topic: str
    key: bytes
    value: bytes
    headers: Headers
    message: dict[str, Any]
    size: int
    """The bytes the brokers count against their limits."""

    @classmethod
    def of(cls, topic: str, key: bytes, value: bytes, headers: Headers, message: dict[str, Any]) -> Record:
        size = RECORD_OVERHEAD + len(key) + len(value) + sum(len(name) + len(v or b"") for name, v in headers)
        return cls(topic, key, value, headers, message, size)


@dataclass(frozen=True)
class _Table:
    """What every data record of one table shares in a cycle."""

    topic: str
    keys: tuple[tuple[str, str], ...]
    schema_id: bytes
    avro: SingleObjectEncoder | None


@dataclass
class _Encoders:
    options: MessagesConfig
    versions: Mapping[str, TableVersion]
    tables: dict[str, _Table] = field(default_factory=dict)

    def _table(self, message: dict[str, Any]) -> _Table:
        found = self.tables.get(message["table"])
        if found is None:
            version = self.versions.get(message["table"])
            if version is None:
                raise BrokerError(f"{described(message)}: table {message['table']!r} has no version in this cycle")
            avro = SingleObjectEncoder(version.data_schema) if self.options.encoding == "avro" else None
            found = self.tables[message["table"]] = _Table(
                subject_of(message, self.options.broker_subject), key_fields(version.table),
                version.schema_id.encode(), avro)
        return found

    def record(self, raw: bytes, message: dict[str, Any]) -> Record:
        if "lineage" in message:
            schema_id = str(message["schemaId"])
            headers: Headers = [("schemaId", schema_id.encode()),
                                ("fingerprint", fingerprint(message["dataSchema"]).hex().encode())]
            return Record.of(subject_of(message, self.options.broker_subject), schema_id.encode(), raw, headers,
                             message)
        table = self._table(message)
        head, data = message["headers"], message["data"]
        headers = [
            ("operation", head["operation"].encode()),
            ("changeSequence", head["changeSequence"].encode()),
            ("event-id", head["streamPosition"].encode()),
            ("schemaId", table.schema_id),
        ]
        key = "+".join(f"{name}={data.get(field)}" for name, field in table.keys)
        value = raw if table.avro is None else table.avro.encode(message)
        return Record.of(table.topic, key.encode(), value, headers, message)


def key_fields(table: TableInfo) -> tuple[tuple[str, str], ...]:
    """The table's key columns in key order, each with its field name: what a record's key is
    made of, as `messages.message_key` makes it."""
    fields = field_names(table)
    keys = sorted((c for c in table.data_columns if c.key_position), key=lambda c: c.key_position)
    return tuple((c.name, fields[c.name]) for c in keys)


def _records(path: Path, encoders: _Encoders, describe: Describe) -> Iterator[Record]:
    with open(path, "rb") as handle:
        for line in handle:
            raw = line.rstrip(b"\n")
            message = json.loads(raw) if _LONG_NUMBER.search(raw) else orjson.loads(raw)
            try:
                yield encoders.record(raw, message)
            except (ValueError, TypeError, OverflowError) as exc:
                encoding = encoders.options.encoding
                raise BrokerError(f"{describe(message)} cannot be encoded as {encoding}: {exc}") from exc


def client_settings(options: MessagesConfig) -> dict[str, Any]:
    """What both the admin client and the producer are given; librdkafka's own log goes nowhere
    (its failures come back as errors, said once in the cycle's failure)."""
    settings: dict[str, Any] = {
        "bootstrap.servers": kafka_servers(options.broker),
        "client.id": options.kafka_client_id,
        "security.protocol": options.kafka_security_protocol,
        "log_level": 0,
    }
    if options.kafka_security_protocol.startswith("sasl_"):
        settings.update({
            "sasl.mechanism": options.kafka_sasl_mechanism,
            "sasl.username": options.kafka_sasl_username,
            "sasl.password": options.kafka_sasl_password,
        })
    return settings


def publish_to_kafka(
    path: Path, options: MessagesConfig, versions: Mapping[str, TableVersion],
    place: Callable[[], Path] | None = None, describe: Describe = described,
) -> Published:
    """Send every message of the file, in order, and wait for the brokers to acknowledge each.
    Nothing is sent unless the brokers answer, the topics exist and every record fits; then
    `place`, when given, makes the file visible before the first record goes."""
    try:
        return _Sending(options, describe).publish(path, versions, place)
    except BrokerError as exc:
        raise BrokerError(_hidden(f"broker {options.broker}: {exc}", options)) from None
    except Exception as exc:  # noqa: BLE001 - any client failure is the broker's, reported in one line
        raise BrokerError(_hidden(f"broker {options.broker}: {type(exc).__name__}: {exc}".rstrip(": "),
                                  options)) from None


def _hidden(text: str, options: MessagesConfig) -> str:
    """A failure's line with the SASL password masked, should the client echo it; one line."""
    if options.kafka_sasl_password:
        text = text.replace(options.kafka_sasl_password, "***")
    return " ".join(text.splitlines())


class _Sending:
    def __init__(self, options: MessagesConfig, describe: Describe) -> None:
        self.options = options
        self.describe = describe
        self.errors: list[str] = []
        self.settings = {**client_settings(options), "error_cb": self._error}

    def _error(self, error: Any) -> None:
        self.errors.append(str(error.str() if hasattr(error, "str") else error))

    def _cause(self, fallback: object) -> str:
        return self.errors[-1] if self.errors else str(fallback)

    def publish(self, path: Path, versions: Mapping[str, TableVersion], place: Callable[[], Path] | None) -> Published:
        from confluent_kafka.admin import AdminClient

        records = list(_records(path, _Encoders(self.options, versions), self.describe))
        admin = AdminClient(self.settings)
        topics = sorted({record.topic for record in records})
        limits = self._prepare_topics(admin, topics)
        self._check_sizes(records, limits)
        if place is not None:
            place()
        return Published(self._produce(records), 0)

    def _prepare_topics(self, admin: Any, topics: list[str]) -> dict[str, int]:
        """Reach the brokers, create the missing topics, and say each topic's limit."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, NewTopic

        timeout = self.options.kafka_timeout
        try:
            existing = set(admin.list_topics(timeout=timeout).topics)
        except KafkaException as exc:
            raise BrokerError(f"cannot reach the brokers within {timeout:g} s: {self._cause(exc)}") from None
        missing = [topic for topic in topics if topic not in existing]
        if missing:
            created = admin.create_topics(
                [NewTopic(topic, num_partitions=self.options.kafka_partitions,
                          replication_factor=self.options.kafka_replication) for topic in missing],
                request_timeout=timeout)
            for topic, future in created.items():
                try:
                    future.result(timeout=timeout)
                except KafkaException as exc:
                    if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                        raise BrokerError(f"cannot create topic {topic}: {exc.args[0].str()}") from None
        limits = {}
        if topics:
            described = admin.describe_configs([ConfigResource("topic", topic) for topic in topics],
                                               request_timeout=timeout)
            for resource, future in described.items():
                try:
                    entry = future.result(timeout=timeout).get(TOPIC_LIMIT)
                except KafkaException as exc:
                    raise BrokerError(f"cannot read topic {resource.name}'s {TOPIC_LIMIT} (the size check needs "
                                      f"DescribeConfigs on the topics): {exc.args[0].str()}") from None
                if entry is not None and entry.value and entry.value.isdigit():
                    limits[resource.name] = int(entry.value)
        return limits

    def _check_sizes(self, records: list[Record], limits: Mapping[str, int]) -> None:
        """Refuse the cycle, naming its first record too large, before any is sent."""
        producer_limit = self.options.kafka_max_message_bytes
        over = [(record, min(producer_limit, limits.get(record.topic, producer_limit))) for record in records]
        over = [(record, limit) for record, limit in over if record.size > limit]
        if not over:
            return
        record, limit = over[0]
        largest = max(r.size for r, _ in over)
        topic_limit = limits.get(record.topic, producer_limit)
        if topic_limit < producer_limit:
            limited_by = f"topic {record.topic}'s {TOPIC_LIMIT}"
            remedy = f"{TOPIC_LIMIT} of topic {record.topic} (and the brokers' message.max.bytes)"
        else:
            limited_by = _PRODUCER_LIMIT
            remedy = ("output.messages.kafka_max_message_bytes (with the topics' max.message.bytes and the "
                      "brokers' message.max.bytes)")
        others = "" if len(over) == 1 else (
            f" (one of {len(over)} messages of the cycle over it, the largest {largest} bytes)")
        raise BrokerError(
            f"{self.describe(record.message)} is {record.size} bytes as sent, over {limited_by} of {limit} bytes"
            f"{others}; nothing of the cycle was sent. Raise {remedy} to {largest} bytes or more, or turn the broker "
            'off for this output (output.messages.broker = "") to publish the messages to files only'
        )

    def _produce(self, records: list[Record]) -> int:
        from confluent_kafka import Producer

        options = self.options
        timeout = options.kafka_timeout
        settings = {
            **self.settings,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": max(1, int(timeout * 1000)),
            "message.max.bytes": options.kafka_max_message_bytes + RECORD_OVERHEAD,
            "linger.ms": 5,
        }
        if options.transactional:
            settings["transactional.id"] = f"{options.kafka_client_id}.{options.broker_subject}"
        producer = Producer(settings)
        if options.transactional:
            producer.init_transactions(timeout)
            producer.begin_transaction()
        delivered = _Delivered()
        for record in records:
            while not delivered.stalled(timeout):
                try:
                    producer.produce(record.topic, record.value, record.key, headers=record.headers,
                                     on_delivery=delivered)
                    break
                except BufferError:  # the client's queue is full: wait for the brokers to take some
                    producer.poll(0.1)
        while producer.flush(1.0) and not delivered.stalled(timeout):
            pass
        if delivered.failed or delivered.count < len(records):
            if options.transactional:
                producer.abort_transaction(timeout)
            cause = delivered.failed or self._cause("no answer")
            raise BrokerError(f"the brokers acknowledged {delivered.count} of {len(records)} messages "
                              f"(output.messages.kafka_timeout = {timeout:g} s): {cause}")
        if options.transactional:
            producer.commit_transaction(timeout)
        return delivered.count


class _Delivered:
    """The delivery reports: how many records the brokers acknowledged, and the first failure."""

    def __init__(self) -> None:
        self.count = 0
        self.failed = ""
        self._reported = time.monotonic()

    def __call__(self, error: Any, _message: Any) -> None:
        self._reported = time.monotonic()
        if error is None:
            self.count += 1
        elif not self.failed:
            self.failed = error.str()

    def stalled(self, timeout: float) -> bool:
        """Whether no report has come for `timeout` seconds: a large cycle may take longer than
        that in all, as long as the brokers keep acknowledging."""
        return time.monotonic() - self._reported > timeout
