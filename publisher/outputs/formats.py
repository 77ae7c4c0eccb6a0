"""The cycle's changes as change tables and messages.

The driver reserves the cycle's change numbers and notes table versions; each part of the
publication order (the whole cycle on the driver path, a partition on the Spark path) is
written under hidden staged names; the driver then makes them visible: Parquet files renamed,
message pieces joined behind the metadata messages into the cycle's one file. Everything is on
disk before the cycle acknowledges, and a killed cycle leaves only staged files, removed by the
next one, which writes the changes again.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from publisher.config import OutputConfig
from publisher.errors import OutputStateError
from publisher.failpoints import reached
from publisher.model.catalog import TableInfo
from publisher.outputs.broker import publish_file
from publisher.outputs.change_tables import ChangeTableFiles, change_table_schema, table_directory
from publisher.outputs.durable import fsync_directory, sync_file_system, write_atomically
from publisher.outputs.messages import TableVersions, data_message, json_line, metadata_message, schema_id
from publisher.rules.changes import NO_TIME, StampedChange

CHANGES_DIRECTORY = "changes"
MESSAGES_DIRECTORY = "messages"
SEQUENCE_FILE = ".change-sequence"
"""The next change number and the latest time part used, so sequences increase across runs."""
VERSIONS_FILE = ".table-versions.json"
_STAGED = re.compile(r"^\.\d{12}-\d{5}\.(parquet|jsonl)\.staged$|^\.\d{12}\.jsonl\.tmp$")


@dataclass(frozen=True)
class ChangeNumbers:
    """Where the cycle's change sequence starts."""

    first: int
    after_time: str


def reserve_change_numbers(directory: Path, count: int, latest_time: str) -> ChangeNumbers:
    """Take `count` change numbers and record them as used before anything is written, so a
    crash can skip numbers but never reuse one. `latest_time` is the latest time part the
    cycle's changes bring."""
    path = directory / SEQUENCE_FILE
    first, after_time = 1, NO_TIME
    if path.exists():
        text = path.read_text(encoding="ascii").split()
        if len(text) != 2 or not text[0].isdigit() or not re.fullmatch(r"\d{16}", text[1]):
            raise OutputStateError(
                f"change sequence file {path}: expected '<next change number> <16-digit time part>', got "
                f"{' '.join(text)!r}; restore it (deleting it would start change numbers again at 1)"
            )
        first, after_time = int(text[0]), text[1]
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(path, f"{first + count} {max(after_time, latest_time)}\n".encode("ascii"))
    return ChangeNumbers(first, after_time)


@dataclass(frozen=True)
class FormatsContext:
    """What a part's writer needs; picklable, for the executors."""

    directory: str
    cycle: int
    tables: Mapping[str, TableInfo]
    schema_label: str
    output: OutputConfig
    schema_ids: Mapping[str, str] = field(default_factory=dict)

    @property
    def changes_directory(self) -> Path:
        return Path(self.directory) / CHANGES_DIRECTORY

    @property
    def messages_directory(self) -> Path:
        return Path(self.directory) / MESSAGES_DIRECTORY

    def staged_parquet(self, part: int) -> str:
        return f".{self.cycle:012d}-{part:05d}.parquet.staged"

    def staged_messages(self, part: int) -> Path:
        return self.messages_directory / f".{self.cycle:012d}-{part:05d}.jsonl.staged"


@dataclass(frozen=True)
class PartWritten:
    part: int
    rows: Mapping[str, int]
    """Change-table rows per table."""
    messages: int


def write_part(stamped: Iterable[StampedChange], ctx: FormatsContext, part: int) -> PartWritten:
    """Write one part of the publication order under staged names (not yet flushed), streaming:
    each change goes to its change table and to the message file as it comes."""
    options = ctx.output
    tables = (
        ChangeTableFiles(ctx.tables, ctx.changes_directory, ctx.staged_parquet(part), options.change_tables)
        if options.change_tables.enabled
        else None
    )
    messages = 0
    with contextlib.ExitStack() as stack:
        handle = None
        if tables is not None:
            stack.enter_context(tables)
        for item in stamped:
            if tables is not None:
                tables.add(item)
            if options.messages.enabled:
                if handle is None:
                    ctx.messages_directory.mkdir(parents=True, exist_ok=True)
                    handle = stack.enter_context(open(ctx.staged_messages(part), "wb"))
                table = ctx.tables[item.change.table]
                message = data_message(item, table, ctx.schema_label, options.messages, ctx.schema_ids.get(table.name))
                handle.write(json_line(message))
                messages += 1
    return PartWritten(part, {} if tables is None else tables.rows, messages)


