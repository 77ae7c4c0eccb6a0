"""A triggerless publisher's state: every published row's values as the last cycle published
them, kept in Arrow IPC files under the output directory (`.publisher-triggerless/`), per table in
buckets by a hash of the key, so that one bucket of the old state and the same bucket of the
tables now are compared at a time and memory does not grow with the tables.

Generations keep a crash from losing or repeating anything (docs: guides/triggerless.md):
- `g<N>/` is the state the consumer holds; `CURRENT` names N.
- A cycle reads the tables into `g<N+1>.read/` (written under `.tmp`, flushed, renamed: whole or
  absent). Once it is there, the comparison of it with `g<N>/` is fixed: a cycle started again
  after a crash compares the same two and publishes the same operations under the same event-ids.
- Only after the cycle's documents are durable does `CURRENT` name N+1; the older generation
  is then removed.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import io
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from publisher.outputs.durable import fsync_directory, write_atomically
from publisher.triggerless.hashing import bucket_of, key_hashes

STATE_DIRECTORY = ".publisher-triggerless"
CURRENT_FILE = "CURRENT"
MANIFEST_FILE = "manifest.json"
LAST_CYCLE_FILE = "cycle.json"
"""The summary of the cycle that made a generation the state (`publisher stats`)."""
KEY = "key"
HASH = "hash"
BUCKET_ROWS = 100_000
BUCKET_BYTES = 256 << 20
"""A table's state is cut into as many buckets (a power of two) as hold about this many rows, and
of values of some KB or MB, bytes each: a bucket is compared whole in memory."""


class ForeignStateError(ValueError):
    """The state was written for other tables, or other keys: comparing with it would publish
    nonsense. The message says what differs and what to do."""


@dataclass(frozen=True)
class TableLayout:
    """What one table's state was written for: its key and value columns, and its buckets."""

    name: str
    key: tuple[tuple[str, str], ...]
    """(column, key kind) in key order."""
    columns: tuple[tuple[str, str], ...]
    """(column, value type) of the published value columns, in the table's order."""
    buckets: int
    rows: int = 0
    parent: str = ""
    """A logical class's child table: the class (parent table) whose multi-valued attribute its
    rows are, bucketed by the parent's key (its link columns) beside the parent's rows."""
    attribute: str = ""
    bytes: int = 0
    """About the bytes of its rows' texts as read: with `rows`, what the next read cuts it into
    buckets by (`buckets_for`)."""

    @property
    def identity(self) -> tuple[str, str]:
        """What the table is to the state: a published table by its name, a child table by the
        attribute it holds (another child table may hold it next)."""
        return (self.parent, self.attribute) if self.parent else ("", self.name)

    @classmethod
    def of(cls, raw: dict[str, object]) -> TableLayout:
        def pairs(value: object) -> tuple[tuple[str, str], ...]:
            assert isinstance(value, list)
            return tuple((str(a), str(b)) for a, b in value)

        return cls(str(raw["name"]), pairs(raw["key"]), pairs(raw["columns"]), int(str(raw["buckets"])),
                   int(str(raw.get("rows", 0))), str(raw.get("parent", "")), str(raw.get("attribute", "")),
                   int(str(raw.get("bytes", 0))))


