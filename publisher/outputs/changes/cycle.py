"""The change tables as a change format: a Parquet file per table and part, renamed into the
table's folder when the cycle finishes."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from publisher.config import OutputConfig
from publisher.failpoints import reached
from publisher.outputs.changes.format import CycleOutput, FormatsWritten, remove_staged_in
from publisher.outputs.changes.tables import ChangeTableFiles, change_table_schema, table_directory
from publisher.outputs.durable import fsync_directory

CHANGES_DIRECTORY = "changes"


@dataclass(frozen=True)
class ChangeTablesCycle:
    cycle: CycleOutput
    output: OutputConfig

    @property
    def directory(self) -> Path:
        return Path(self.cycle.directory) / CHANGES_DIRECTORY

    def open_part(self, part: int) -> ChangeTableFiles:
        return ChangeTableFiles(self.cycle.tables, self.directory, self.cycle.staged(part, "parquet"),
                                self.output.change_tables, self.cycle.earlier)

    def finish(self, parts: Sequence[tuple[int, Mapping[str, int]]]) -> FormatsWritten:
        written = FormatsWritten()
        folders = set()
        for part, rows_of in parts:
            for table, rows in rows_of.items():
                folder = self.directory / table_directory(table)
                final = f"{self.cycle.cycle:012d}-{part:05d}.parquet"
                os.replace(folder / self.cycle.staged(part, "parquet"), folder / final)
                reached("changes")
                written.change_rows += rows
                written.files.append(f"{CHANGES_DIRECTORY}/{folder.name}/{final}")
                folders.add(folder)
        for folder in folders:
            fsync_directory(folder)
        return written


class ChangeTablesFormat:
    name = "change_tables"

    def enabled(self, output: OutputConfig) -> bool:
        return output.change_tables.enabled

    def start(self, cycle: CycleOutput, output: OutputConfig) -> ChangeTablesCycle:
        for table in cycle.tables.values():
            change_table_schema(table, output.change_tables)
        return ChangeTablesCycle(cycle, output)

    def remove_staged(self, directory: Path) -> None:
        changes = directory / CHANGES_DIRECTORY
        remove_staged_in([entry for entry in changes.iterdir() if entry.is_dir()] if changes.is_dir() else [])
