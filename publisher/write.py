"""Stage 6: write the XDS documents (from the driver or the executors) and the rejected rows.

A document file appears whole or not at all: written to a hidden temporary name, flushed to
disk, then renamed. File names sort in publication order across cycles and runs.
"""
from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from publisher.failpoints import reached
from publisher.operations import PublishedOperation
from publisher.xds import build_document

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CYCLE_FILE = ".publisher-cycle"
REJECTS_FILE = "rejects.jsonl"
JSON_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}
"""Line breaks JSON leaves raw but line readers split on (Python's splitlines, JavaScript)."""
_DOCUMENT_NAME = re.compile(r"^(\d{12})-\d{7}\.xml$")
_TEMPORARY_NAME = re.compile(
    r"^\.(\d{12}-\d{7}\.xml|" + re.escape(CYCLE_FILE) + r")\.tmp$|^\.\d{12}-\d{5}-\d{7}\.staged$"
)


@dataclass(frozen=True)
class DocumentWritten:
    name: str
    operations: int
    bytes: int


def document_name(cycle: int, index: int) -> str:
    return f"{cycle:012d}-{index:07d}.xml"


def write_atomically(path: Path, data: bytes) -> None:
    """Write, fsync, rename, fsync the directory: a reader sees the old state or the whole file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_file_system(directory: Path) -> None:
    """Flush everything written to the file system holding `directory` to disk, with one call.

    A partition's documents are written first and flushed together: one fsync per document
    costs a journal commit each, thousands per large cycle. Linux has syncfs for this; other
    systems fall back to sync.
    """
    libc = _libc()
    if libc is not None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


@functools.cache
def _libc() -> Any:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    return libc if hasattr(libc, "syncfs") else None


def next_cycle_number(directory: Path) -> int:
    """A number no earlier cycle used here, so this cycle's files sort after every earlier one."""
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(directory)
    state = directory / CYCLE_FILE
    last = 0
    if state.exists():
        text = state.read_text(encoding="ascii").strip()
        last = int(text) if text.isdigit() else 0
    for entry in os.scandir(directory):
        match = _DOCUMENT_NAME.match(entry.name)
        if match:
            last = max(last, int(match.group(1)))
    write_atomically(state, f"{last + 1}\n".encode("ascii"))
    return last + 1


def remove_stale_temporaries(directory: Path) -> None:
    """Delete the temporary files a killed writer left behind; their documents are written again."""
    for entry in os.scandir(directory):
        if _TEMPORARY_NAME.match(entry.name):
            Path(entry.path).unlink(missing_ok=True)


def write_documents(
    operations: Iterable[PublishedOperation], directory: Path, cycle: int, batch_size: int
) -> list[DocumentWritten]:
    """Write a small cycle's operations from the driver: sorted into publication order, cut into
    documents of `batch_size`, written to temporary names, flushed to disk together, renamed."""
    ordered = sorted(operations, key=lambda op: op.order)
    staged = []
    for index, start in enumerate(range(0, len(ordered), batch_size)):
        xml = [op.xml for op in ordered[start : start + batch_size]]
        data = build_document(xml)
        path = directory / document_name(cycle, index)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        staged.append((tmp, path, DocumentWritten(path.name, len(xml), len(data))))
    if not staged:
        return []
    sync_file_system(directory)
    for index, (tmp, path, _) in enumerate(staged):
        os.replace(tmp, path)
        if index == 0:
            reached("write")
    fsync_directory(directory)
    return [written for _, _, written in staged]


STAGED_SCHEMA = "part int, piece int, operations int, bytes long"


def staged_name(cycle: int, part: int, piece: int) -> str:
    return f".{cycle:012d}-{part:05d}-{piece:07d}.staged"


def write_documents_distributed(
    operations: DataFrame, directory: Path, cycle: int, batch_size: int
) -> list[DocumentWritten]:
    """Write a large cycle's operations (op_time, event_id, xml) from the executors.

    A range-partitioned sort puts partition i's operations before partition i+1's; each
    executor cuts its partition into documents of at most `batch_size` and writes them, fsynced,
    under staged names. The driver then renames them into numbered names in partition order,
    so names keep publication order and no operation passes through the driver. Staged files
    are flushed to disk before the driver sees them, and the directory after the renames.
    """
    import pyarrow as pa
    from pyspark.sql import functions as F

    from publisher.workers import arrow_schema

    target = str(directory)
    staged_schema = arrow_schema(STAGED_SCHEMA)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pieces: list[dict[str, int]] = []
        pending: list[bytes] = []
        part = -1

        def flush() -> None:
            data = build_document(pending)
            name = staged_name(cycle, part, len(pieces))
            with open(Path(target) / name, "wb") as handle:
                handle.write(data)
            pieces.append({"part": part, "piece": len(pieces), "operations": len(pending), "bytes": len(data)})
            pending.clear()

        for batch in batches:
            if batch.num_rows:
                part = batch.column("part")[0].as_py()
            for xml in batch.column("xml").to_pylist():
                pending.append(xml)
                if len(pending) == batch_size:
                    flush()
        if pending:
            flush()
        if pieces:
            sync_file_system(Path(target))
            yield pa.RecordBatch.from_pylist(pieces, schema=staged_schema)

    staged = (
        operations.orderBy("op_time", "event_id")
        .select(F.spark_partition_id().alias("part"), "xml")
        .mapInArrow(write_partition, STAGED_SCHEMA)
        .collect()
    )
    written = []
    for index, piece in enumerate(sorted(staged, key=lambda r: (r["part"], r["piece"]))):
        name = document_name(cycle, index)
        os.replace(directory / staged_name(cycle, piece["part"], piece["piece"]), directory / name)
        if index == 0:
            reached("write")
        written.append(DocumentWritten(name, piece["operations"], piece["bytes"]))
    fsync_directory(directory)
    return written


def append_rejects(directory: Path, rejects: Iterable[dict[str, Any]]) -> int:
    """Append one JSON object per rejected row; flushed to disk before statuses are written."""
    lines = [
        json.dumps(r, ensure_ascii=False, default=str, sort_keys=True).translate(JSON_LINE_BREAKS) + "\n"
        for r in rejects
    ]
    if not lines:
        return 0
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / REJECTS_FILE, "a", encoding="utf-8") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())
    return len(lines)