def buckets_for(rows: int, size: int = 0) -> int:
    """The power of two that cuts `rows`, of `size` bytes of text in all, into buckets of at most
    about BUCKET_ROWS rows and BUCKET_BYTES bytes."""
    wanted = max(1, -(-rows // BUCKET_ROWS), -(-size // BUCKET_BYTES))
    return 1 << (wanted - 1).bit_length()


def key_name(index: int) -> str:
    """The state's name of the table's `index`-th key column, in key order."""
    return f"k{index}"


def value_name(index: int) -> str:
    """The state's name of the table's `index`-th value column (a column may be named anything)."""
    return f"v{index}"


def key_names(layout: TableLayout) -> list[str]:
    return [key_name(i) for i in range(len(layout.key))]


def schema_of(layout: TableLayout) -> pa.Schema:
    return pa.schema([*((key_name(i), pa.string()) for i in range(len(layout.key))), (HASH, pa.uint64()),
                      *((value_name(i), pa.string()) for i in range(len(layout.columns)))])


BUCKET_FILES = ("b*.arrow", "b*.parquet")
"""A bucket's files: Arrow IPC, uncompressed, which a cycle writes and maps back in without a
parse (1M rows of the bench's usr: 0.06 s written and 0.01 s read, against 0.3 s and 0.15 s as
Parquet with lz4, at 2.6 times the size on disk); and the Parquet an earlier version wrote,
still read, so that its state is compared once more and then replaced."""
HELD_FILES = "h*.arrow"
"""Rows the consumer holds of keys the read found shared (`keep_held`), one file per bucket."""
FLUSH_ROWS = 200_000
FLUSH_BYTES = 256 << 20
"""Rows, and bytes of them, a writer gathers before it sorts them into their buckets and writes
them: values of some MB each would otherwise pass the 2 GiB a text column of one batch holds."""


class BucketWriter:
    """Writes one table's rows, as read, into its buckets (one file per bucket and `part`: a
    key range read by its own task writes its own files)."""

    def __init__(self, directory: Path, table_index: int, layout: TableLayout, part: int = 0) -> None:
        self.directory = directory / f"t{table_index}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.layout = layout
        self.part = part
        self.schema = schema_of(layout)
        self.writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
        self.sinks: dict[int, pa.NativeFile] = {}
        """The writers' files, opened here (a path would have pyarrow resolve a file system for each)."""
        self.gathered: list[pa.Table] = []
        self.gathered_bytes = 0
        self.rows = 0
        self.bytes = 0

    def write(self, keys: Sequence[pa.Array], values: Sequence[pa.Array]) -> None:
        """Rows read: their key texts (key order) and value texts, a column each."""
        if not len(keys[0]):
            return
        hashes = pa.nulls(len(keys[0]), pa.uint64())  # filled in by _flush, many rows at once
        rows = pa.Table.from_arrays([*keys, hashes, *values], schema=self.schema)
        self.gathered.append(rows)
        self.gathered_bytes += rows.nbytes
        self.bytes += rows.nbytes
        self.rows += len(hashes)
        if sum(len(t) for t in self.gathered) >= FLUSH_ROWS or self.gathered_bytes >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self.gathered:
            return
        table = pa.concat_tables(self.gathered).combine_chunks()
        self.gathered = []
        self.gathered_bytes = 0
        keys = [table.column(name).combine_chunks() for name in key_names(self.layout)]
        table = table.set_column(table.schema.get_field_index(HASH), HASH, pa.array(key_hashes(keys), pa.uint64()))
        buckets = bucket_of(table.column(HASH), self.layout.buckets)
        order = np.argsort(buckets, kind="stable")
        table = table.take(pa.array(order))
        ends = np.searchsorted(buckets[order], np.arange(self.layout.buckets), side="right")
        start = 0
        for bucket, end in enumerate(ends.tolist()):
            if end > start:
                writer = self.writers.get(bucket)
                if writer is None:
                    path = self.directory / f"b{bucket:05d}-{self.part:05d}.arrow"
                    sink = self.sinks[bucket] = pa.OSFile(str(path), "wb")
                    writer = self.writers[bucket] = pa.ipc.new_file(sink, self.schema)
                writer.write_table(table.slice(start, end - start))
            start = end

    def close(self) -> None:
        """The rows written and on disk, each file flushed alone: a flush of the whole file system
        would also write out the database's own pages, when they share a disk (after a large
        UPDATE and its VACUUM, 0.7 s against 0.4 s for a state of 5M rows)."""
        self._flush()
        for writer in self.writers.values():
            writer.close()
        for sink in self.sinks.values():
            os.fsync(sink.fileno())
            sink.close()
        self.writers.clear()
        self.sinks.clear()
        fsync_directory(self.directory)


def read_bucket(directory: Path, table_index: int, layout: TableLayout, bucket: int, buckets: int,
                held: bool = False) -> pa.Table:
    """The rows of a generation's table whose key falls in `bucket` of `buckets` (the count now,
    which may differ from the one the generation was written with), with the columns as
    `layout` names them: as read, or (`held`) as the consumer holds them, each key the read
    found shared by rows given the row the consumer holds instead (`keep_held`)."""
    rows = _bucket_rows(bucket_files(directory, table_index), layout, bucket, buckets)
    if not held:
        return rows
    kept = _bucket_rows(sorted((directory / f"t{table_index}").glob(HELD_FILES)), layout, bucket, buckets)
    if not len(kept):
        return rows
    keys = key_names(layout)
    unheld = rows.join(kept.select(keys), keys, join_type="left anti").select(rows.column_names)
    return pa.concat_tables([unheld.cast(rows.schema), kept.cast(rows.schema)])


def _bucket_rows(paths: Sequence[Path], layout: TableLayout, bucket: int, buckets: int) -> pa.Table:
    shared = min(buckets, layout.buckets) - 1
    files = [path for path in paths if int(path.name[1:6]) & shared == bucket & shared]
    if not files:
        return schema_of(layout).empty_table()
    rows = pa.concat_tables([read_state_file(path) for path in files])
    if layout.buckets >= buckets:
        return rows
    return rows.filter(pa.array(bucket_of(rows.column(HASH), buckets) == bucket))


def keep_held(directory: Path, table_index: int, bucket: int, rows: pa.Table) -> None:
    """Keep in a generation the rows the consumer holds of keys its read found shared by rows
    (none of which is published while the key is shared), so that a later cycle compares with
    what the consumer holds: a key one row's again publishes what changed, one gone a delete.
    Written whole (temporary name, flushed, renamed): a comparison repeated after a crash writes
    the same rows again."""
    if len(rows):
        sink = io.BytesIO()
        with pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows)
        write_atomically(directory / f"t{table_index}" / f"h{bucket:05d}.arrow", sink.getvalue())


def bucket_files(directory: Path, table_index: int) -> list[Path]:
    """A generation's files of a table, every bucket's, in their names' order."""
    table_dir = directory / f"t{table_index}"
    return sorted(path for pattern in BUCKET_FILES for path in table_dir.glob(pattern))


def read_state_file(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """A bucket file's rows (`columns` of them, or all): an IPC file mapped in, its buffers the
    file's pages; a Parquet one read."""
    if path.suffix == ".parquet":
        with pa.memory_map(str(path)) as source:
            return pq.ParquetFile(source).read(columns=columns)
    rows = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    return rows if columns is None else rows.select(list(columns))


@dataclass(frozen=True)
class Generation:
    number: int
    directory: Path
    tables: tuple[TableLayout, ...]
    read_at: dt.datetime | None = None
    """When the tables were read (UTC): the time of the changes the generation's cycle publishes."""
    source: str = ""
    """Where the tables were read: the database and schema, as associations name them."""
    canonical_keys: bool = False
    """Its keys are spelled canonically (`canonical_value_column`); a state from before that
    spells them as the database wrote them, and compared with a canonical read it would delete
    and add every object whose key's text differs."""


class ComparisonState:
    """The generations of one output directory's triggerless state."""

    def __init__(self, output: Path) -> None:
        self.root = output / STATE_DIRECTORY

    def current(self) -> Generation | None:
        """The state the consumer holds, or None: no cycle has finished yet."""
        try:
            text = (self.root / CURRENT_FILE).read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        number = int(text)
        return self._generation(number, self.root / f"g{number:012d}")

    def read_done(self) -> Generation | None:
        """The tables a cycle read whole and did not get to publish (it was killed), or None."""
        for directory in sorted(self.root.glob("g*.read")):
            if (directory / MANIFEST_FILE).exists():
                return self._generation(int(directory.name[1:13]), directory)
        return None

    def reading(self, number: int) -> Path:
        """An empty directory to read generation `number` into (what a killed read left, gone)."""
        directory = self.root / f"g{number:012d}.read.tmp"
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        return directory

    def finish_read(self, number: int, directory: Path, tables: Sequence[TableLayout],
                    read_at: dt.datetime, source: str) -> Generation:
        """The read made durable and whole: from here on, the cycle's comparison is fixed."""
        manifest = {"generation": number, "read_at": read_at.isoformat(), "source": source, "keys": "canonical",
                    "tables": [asdict(t) for t in tables]}
        write_atomically(directory / MANIFEST_FILE, json.dumps(manifest, indent=1).encode("utf-8"))
        done = self.root / f"g{number:012d}.read"
        os.replace(directory, done)
        fsync_directory(self.root)
        return Generation(number, done, tuple(tables), read_at, source, True)

    def promote(self, read: Generation, summary: dict[str, Any] | None = None) -> None:
        """The consumer now holds generation `read`: it becomes the current state, and the
        generations before it go. `summary`: what the cycle published, for `stats`."""
        final = self.root / f"g{read.number:012d}"
        os.replace(read.directory, final)
        fsync_directory(self.root)
        if summary is not None:
            write_atomically(final / LAST_CYCLE_FILE, json.dumps(summary).encode("utf-8"))
        write_atomically(self.root / CURRENT_FILE, f"{read.number}\n".encode("ascii"))
        for stale in self.root.iterdir():
            if stale.is_dir() and stale != final and stale.name.startswith("g"):
                shutil.rmtree(stale)

    def written_at(self) -> float | None:
        """When the current state became it (Unix time), or None."""
        try:
            return (self.root / CURRENT_FILE).stat().st_mtime
        except FileNotFoundError:
            return None

    @staticmethod
    def last_cycle(generation: Generation) -> dict[str, Any] | None:
        """The summary of the cycle that made `generation` the state (None before it was kept)."""
        try:
            found: dict[str, Any] = json.loads((generation.directory / LAST_CYCLE_FILE).read_text(encoding="utf-8"))
            return found
        except FileNotFoundError:
            return None

    def _generation(self, number: int, directory: Path) -> Generation:
        raw = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        read_at = dt.datetime.fromisoformat(raw["read_at"]) if raw.get("read_at") else None
        return Generation(number, directory, tuple(TableLayout.of(t) for t in raw["tables"]), read_at,
                          str(raw.get("source", "")), raw.get("keys") == "canonical")

    def stale_reads(self) -> Iterator[Path]:
        return (path for path in self.root.glob("g*.read.tmp") if path.is_dir())


class StateLockedError(RuntimeError):
    """Another triggerless publisher holds the state of this output directory."""


@contextlib.contextmanager
def state_lock(output: Path, wait: bool) -> Iterator[None]:
    """One triggerless publisher per output directory: the state is there, and so is the lock
    (a read replica or a vendor's database may take no writes, not even a lock's)."""
    root = output / STATE_DIRECTORY
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "LOCK", "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise StateLockedError(
                f"another triggerless publisher holds {root}: stop it first, or set publisher.when_locked = \"wait\""
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
