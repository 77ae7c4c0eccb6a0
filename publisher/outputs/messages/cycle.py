"""The messages as a change format: the metadata messages of the table versions the cycle
starts, then each part's data messages, joined into the cycle's one JSON-lines file (and sent
to the broker, when one is set)."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from publisher.config import OutputConfig
from publisher.config.brokers import is_kafka
from publisher.failpoints import reached
from publisher.outputs.changes.format import CycleOutput, FormatsWritten, remove_staged_in
from publisher.outputs.durable import fsync_directory
from publisher.outputs.messages.broker import described, publish_file
from publisher.outputs.messages.build import (
    TableVersions,
    data_message,
    data_schema,
    json_line,
    message_key,
    metadata_message,
    schema_id,
)
from publisher.outputs.messages.kafka import publish_to_kafka
from publisher.outputs.messages.records import RecordColumns, TableVersion
from publisher.rules.changes import StampedChange

MESSAGES_DIRECTORY = "messages"
VERSIONS_FILE = ".table-versions.json"
_COUNT = "messages"


@dataclass
class MessagesPart:
    """One part's data messages, in a staged file opened with the first of them."""

    cycle: MessagesCycle
    part: int
    count: int = 0
    _handle: IO[bytes] | None = None
    _records: RecordColumns | None = None

    def __post_init__(self) -> None:
        self._records = self.cycle.part_records(self.part)

    def add(self, item: StampedChange) -> None:
        if self._handle is None:
            self.cycle.directory.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.cycle.staged(self.part), "wb")  # noqa: SIM115 - closed by close()
        item, table = self.cycle.cycle.described(item)
        options = self.cycle.output.messages
        message = data_message(item, table, self.cycle.cycle.schema_label, options,
                               self.cycle.schema_ids.get(table.name))
        line = json_line(message)
        self._handle.write(line)
        if self._records is not None:
            self._records.add(line[:-1], message, self.cycle.described)
        self.count += 1

    def close(self) -> Mapping[str, int]:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        return {_COUNT: self.count}


