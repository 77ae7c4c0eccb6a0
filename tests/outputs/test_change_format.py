"""A change format is a module behind `change_format.ChangeFormat` and an entry in FORMATS: a
format the package has never seen, registered beside the others, gets every change of a cycle
in publication order, numbered as the change tables number them, on both cycle paths, and its
files appear only once the cycle finishes them."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from pyspark import cloudpickle
from test_formats import PREFIX, change_rows, switch_on

from publisher.config import OutputConfig
from publisher.outputs import formats
from publisher.outputs.changes.format import CycleOutput, FormatsWritten, remove_staged_in
from publisher.rules.changes import StampedChange

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the executors cannot import the tests


@dataclass
class LinesPart:
    """One part's changes as lines `<change number> <table> <operation> <record_id>`."""

    path: Path
    lines: int = 0
    handle: IO[str] | None = None

    def add(self, item: StampedChange) -> None:
        if self.handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        change = item.change
        self.handle.write(f"{item.number} {change.table} {change.operation} {change.record_id}\n")
        self.lines += 1

    def close(self) -> Mapping[str, int]:
        if self.handle is not None:
            self.handle.close()
        return {"lines": self.lines}


@dataclass
class LinesCycle:
    cycle: CycleOutput

    def staged(self, part: int) -> Path:
        return Path(self.cycle.directory) / "lines" / self.cycle.staged(part, "jsonl")

    def open_part(self, part: int) -> LinesPart:
        return LinesPart(self.staged(part))

    def finish(self, parts: Sequence[tuple[int, Mapping[str, int]]]) -> FormatsWritten:
        name = f"lines/{self.cycle.cycle:012d}.txt"
        with open(Path(self.cycle.directory) / name, "w", encoding="utf-8") as out:
            for part, counts in parts:
                if counts.get("lines"):
                    out.write(self.staged(part).read_text(encoding="utf-8"))
                    os.unlink(self.staged(part))
        return FormatsWritten(files=[name])


class LinesFormat:
    name = "lines"

    def enabled(self, output: OutputConfig) -> bool:
        return True

    def start(self, cycle: CycleOutput, output: OutputConfig) -> LinesCycle:
        return LinesCycle(cycle)

    def remove_staged(self, directory: Path) -> None:
        remove_staged_in([directory / "lines"])


LINES = LinesFormat()


@pytest.fixture
def lines_format(monkeypatch: pytest.MonkeyPatch) -> LinesFormat:
    monkeypatch.setattr(formats, "FORMATS", (*formats.FORMATS, LINES))
    return LINES


def test_a_registered_format_gets_every_change_in_publication_order(harness, lines_format):
    h = harness
    switch_on(h)
    h.log(
        (1, "usr", "idu=1", "fname", None, "Ann"),
        (1, "usr", "idu=2", "fname", None, "Bob"),
        (2, "usr", "idu=1", "fname", "Ann", "Anne"),
        (4, "usr", "idu=2"),
    )
    result = h.poll()
    assert result.events == 4
    [name] = [f for f in result.format_files if f.startswith("lines/")]
    lines = (h.output / name).read_text().splitlines()
    expected = [
        f"{int(row[PREFIX + 'change_seq'][16:])} usr {row[PREFIX + 'operation']} {row[PREFIX + 'stream_position']}"
        for row in change_rows(h) if row[PREFIX + "change_oper"] != "B"
    ]
    assert lines == expected
    assert [line.split()[2:] for line in lines] == [["INSERT", "1"], ["INSERT", "2"], ["UPDATE", "3"], ["DELETE", "4"]]
    assert not [p for p in (h.output / "lines").iterdir() if p.name.startswith(".")], "staged files are gone"
