"""A cycle's XDS documents, written from the driver (a small cycle) or from the executors (a
large one, renamed into publication order by the driver).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from publisher.failpoints import reached
from publisher.model.arrow import arrow_schema_of
from publisher.model.operation import OperationKind
from publisher.model.xds import DANGLING_REFERENCE, build_document, document_parts, operation_kinds
from publisher.outputs.cycle_files import document_name
from publisher.outputs.durable import fsync_directory, sync_file_system
from publisher.rules.order import spark_order

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class DocumentWritten:
    name: str
    operations: int
    bytes: int
    dangling: int = 0
    """References published without association-ref: the object they name does not exist."""
    kinds: Mapping[str, int] = field(default_factory=dict)
    """Operations by kind (add, modify, delete)."""


def write_documents(
    operations: Sequence[bytes] | pa.Array, directory: Path, cycle: int, batch_size: int, first_index: int = 0,
    references: bool = True,
) -> list[DocumentWritten]:
    """Write a small cycle's serialised operations, in publication order, from the driver: cut
    into documents of `batch_size`, written to temporary names, flushed to disk together, renamed.
    Their numbers within the cycle begin at `first_index`. `operations` may be a binary column,
    whose documents are written from its buffer as they lie in it, with no copy; where they
    cannot hold a reference (`references` False), its dangling ones are not looked for."""
    pieces = _column_pieces(operations, batch_size, references) if isinstance(operations, pa.Array) else (
        _list_pieces(operations, batch_size))
    staged = []
    folder = os.fspath(directory)
    for index, (parts, written) in enumerate(pieces, start=first_index):
        name = document_name(cycle, index)
        tmp = os.path.join(folder, f".{name}.tmp")
        _write_new(tmp, parts)
        staged.append((tmp, os.path.join(folder, name), dataclasses.replace(written, name=name)))
    if not staged:
        return []
    sync_file_system(directory)
    for placed, (tmp, path, _) in enumerate(staged):
        os.replace(tmp, path)
        if placed == 0:
            reached("write")
    fsync_directory(directory)
    return [written for _, _, written in staged]


def _write_new(path: str, parts: Sequence[Any]) -> None:
    """`parts` (bytes, or views of a column's data) written to a new file at `path`, with one
    call where the system takes them whole: no buffer copies them on the way."""
    left = [memoryview(part).cast("B") for part in parts]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        while left:
            written = os.writev(fd, left)
            if not written and any(left):
                raise OSError(f"{path}: nothing written")
            while left and written >= len(left[0]):
                written -= len(left.pop(0))
            if left:
                left[0] = left[0][written:]
    finally:
        os.close(fd)


_Piece = tuple[Sequence[Any], DocumentWritten]
"""A document's bytes in parts, and what it holds (its name set when it is written)."""


def _list_pieces(operations: Sequence[bytes], batch_size: int) -> Iterator[_Piece]:
    for start in range(0, len(operations), batch_size):
        xml = operations[start : start + batch_size]
        data = build_document(xml)
        yield [data], DocumentWritten("", len(xml), len(data), data.count(DANGLING_REFERENCE), operation_kinds(data))


_KIND_LETTERS = {ord(kind.value[0]): kind.value for kind in OperationKind}
"""An operation's kind by the letter after its `<`."""


def _column_pieces(operations: pa.Array, batch_size: int, references: bool) -> Iterator[_Piece]:
    """Each document as its head, a slice of the column's data and its close. The operations'
    kinds are read from their first letters; the dangling references are counted only where
    there can be one."""
    head, close = document_parts()
    column = operations.cast(pa.large_binary())
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset : column.offset + len(column) + 1]
    data = column.buffers()[2]
    view = memoryview(data) if data is not None else memoryview(b"")
    letters = np.frombuffer(data, np.uint8)[offsets[:-1] + 1] if len(column) else np.zeros(0, np.uint8)
    documents = -(-len(column) // batch_size)
    # every document's count of each first letter, in one pass over the column
    counted = np.bincount(np.arange(len(column)) // batch_size * 256 + letters, minlength=documents * 256)
    by_kind = {kind: counted.reshape(documents, 256)[:, letter].tolist() for letter, kind in _KIND_LETTERS.items()}
    bounds = offsets[::batch_size].tolist() + ([int(offsets[-1])] if len(column) % batch_size else [])
    for number, start in enumerate(range(0, len(column), batch_size)):
        end = min(start + batch_size, len(column))
        lo, hi = bounds[number], bounds[number + 1]
        kinds = {kind: counts[number] for kind, counts in by_kind.items()}
        body = view[lo:hi]
        refs = bytes(body).count(DANGLING_REFERENCE) if references else 0  # Python's search is the faster
        yield ([head, body, close],
               DocumentWritten("", end - start, len(head) + hi - lo + len(close), refs, kinds))


STAGED_KINDS = {kind.value: f"{kind.value}_operations" for kind in OperationKind}
"""The staged-piece columns of the operations by kind."""


STAGED_SCHEMA = "part int, piece int, operations int, bytes long, dangling long, " + ", ".join(
    f"{column} long" for column in STAGED_KINDS.values()
)


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
    from pyspark.sql import functions as F


    target = str(directory)
    staged_schema = arrow_schema_of(STAGED_SCHEMA)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pieces: list[dict[str, int]] = []
        pending: list[bytes] = []
        part = -1

        def flush() -> None:
            data = build_document(pending)
            name = staged_name(cycle, part, len(pieces))
            with open(Path(target) / name, "wb") as handle:
                handle.write(data)
            pieces.append({"part": part, "piece": len(pieces), "operations": len(pending), "bytes": len(data),
                           "dangling": data.count(DANGLING_REFERENCE),
                           **{STAGED_KINDS[kind]: n for kind, n in operation_kinds(data).items()}})
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
        operations.orderBy(*spark_order(F, "op_time", "event_id"))
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
        kinds = {kind: piece[column] for kind, column in STAGED_KINDS.items()}
        written.append(DocumentWritten(name, piece["operations"], piece["bytes"], piece["dangling"], kinds))
    fsync_directory(directory)
    return written
