"""The messages' Kafka broker: once a cycle's message file is on disk, its records
(`records.RecordColumns`) go to Kafka topics in file order through an idempotent producer with
acks=all, and the cycle acknowledges only after the brokers have acknowledged every one of them.

Topics are named as the NATS subjects are: `<prefix>.metadata.<schema>.<table>` and
`<prefix>.data.<schema>.<table>`, created when missing.

Every record is built and measured before the first one is sent: a record over its topic's
max.message.bytes or the producer's message.max.bytes refuses the cycle whole, naming it.
The producer batches what it is given (PRODUCER_SETTINGS) and reports deliveries that failed
only: a record not reported failed once the queue is empty was acknowledged.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from publisher.config import MessagesConfig
from publisher.config.brokers import kafka_servers
from publisher.outputs.messages.broker import BrokerError, Describe, Published, described
from publisher.outputs.messages.records import RECORD_OVERHEAD, RecordColumns

T = TypeVar("T")

TOPIC_LIMIT = "max.message.bytes"
_PRODUCER_LIMIT = "the producer's message.max.bytes (output.messages.kafka_max_message_bytes)"


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


PRODUCER_SETTINGS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "delivery.report.only.error": True,
}
"""Idempotent, every in-sync replica; records wait up to 20 ms to fill batches of up to 1 MB
or 10,000 records, so a cycle goes in few requests."""


def publish_to_kafka(
    records: RecordColumns, place: Callable[[], Path], message_at: Callable[[int], dict[str, Any]],
    describe: Describe = described,
) -> Published:
    """Send the cycle's records and wait for the brokers to acknowledge each. Nothing is sent
    unless the brokers answer, the topics exist and every record fits; then the producer is given
    every record and, while it sends them, `place` writes the cycle's message file and makes it
    visible. `message_at` gives the message of a record by its place, for an error."""
    options = records.options
    sending = _Sending(options, describe)
    try:
        _one_line(options, lambda: sending.start(records, message_at))
        try:
            place()
        except BaseException:
            sending.abandon()
            raise
        return Published(_one_line(options, sending.wait), 0)
    finally:
        sending.release()


def _one_line(options: MessagesConfig, step: Callable[[], T]) -> T:
    """A step of the sending, any failure of it said in one line naming the broker."""
    try:
        return step()
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
        self.failed = _Failed()
        self.producer: Any = None
        self.progress: _Progress | None = None
        self.expected = self.produced = 0

    def _error(self, error: Any) -> None:
        self.errors.append(str(error.str() if hasattr(error, "str") else error))

    def _cause(self, fallback: object) -> str:
        return self.errors[-1] if self.errors else str(fallback)

    def start(self, records: RecordColumns, message_at: Callable[[int], dict[str, Any]]) -> None:
        """Reach the brokers, prepare the topics, check every record's size, then give the
        producer every record."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.settings)
        limits = self._prepare_topics(admin, sorted(set(records.topics)))
        self._check_sizes(records, limits, message_at)
        self._produce(records)

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

    def _check_sizes(self, records: RecordColumns, limits: Mapping[str, int],
                     message_at: Callable[[int], dict[str, Any]]) -> None:
        """Refuse the cycle, naming its first record too large, before any is sent."""
        producer_limit = self.options.kafka_max_message_bytes
        if not records or max(records.sizes) <= min([producer_limit, *limits.values()]):
            return
        over = [(index, size, min(producer_limit, limits.get(topic, producer_limit)))
                for index, (topic, size) in enumerate(zip(records.topics, records.sizes, strict=True))]
        over = [(index, size, limit) for index, size, limit in over if size > limit]
        if not over:
            return
        index, size, limit = over[0]
        topic = records.topics[index]
        largest = max(size for _, size, _ in over)
        topic_limit = limits.get(topic, producer_limit)
        if topic_limit < producer_limit:
            limited_by = f"topic {topic}'s {TOPIC_LIMIT}"
            remedy = f"{TOPIC_LIMIT} of topic {topic} (and the brokers' message.max.bytes)"
        else:
            limited_by = _PRODUCER_LIMIT
            remedy = ("output.messages.kafka_max_message_bytes (with the topics' max.message.bytes and the "
                      "brokers' message.max.bytes)")
        others = "" if len(over) == 1 else (
            f" (one of {len(over)} messages of the cycle over it, the largest {largest} bytes)")
        raise BrokerError(
            f"{self.describe(message_at(index))} is {size} bytes as sent, over {limited_by} of {limit} bytes"
            f"{others}; nothing of the cycle was sent. Raise {remedy} to {largest} bytes or more, or turn the broker "
            'off for this output (output.messages.broker = "") to publish the messages to files only'
        )

    def _produce(self, records: RecordColumns) -> None:
        from confluent_kafka import Producer

        options = self.options
        settings = {
            **self.settings,
            **PRODUCER_SETTINGS,
            "message.timeout.ms": max(1, int(options.kafka_timeout * 1000)),
            "message.max.bytes": options.kafka_max_message_bytes + RECORD_OVERHEAD,
            "on_delivery": self.failed,
        }
        if options.transactional:
            settings["transactional.id"] = f"{options.kafka_client_id}.{options.broker_subject}"
        self.producer = producer = Producer(settings)
        if options.transactional:
            producer.init_transactions(options.kafka_timeout)
            producer.begin_transaction()
        self.progress = _Progress(producer, self.failed, options.kafka_timeout)
        self.expected = len(records)
        self.produced = _produced(producer, records, self.progress)

    def wait(self) -> int:
        """Wait for every record to be acknowledged (then commit the transaction) or to fail
        (then abort it); how many were acknowledged."""
        options, producer, timeout = self.options, self.producer, self.options.kafka_timeout
        assert self.progress is not None, "wait() follows start()"
        left = self.progress.flushed()
        acknowledged = self.produced - self.failed.count - left
        if self.failed.first or acknowledged < self.expected:
            if options.transactional:
                producer.abort_transaction(timeout)
            cause = self.failed.first or self._cause("no answer")
            raise BrokerError(f"the brokers acknowledged {acknowledged} of {self.expected} messages "
                              f"(output.messages.kafka_timeout = {timeout:g} s): {cause}")
        if options.transactional:
            producer.commit_transaction(timeout)
        return acknowledged

    def release(self) -> None:
        """Destroy the producer now, with its threads and connections, what it still holds
        dropped: it and this sending refer to each other, so it would otherwise live on, its
        threads waking, until a later full garbage collection, which would then pay for it."""
        producer, self.producer, self.progress = self.producer, None, None
        if producer is not None:
            producer.purge()

    def abandon(self) -> None:
        """The cycle failed while the records were being sent: drop what is not sent yet."""
        if self.options.transactional:
            self.producer.abort_transaction(self.options.kafka_timeout)
        else:
            self.producer.purge()
            self.producer.flush(0)


