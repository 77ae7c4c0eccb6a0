"""A cycle's Kafka records as columns (topic, key, value, size, the headers' values), built where the
message lines are built: each data message's record is made from the message dict and its
line as they come, so the sender neither reads the message file back nor parses a line.

A data record's key is the object it stands for (as `messages.message_key` says it), so one
object's changes stay in order in one partition; a metadata record's key is its schemaId.
Headers: a data record's `operation`, `changeSequence`, `event-id` (its streamPosition: the
record_id of the change's first event) and `schemaId`; a metadata record's `schemaId` and
`fingerprint` (hex of the 8 bytes that prefix the Avro data messages of that version).

Parts written elsewhere (the executors of the Spark path) leave no columns on the driver: their
staged lines are read back into the same columns (`RecordColumns.read`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from publisher.config import MessagesConfig
from publisher.model.catalog import TableInfo
from publisher.outputs.messages.avro import SingleObjectEncoder, fingerprint
from publisher.outputs.messages.broker import BrokerError, Describe, subject_of
from publisher.outputs.messages.build import field_names

RECORD_OVERHEAD = 128
"""Bytes a record costs besides its key, value and headers, as the brokers count it against
max.message.bytes: the record batch's header (61 bytes) and the record's own varints, rounded up."""
_DATA_HEADERS = ("operation", "changeSequence", "event-id", "schemaId")
_LONG_NUMBER = re.compile(rb"[:,\[]-?\d{19}")
"""A JSON number that may not fit 64 bits, which orjson would read as a float: such a line is
read back by `json` (a string that holds one only costs the slower reader)."""

Headers = list[tuple[str, str | bytes]]


@dataclass(frozen=True)
class TableVersion:
    """What the data messages of one table are sent with: its current version's schemaId and
    data schema, and the table that gives their keys."""

    table: TableInfo
    schema_id: str
    data_schema: Mapping[str, Any]


def key_fields(table: TableInfo) -> tuple[tuple[str, str], ...]:
    """The table's key columns in key order, each with its field name: what a record's key is
    made of, as `messages.message_key` makes it."""
    fields = field_names(table)
    keys = sorted((c for c in table.data_columns if c.key_position), key=lambda c: c.key_position)
    return tuple((c.name, fields[c.name]) for c in keys)


@dataclass(frozen=True)
class _TableRecords:
    """What every data record of one table shares in a cycle."""

    topic: str
    keys: tuple[tuple[str, str], ...]
    schema_id: str
    fixed_size: int
    """The record's overhead, its header names and its schemaId, in bytes."""
    avro: SingleObjectEncoder | None


class RecordColumns:
    """Records in the order they are sent, one list per column; `size` is what the brokers
    count against their limits. A record's message is not kept: an error reads it back by its place."""

    def __init__(self, options: MessagesConfig, versions: Mapping[str, TableVersion]) -> None:
        self.options = options
        self.versions = versions
        self.topics: list[str] = []
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self.sizes: list[int] = []
        self._operations: list[str | None] = []
        """A data record's operation; None for a metadata record."""
        self._sequences: list[str] = []
        self._events: list[str] = []
        self._schema_ids: list[str | bytes] = []
        self._fingerprints: dict[int, bytes] = {}
        """A metadata record's fingerprint, by its place."""
        self._tables: dict[str, _TableRecords] = {}

    def __len__(self) -> int:
        return len(self.values)

    def add(self, line: bytes, message: dict[str, Any], describe: Describe) -> None:
        """The record of one message, given its JSON line (without the line break)."""
        try:
            if "lineage" in message:
                self._add_metadata(line, message)
            else:
                self._add_data(line, message)
        except (ValueError, TypeError, OverflowError) as exc:
            raise BrokerError(f"broker {self.options.broker}: {describe(message)} cannot be encoded as "
                              f"{self.options.encoding}: {exc}") from exc

    def _add_metadata(self, line: bytes, message: dict[str, Any]) -> None:
        schema_id = str(message["schemaId"]).encode()
        found = fingerprint(message["dataSchema"]).hex().encode()
        self._fingerprints[len(self.values)] = found
        self._append(subject_of(message, self.options.broker_subject), schema_id, line,
                     RECORD_OVERHEAD + len("schemaId") + len(schema_id) + len("fingerprint") + len(found),
                     None, "", "", schema_id)

    def _add_data(self, line: bytes, message: dict[str, Any]) -> None:
        table = self._tables.get(message["table"]) or self._table(message)
        head, data = message["headers"], message["data"]
        if len(table.keys) == 1:
            ((name, field),) = table.keys
            key = f"{name}={data.get(field)}".encode()
        else:
            key = "+".join(f"{name}={data.get(field)}" for name, field in table.keys).encode()
        value = line if table.avro is None else table.avro.encode(message)
        operation, sequence, event = head["operation"], head["changeSequence"], head["streamPosition"]
        self._append(table.topic, key, value, table.fixed_size + len(operation) + len(sequence) + len(event),
                     operation, sequence, event, table.schema_id)

    def _append(self, topic: str, key: bytes, value: bytes, fixed: int, operation: str | None, sequence: str,
                event: str, schema_id: str | bytes) -> None:
        """One record's columns: strings and numbers only, none of the garbage collector's to track."""
        self.topics.append(topic)
        self.keys.append(key)
        self.values.append(value)
        self.sizes.append(fixed + len(key) + len(value))
        self._operations.append(operation)
        self._sequences.append(sequence)
        self._events.append(event)
        self._schema_ids.append(schema_id)

    def headers(self) -> Iterator[Headers]:
        """Each record's headers in order, made as they are sent: kept, a cycle's many small
        lists would make each of the garbage collector's passes longer."""
        fingerprints = self._fingerprints
        for place, (operation, sequence, event, schema_id) in enumerate(zip(
                self._operations, self._sequences, self._events, self._schema_ids, strict=True)):
            if operation is None:
                yield [("schemaId", schema_id), ("fingerprint", fingerprints[place])]
            else:
                yield [("operation", operation), ("changeSequence", sequence), ("event-id", event),
                       ("schemaId", schema_id)]

    def _table(self, message: dict[str, Any]) -> _TableRecords:
        version = self.versions.get(message["table"])
        if version is None:
            raise BrokerError(f"broker {self.options.broker}: table {message['table']!r} has no version in this "
                              "cycle")
        avro = SingleObjectEncoder(version.data_schema) if self.options.encoding == "avro" else None
        fixed = RECORD_OVERHEAD + sum(map(len, _DATA_HEADERS)) + len(version.schema_id.encode())
        found = self._tables[message["table"]] = _TableRecords(
            subject_of(message, self.options.broker_subject), key_fields(version.table), version.schema_id, fixed,
            avro)
        return found

    def extend(self, other: RecordColumns) -> None:
        start = len(self.values)
        self.topics += other.topics
        self.keys += other.keys
        self.values += other.values
        self.sizes += other.sizes
        self._operations += other._operations
        self._sequences += other._sequences
        self._events += other._events
        self._schema_ids += other._schema_ids
        self._fingerprints.update((start + place, found) for place, found in other._fingerprints.items())

    def read(self, path: Path, describe: Describe) -> None:
        """Add the records of a message file's lines, in file order."""
        with open(path, "rb") as handle:
            for line in handle:
                raw = line.rstrip(b"\n")
                self.add(raw, json.loads(raw) if _LONG_NUMBER.search(raw) else orjson.loads(raw), describe)
