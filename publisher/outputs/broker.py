"""The messages' broker: once a cycle's message file is on disk, its messages go to a
NATS JetStream stream in file order, and the cycle acknowledges only after the stream has
acknowledged every one of them.

Subjects: `<prefix>.metadata.<schema>.<table>` and `<prefix>.data.<schema>.<table>`. Each
message carries a `Nats-Msg-Id` that hashes what it says (not its change number), so a cycle
published again after a crash is stored once within the stream's duplicate window, while a
change that differs in any value is never taken for a duplicate.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from publisher.config import MessagesConfig, mask_url
from publisher.errors import OutputStateError

MESSAGE_ID_HEADER = "Nats-Msg-Id"
_NOT_A_TOKEN = re.compile(r"[^A-Za-z0-9_-]")
CONNECT_TIMEOUT = 5.0
ACK_TIMEOUT = 60.0
"""Seconds to wait for the stream to acknowledge a cycle's last message."""


class BrokerError(OutputStateError):
    """The broker cannot be reached or does not store the messages; nothing is acknowledged."""


def subject_token(name: str) -> str:
    """A schema or table name as one subject token: characters NATS gives a meaning (. * > and
    white space) and any other outside [A-Za-z0-9_-] become _; the message itself names them exactly."""
    return _NOT_A_TOKEN.sub("_", name) or "_"


def subject_of(message: dict[str, Any], prefix: str) -> str:
    if "lineage" in message:
        lineage = message["lineage"]
        return f"{prefix}.metadata.{subject_token(lineage['schema'])}.{subject_token(lineage['table'])}"
    return f"{prefix}.data.{subject_token(message['schema'])}.{subject_token(message['table'])}"


def message_id(message: dict[str, Any]) -> str:
    """A metadata message is its schemaId; a data message is the hash of its change without the
    change sequence, which a cycle published again numbers anew."""
    if "lineage" in message:
        return str(message["schemaId"])
    headers = {k: v for k, v in message["headers"].items() if k != "changeSequence"}
    what = {**message, "headers": headers}
    return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Published:
    messages: int
    duplicates: int
    """Messages the stream already held (same Nats-Msg-Id within its duplicate window)."""


def publish_file(path: Path, options: MessagesConfig) -> Published:
    """Send every message of the file, in order, and wait for the stream to store each."""
    try:
        return asyncio.run(_publish(path, options))
    except BrokerError:
        raise
    except Exception as exc:  # noqa: BLE001 - any client failure is the broker's, reported in one line
        raise BrokerError(f"broker {mask_url(options.broker)}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc


def _messages(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    with open(path, "rb") as handle:
        for line in handle:
            yield line.rstrip(b"\n"), json.loads(line)


async def _publish(path: Path, options: MessagesConfig) -> Published:
    import nats
    from nats.js.api import StreamConfig
    from nats.js.errors import NotFoundError

    errors: list[Exception] = []

    async def remember(error: Exception) -> None:
        errors.append(error)

    try:
        connection = await asyncio.wait_for(
            nats.connect(options.broker, connect_timeout=CONNECT_TIMEOUT, allow_reconnect=False, error_cb=remember),
            CONNECT_TIMEOUT,
        )
    except (asyncio.TimeoutError, OSError, nats.errors.Error) as exc:
        cause = errors[-1] if errors else exc
        raise BrokerError(
            f"cannot connect to {mask_url(options.broker)} within {CONNECT_TIMEOUT:.0f} s: {cause}"
        ) from None
    try:
        stream = connection.jetstream()
        subjects = [f"{options.broker_subject}.>"]
        try:
            info = await stream.stream_info(options.broker_stream)
            if not set(subjects) <= set(info.config.subjects or []):
                raise BrokerError(
                    f"stream {options.broker_stream} does not capture {subjects[0]} (its subjects: "
                    f"{', '.join(info.config.subjects or [])}); set output.messages.broker_stream or broker_subject"
                )
        except NotFoundError:
            await stream.add_stream(StreamConfig(name=options.broker_stream, subjects=subjects))
        futures = []
        for raw, message in _messages(path):
            futures.append(await stream.publish_async(
                subject_of(message, options.broker_subject),
                raw,
                stream=options.broker_stream,
                headers={MESSAGE_ID_HEADER: message_id(message)},
            ))
        done, pending = await asyncio.wait(futures, timeout=ACK_TIMEOUT) if futures else (set(), set())
        if pending:
            raise BrokerError(
                f"stream {options.broker_stream} acknowledged {len(done)} of {len(futures)} messages within "
                f"{ACK_TIMEOUT:.0f} s"
            )
        duplicates = sum(bool(future.result().duplicate) for future in futures)
        return Published(len(futures), duplicates)
    finally:
        await connection.close()
