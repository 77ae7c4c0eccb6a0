"""Stage 6: write the XDS documents (in the executors) and the rejected rows (on the driver).

A document file appears whole or not at all: written to a hidden temporary name, flushed to
disk, then renamed. File names sort in publication order across cycles and runs.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from publisher.failpoints import reached
from publisher.xds import build_document

CYCLE_FILE = ".publisher-cycle"
REJECTS_FILE = "rejects.jsonl"
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}
"""Line breaks JSON leaves raw but line readers split on (Python's splitlines, JavaScript)."""
_DOCUMENT_NAME = re.compile(r"^(\d{12})-\d{7}\.xml$")
_TEMPORARY_NAME = re.compile(r"^\.(\d{12}-\d{7}\.xml|" + re.escape(CYCLE_FILE) + r")\.tmp$")


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
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def write_documents(operations: DataFrame, directory: Path, cycle: int, batch_size: int) -> list[DocumentWritten]:
    """Number the operations in publication order, cut them into documents, write each in an executor."""
    ordered = operations.orderBy("op_time", "event_id").select("xml").rdd.zipWithIndex()
    target = str(directory)

    def write_partition(documents: Iterable[tuple[int, Iterable[tuple[int, bytes]]]]) -> Iterator[DocumentWritten]:
        for index, members in documents:
            xml = [bytes(x) for _, x in sorted(members, key=lambda m: m[0])]
            data = build_document(xml)
            name = document_name(cycle, index)
            write_atomically(Path(target) / name, data)
            reached("write")
            yield DocumentWritten(name, len(xml), len(data))

    written = (
        ordered.map(lambda pair: (pair[1] // batch_size, (pair[1], pair[0][0])))
        .groupByKey()
        .mapPartitions(write_partition)
        .collect()
    )
    return sorted(written, key=lambda d: d.name)


def append_rejects(directory: Path, rejects: Iterable[dict[str, Any]]) -> int:
    """Append one JSON object per rejected row; flushed to disk before statuses are written."""
    lines = [
        json.dumps(r, ensure_ascii=False, default=str, sort_keys=True).translate(_LINE_BREAKS) + "\n"
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