@dataclass
class FormatsWritten:
    change_rows: int = 0
    messages: int = 0
    brokered: int = 0
    """Messages (metadata included) the broker stored."""
    files: list[str] = field(default_factory=list)


class CycleFormats:
    """One cycle's change tables and messages, from the driver's side."""

    def __init__(
        self, directory: Path, cycle: int, tables: Mapping[str, TableInfo], schema_label: str, output: OutputConfig
    ) -> None:
        self.output = output
        self.metadata: list[bytes] = []
        self.versions: TableVersions | None = None
        schema_ids: dict[str, str] = {}
        messages_directory = directory / MESSAGES_DIRECTORY
        if output.messages.enabled:
            messages_directory.mkdir(parents=True, exist_ok=True)
            self.versions = TableVersions.load(messages_directory / VERSIONS_FILE)
            now = dt.datetime.now(dt.UTC)
            options = output.messages
            layout = f"external_schema_id={options.external_schema_id},trail_header={options.trail_header}"
            for table, version in self.versions.advance((tables[name] for name in sorted(tables)), layout):
                self.metadata.append(json_line(metadata_message(table, version, schema_label, output.messages, now)))
            for name, table in tables.items():
                schema_ids[name] = schema_id(table, self.versions.version_of(name), schema_label, output.messages)
        if output.change_tables.enabled:
            for table in tables.values():
                change_table_schema(table, output.change_tables)
        self.ctx = FormatsContext(str(directory), cycle, dict(tables), schema_label, output, schema_ids)
        remove_staged(directory)

    def finish(self, parts: Iterable[PartWritten]) -> FormatsWritten:
        """Flush the staged parts to disk and make them visible in publication order."""
        ordered = sorted(parts, key=lambda p: p.part)
        directory = Path(self.ctx.directory)
        sync_file_system(directory)
        written = FormatsWritten()
        for part in ordered:
            for table, rows in part.rows.items():
                folder = self.ctx.changes_directory / table_directory(table)
                final = f"{self.ctx.cycle:012d}-{part.part:05d}.parquet"
                os.replace(folder / self.ctx.staged_parquet(part.part), folder / final)
                reached("changes")
                written.change_rows += rows
                written.files.append(f"{CHANGES_DIRECTORY}/{folder.name}/{final}")
        for folder in {self.ctx.changes_directory / table_directory(t) for p in ordered for t in p.rows}:
            fsync_directory(folder)
        if self.ctx.output.messages.enabled:
            written.messages = sum(p.messages for p in ordered)
            if self.metadata or written.messages:
                name = self._join_messages([p for p in ordered if p.messages])
                written.files.append(f"{MESSAGES_DIRECTORY}/{name}")
                if self.output.messages.broker:
                    written.brokered = publish_file(self.ctx.messages_directory / name, self.output.messages).messages
            if self.versions is not None:
                self.versions.save()
        return written

    def _join_messages(self, parts: Sequence[PartWritten]) -> str:
        """The cycle's one message file: metadata messages first, then each part's data messages."""
        folder = self.ctx.messages_directory
        name = f"{self.ctx.cycle:012d}.jsonl"
        tmp = folder / f".{name}.tmp"
        with open(tmp, "wb") as out:
            out.writelines(self.metadata)
            for part in parts:
                with open(self.ctx.staged_messages(part.part), "rb") as piece:
                    shutil.copyfileobj(piece, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, folder / name)
        reached("changes")
        fsync_directory(folder)
        for part in parts:
            self.ctx.staged_messages(part.part).unlink()
        return name


def remove_staged(directory: Path) -> None:
    """Delete what a killed cycle staged under the change tables and messages; it is written again."""
    folders = [directory / MESSAGES_DIRECTORY]
    changes = directory / CHANGES_DIRECTORY
    if changes.is_dir():
        folders += [Path(e.path) for e in os.scandir(changes) if e.is_dir()]
    for folder in folders:
        if folder.is_dir():
            for entry in os.scandir(folder):
                if _STAGED.match(entry.name):
                    Path(entry.path).unlink(missing_ok=True)
