"""The messages' broker: once a cycle's message file is on disk, its messages go to a
NATS JetStream stream in file order, and the cycle acknowledges only after the stream has
acknowledged every one of them.

Subjects: `<prefix>.metadata.<schema>.<table>` and `<prefix>.data.<schema>.<table>`. Each
message carries a `Nats-Msg-Id` that hashes what it says (not its change number), so a cycle
published again after a crash is stored once within the stream's duplicate window, while a
change that differs in any value is never taken for a duplicate.

Before the first message goes, every message of the file is measured as the server counts it
(payload and headers) against the server's `max_payload` and the stream's `max_msg_size`: a
cycle holding a message too large is refused whole, naming it, instead of being half sent.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from publisher.config import MessagesConfig
from publisher.config.database import mask_url
from publisher.errors import OutputStateError

MESSAGE_ID_HEADER = "Nats-Msg-Id"
_NOT_A_TOKEN = re.compile(r"[^A-Za-z0-9_-]")
CONNECT_TIMEOUT = 5.0
ACK_TIMEOUT = 60.0
"""Seconds to wait for the stream to acknowledge a cycle's last message."""


_HEADERS_SIZE = len(b"NATS/1.0\r\n") + len(f"{MESSAGE_ID_HEADER}: ") + len(b"\r\n\r\n")
"""The bytes the headers add to a message besides its Nats-Msg-Id's value, as nats-py sends them."""
_DATA_ID_SIZE = 64
"""A data message's Nats-Msg-Id: a SHA-256 in hex."""
_DATA_MESSAGE = b'{"schema":'
"""How a data message's line begins (a metadata message's begins with its schemaId)."""


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


def sent_size(raw: bytes, message_id: str) -> int:
    """The bytes the server holds against its max_payload (and a stream against its
    max_msg_size): the message and its headers. nats-py checks the payload alone, and a message
    that fits only without its headers makes the server drop the connection."""
    return _HEADERS_SIZE + len(message_id.encode("utf-8")) + len(raw)


def described(message: dict[str, Any], key: str | None = None) -> str:
    """Which message, for an error: the event (record_id of the operation's first event) and
    object, or the table version, it stands for."""
    if "lineage" in message:
        lineage = message["lineage"]
        return f"the metadata message of table {lineage['schema']}.{lineage['table']} ({message['schemaId']})"
    where = f"table {message['schema']}.{message['table']}" + ("" if key is None else f", key {key}")
    return f"the data message of record_id {message['headers']['streamPosition']} ({where})"


@dataclass(frozen=True)
class Published:
    messages: int
    duplicates: int
    """Messages the stream already held (same Nats-Msg-Id within its duplicate window)."""


Describe = Callable[[dict[str, Any]], str]


def publish_file(
    path: Path, options: MessagesConfig, place: Callable[[], Path] | None = None, describe: Describe = described
) -> Published:
    """Send every message of the file, in order, and wait for the stream to store each. Nothing
    is sent unless the broker is reached, the stream captures the subjects and every message
    fits; then `place`, when given, makes the file visible (and says where it now is) before
    the first message goes."""
    try:
        return asyncio.run(_publish(path, options, place, describe))
    except BrokerError:
        raise
    except Exception as exc:  # noqa: BLE001 - any client failure is the broker's, reported in one line
        raise BrokerError(f"broker {mask_url(options.broker)}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc


def _messages(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    with open(path, "rb") as handle:
        for line in handle:
            yield line.rstrip(b"\n"), json.loads(line)


def _too_large(path: Path, limit: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's messages larger than `limit` as sent, with their size. Only a metadata
    message or a data message near the limit is parsed: a data message's id has a fixed size."""
    with open(path, "rb") as handle:
        for line in handle:
            raw = line.rstrip(b"\n")
            if raw.startswith(_DATA_MESSAGE) and _HEADERS_SIZE + _DATA_ID_SIZE + len(raw) <= limit:
                continue
            message = json.loads(raw)
            size = sent_size(raw, message_id(message))
            if size > limit:
                yield size, message


def _check_sizes(path: Path, options: MessagesConfig, limit: int, limited_by: str, remedy: str,
                 describe: Describe) -> None:
    """Refuse the cycle, naming its first message too large for the broker, before any is sent."""
    first: tuple[int, dict[str, Any]] | None = None
    count = largest = 0
    for size, message in _too_large(path, limit):
        first = first or (size, message)
        count, largest = count + 1, max(largest, size)
    if first is None:
        return
    size, message = first
    others = "" if count == 1 else f" (one of {count} messages of the cycle over it, the largest {largest} bytes)"
    raise BrokerError(
        f"broker {mask_url(options.broker)}: {describe(message)} is {size} bytes as sent, over {limited_by} of "
        f"{limit} bytes{others}; nothing of the cycle was sent. Raise {remedy} to {largest} bytes or more, or "
        'turn the broker off for this output (output.messages.broker = "") to publish the messages to files only'
    )


async def _publish(path: Path, options: MessagesConfig, place: Callable[[], Path] | None,
                   describe: Describe) -> Published:
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
            info = await stream.add_stream(StreamConfig(name=options.broker_stream, subjects=subjects))
        limit, limited_by = connection.max_payload, "the server's max_payload"
        remedy = "max_payload in the NATS server's configuration (at most 64 MiB)"
        stream_limit = info.config.max_msg_size or 0
        if 0 < stream_limit < limit:
            limit, limited_by = stream_limit, f"stream {options.broker_stream}'s max_msg_size"
            remedy = f"the max_msg_size of stream {options.broker_stream}"
        _check_sizes(path, options, limit, limited_by, remedy, describe)
        if place is not None:
            path = place()
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