@dataclass
class MessagesCycle:
    cycle: CycleOutput
    output: OutputConfig
    versions: TableVersions
    metadata: list[tuple[bytes, dict[str, Any]]] = field(default_factory=list)
    """The metadata messages of the versions this cycle starts, first in its file: each line
    with its message."""
    schema_ids: dict[str, str] = field(default_factory=dict)
    kafka_versions: dict[str, TableVersion] | None = None
    """With a Kafka broker, each table's current version, as its data records are built."""
    _records: dict[int, RecordColumns] | None = None
    """Each part's Kafka records, built as its lines are written in this process; parts written
    elsewhere (the cycle is pickled to the executors without them) are read back from their files."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_records": None}

    def build_kafka_records(self) -> None:
        """Build each part's Kafka records beside its lines, with the tables' current versions."""
        tables, options, label = self.cycle.tables, self.output.messages, self.cycle.schema_label
        self.kafka_versions = {name: TableVersion(table, self.schema_ids[name], data_schema(table, label, options))
                               for name, table in tables.items()}
        self._records = {}

    def part_records(self, part: int) -> RecordColumns | None:
        """The records of a part about to be written here; None without a Kafka broker or away
        from the driver."""
        if self._records is None or self.kafka_versions is None:
            return None
        built = self._records[part] = RecordColumns(self.output.messages, self.kafka_versions)
        return built

    @property
    def directory(self) -> Path:
        return Path(self.cycle.directory) / MESSAGES_DIRECTORY

    def staged(self, part: int) -> Path:
        return self.directory / self.cycle.staged(part, "jsonl")

    def open_part(self, part: int) -> MessagesPart:
        return MessagesPart(self, part)

    def finish(self, parts: Sequence[tuple[int, Mapping[str, int]]]) -> FormatsWritten:
        """With a broker, the file becomes visible only once the broker is reached and every
        message fits: a cycle it refuses leaves no message file, so its retry writes the cycle's
        messages once (a broker lost while sending leaves the file, as a crash would). Kafka's
        producer is given the records first and sends them while the file is written."""
        written = FormatsWritten(messages=sum(counts.get(_COUNT, 0) for _, counts in parts))
        if self.metadata or written.messages:
            written_parts = [part for part, counts in parts if counts.get(_COUNT)]
            try:
                if self.kafka_versions is not None:
                    written.brokered = publish_to_kafka(
                        self._kafka_records(written_parts), lambda: self._place(self._join(written_parts)),
                        lambda index: self._message_at(written_parts, index), self.described).messages
                elif self.output.messages.broker:
                    joined = self._join(written_parts)
                    written.brokered = publish_file(joined, self.output.messages, lambda: self._place(joined),
                                                    self.described).messages
                else:
                    self._place(self._join(written_parts))
            finally:
                self._joined.unlink(missing_ok=True)
                for part in written_parts:
                    self.staged(part).unlink(missing_ok=True)
            written.files.append(f"{MESSAGES_DIRECTORY}/{self.name}")
        self.versions.save()
        return written

    @property
    def name(self) -> str:
        return f"{self.cycle.cycle:012d}.jsonl"

    @property
    def _joined(self) -> Path:
        """The cycle's message file under its hidden temporary name."""
        return self.directory / f".{self.name}.tmp"

    def _join(self, parts: Sequence[int]) -> Path:
        """The cycle's one message file, under its hidden temporary name: metadata messages
        first, then each part's data messages."""
        tmp = self._joined
        with open(tmp, "wb") as out:
            out.writelines(line for line, _ in self.metadata)
            for part in parts:
                with open(self.staged(part), "rb") as piece:
                    shutil.copyfileobj(piece, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        return tmp

    def _place(self, joined: Path) -> Path:
        """Make the joined file visible under the cycle's name."""
        path = self.directory / self.name
        os.replace(joined, path)
        reached("changes")
        fsync_directory(self.directory)
        return path

    def _kafka_records(self, parts: Sequence[int]) -> RecordColumns:
        """The cycle's records in file order: the metadata messages', then each part's."""
        assert self.kafka_versions is not None
        records = RecordColumns(self.output.messages, self.kafka_versions)
        for line, message in self.metadata:
            records.add(line[:-1], message, self.described)
        for part in parts:
            built = (self._records or {}).get(part)
            if built is None:
                records.read(self.staged(part), self.described)
            else:
                records.extend(built)
        return records

    def _message_at(self, parts: Sequence[int], index: int) -> dict[str, Any]:
        """The message of the cycle's record at `index` (in file order), read back for an error."""
        if index < len(self.metadata):
            return self.metadata[index][1]
        index -= len(self.metadata)
        for part in parts:
            with open(self.staged(part), "rb") as lines:
                for line in lines:
                    if index == 0:
                        return dict(json.loads(line))
                    index -= 1
        raise IndexError(f"the cycle has no message {index}")

    def described(self, message: dict[str, Any]) -> str:
        """A message for an error, with the object a data message stands for."""
        table = None if "lineage" in message else self.cycle.tables.get(message["table"])
        return described(message, None if table is None else message_key(message, table))


class MessagesFormat:
    name = "messages"

    def enabled(self, output: OutputConfig) -> bool:
        return output.messages.enabled

    def start(self, cycle: CycleOutput, output: OutputConfig) -> MessagesCycle:
        """Advance the table versions: a metadata message for each table first seen or changed."""
        directory = Path(cycle.directory) / MESSAGES_DIRECTORY
        directory.mkdir(parents=True, exist_ok=True)
        started = MessagesCycle(cycle, output, TableVersions.load(directory / VERSIONS_FILE))
        options, tables = output.messages, cycle.tables
        now = dt.datetime.now(dt.UTC)
        layout = f"external_schema_id={options.external_schema_id},trail_header={options.trail_header}"
        for table, version in started.versions.advance((tables[name] for name in sorted(tables)), layout):
            message = metadata_message(table, version, cycle.schema_label, options, now)
            started.metadata.append((json_line(message), message))
        for name, table in tables.items():
            started.schema_ids[name] = schema_id(table, started.versions.version_of(name), cycle.schema_label, options)
        if is_kafka(options.broker):
            started.build_kafka_records()
        return started

    def remove_staged(self, directory: Path) -> None:
        remove_staged_in([directory / MESSAGES_DIRECTORY])
