"""The cycle's changes in every change format that is on (change tables, messages).

The driver reserves the cycle's change numbers and starts each format's cycle; each part of the
publication order (the whole cycle on the driver path, a partition on the Spark path) goes to
every format as it streams by (`write_part`); the driver then flushes once and has each format
make its parts visible (`CycleFormats.finish`). Everything is on disk before the cycle
acknowledges. The formats are registered in FORMATS, each in a module of its own behind the
`change_format.ChangeFormat` protocol.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from publisher.config import OutputConfig
from publisher.errors import OutputStateError
from publisher.model.catalog import TableInfo
from publisher.outputs.changes.cycle import ChangeTablesFormat
from publisher.outputs.changes.format import ChangeFormat, CycleOutput, FormatCycle, FormatPart, FormatsWritten
from publisher.outputs.durable import sync_file_system, write_atomically
from publisher.outputs.messages.cycle import MessagesFormat
from publisher.rules.changes import NO_TIME, StampedChange

FORMATS: tuple[ChangeFormat, ...] = (ChangeTablesFormat(), MessagesFormat())
"""Every change format, in the order a cycle makes them visible."""
SEQUENCE_FILE = ".change-sequence"
"""The next change number and the latest time part used, so sequences increase across runs."""

__all__ = ["FORMATS", "CycleFormats", "FormatsWritten", "PartWritten", "reserve_change_numbers", "write_part"]


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
class PartWritten:
    part: int
    counts: Mapping[str, Mapping[str, int]]
    """By format name, what the part wrote (`FormatPart.close`)."""


StartedFormats = tuple[tuple[str, FormatCycle], ...]
"""The cycles of the formats that are on, by name; picklable, for the executors."""


def write_part(stamped: Iterable[StampedChange], formats: StartedFormats, part: int) -> PartWritten:
    """Write one part of the publication order under staged names (not yet flushed), streaming:
    each change goes to every format's part as it comes."""
    opened: list[tuple[str, FormatPart]] = []
    try:
        for name, cycle in formats:
            opened.append((name, cycle.open_part(part)))
        for item in stamped:
            for _, writer in opened:
                writer.add(item)
    except BaseException:
        for _, writer in opened:
            with contextlib.suppress(Exception):
                writer.close()
        raise
    return PartWritten(part, _close_all(opened))


def _close_all(opened: list[tuple[str, FormatPart]]) -> dict[str, Mapping[str, int]]:
    """Close every format's part, even after one refuses what it holds (a change table lays out
    a batch when it flushes it); then raise the first refusal."""
    counts: dict[str, Mapping[str, int]] = {}
    refused: Exception | None = None
    for name, writer in opened:
        try:
            counts[name] = writer.close()
        except Exception as exc:  # noqa: BLE001 - raised below, once every part is closed
            refused = refused or exc
    if refused is not None:
        raise refused
    return counts


class CycleFormats:
    """One cycle's change formats, from the driver's side."""

    def __init__(
        self, directory: Path, cycle: int, tables: Mapping[str, TableInfo], schema_label: str, output: OutputConfig,
        earlier: frozenset[str] = frozenset(),
    ) -> None:
        out = CycleOutput(str(directory), cycle, dict(tables), schema_label, earlier)
        self.directory = directory
        self.started: StartedFormats = tuple((f.name, f.start(out, output)) for f in FORMATS if f.enabled(output))
        remove_staged(directory)

    def finish(self, parts: Iterable[PartWritten]) -> FormatsWritten:
        """Flush the staged parts to disk and make them visible in publication order."""
        ordered = sorted(parts, key=lambda p: p.part)
        sync_file_system(self.directory)
        written = FormatsWritten()
        for name, cycle in self.started:
            written.add(cycle.finish([(p.part, p.counts.get(name, {})) for p in ordered]))
        return written


def remove_staged(directory: Path) -> None:
    """Delete what a killed cycle staged in any format; it is written again."""
    for change_format in FORMATS:
        change_format.remove_staged(directory)