def _produced(producer: Any, records: RecordColumns, progress: _Progress) -> int:
    """Give the producer every record, in order; how many it took before nothing moved."""
    produce = producer.produce
    produced = 0
    for topic, value, key, headers in zip(records.topics, records.values, records.keys, records.headers(),
                                          strict=True):
        while True:
            try:
                produce(topic, value, key, headers=headers)
                break
            except BufferError:  # the client's queue is full: wait for the brokers to take some
                producer.poll(0.1)
                if progress.stalled():
                    return produced
        produced += 1
    return produced


class _Failed:
    """The deliveries that failed (the producer reports no other): how many, and the first reason."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def __call__(self, error: Any, _message: Any) -> None:
        if error is not None:
            self.count += 1
            self.first = self.first or error.str()


class _Progress:
    """Whether the brokers still take records: the producer's queue shrinks, or failures come."""

    def __init__(self, producer: Any, failed: _Failed, timeout: float) -> None:
        self.producer = producer
        self.failed = failed
        self.timeout = timeout
        self._seen = (len(producer), failed.count)
        self._moved = time.monotonic()

    def stalled(self) -> bool:
        """Whether nothing moved for `timeout` seconds: a large cycle may take longer than that
        in all, as long as the brokers keep acknowledging."""
        now = (len(self.producer), self.failed.count)
        if now != self._seen:
            self._seen, self._moved = now, time.monotonic()
        return time.monotonic() - self._moved > self.timeout

    def flushed(self) -> int:
        """Wait until every record is acknowledged or failed, or nothing moves; the records left."""
        while (left := self.producer.flush(1.0)) and not self.stalled():
            pass
        return int(left)
