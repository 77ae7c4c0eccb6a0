"""What a change format is: how the cycle's changes, in publication order, become files beside
the documents (`formats` runs them; each format's module says how it lays them out).

A format's cycle is started on the driver, before any change is written, and is shipped to the
executors; each part of the publication order (the whole cycle on the driver path, a partition
on the Spark path) goes through a `FormatPart` that writes under hidden staged names; once every
part is flushed, the driver's `finish` makes them visible. A killed cycle leaves only staged
files, which `remove_staged` deletes before the next cycle writes the changes again.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from publisher.config import OutputConfig
from publisher.model.catalog import TableInfo
from publisher.rules.changes import StampedChange

STAGED = re.compile(r"^\.\d{12}-\d{5}\.(parquet|jsonl)\.staged$|^\.\d{12}\.jsonl\.tmp$")
"""What a killed cycle may leave in a format's folders."""


@dataclass(frozen=True)
class CycleOutput:
    """Where and of what a cycle writes its changes; picklable, for the executors."""

    directory: str
    cycle: int
    tables: Mapping[str, TableInfo]
    schema_label: str
    earlier: frozenset[str] = frozenset()
    """The tables described by an earlier shape than they have now (`model.shapes`)."""

    def described(self, item: StampedChange) -> tuple[StampedChange, TableInfo]:
        """A change and its table as the cycle describes them."""
        table = self.tables[item.change.table]
        return (item.within(table) if item.change.table in self.earlier else item), table

    def staged(self, part: int, suffix: str) -> str:
        """The hidden name of one part's file until the cycle makes it visible."""
        return f".{self.cycle:012d}-{part:05d}.{suffix}.staged"


@dataclass
class FormatsWritten:
    """What the formats of one cycle made visible."""

    change_rows: int = 0
    messages: int = 0
    brokered: int = 0
    """Messages (metadata included) the broker stored."""
    files: list[str] = field(default_factory=list)

    def add(self, other: FormatsWritten) -> None:
        self.change_rows += other.change_rows
        self.messages += other.messages
        self.brokered += other.brokered
        self.files += other.files


class FormatPart(Protocol):
    """One part of the publication order, written as the changes come."""

    def add(self, item: StampedChange) -> None: ...

    def close(self) -> Mapping[str, int]:
        """Flush the part (not yet synced) and say what it wrote, as counts by name."""
        ...


class FormatCycle(Protocol):
    """One cycle of a format: parts opened anywhere, finished on the driver."""

    def open_part(self, part: int) -> FormatPart: ...

    def finish(self, parts: Sequence[tuple[int, Mapping[str, int]]]) -> FormatsWritten:
        """Make the parts visible in part order, given what each wrote; the staged files are
        already flushed to disk."""
        ...


class ChangeFormat(Protocol):
    """A way of publishing changes beside XDS, with its settings in `OutputConfig`."""

    name: str

    def enabled(self, output: OutputConfig) -> bool: ...

    def start(self, cycle: CycleOutput, output: OutputConfig) -> FormatCycle:
        """Check the tables can be written and prepare the cycle (on the driver)."""
        ...

    def remove_staged(self, directory: Path) -> None: ...


def remove_staged_in(folders: Sequence[Path]) -> None:
    """Delete the staged files a killed cycle left in `folders`."""
    for folder in folders:
        if folder.is_dir():
            for entry in folder.iterdir():
                if STAGED.match(entry.name):
                    entry.unlink(missing_ok=True)
