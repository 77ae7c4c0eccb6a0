"""A cycle's outcomes: the rejected rows' lines in rejects.jsonl and the status of every read row,
staged by the executors and read back by the driver as streams in record_id order.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from publisher.errors import OutputStateError
from publisher.model.arrow import arrow_schema_of
from publisher.model.events import Status
from publisher.model.runs import IdRun, StatusRun, coded_runs, joined_runs
from publisher.outputs.durable import JSON_LINE_BREAKS
from publisher.outputs.reject_lines import column_reject_lines

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


REJECTS_FILE = "rejects.jsonl"


def reject_line(reject: dict[str, Any]) -> str:
    """One rejected row as its line of rejects.jsonl."""
    return json.dumps(reject, ensure_ascii=False, default=str, sort_keys=True).translate(JSON_LINE_BREAKS) + "\n"


def append_rejects(directory: Path, rejects: Iterable[dict[str, Any]]) -> int:
    """Append one JSON object per rejected row; flushed to disk before statuses are written."""
    return append_lines(directory, (reject_line(r) for r in rejects))


OUTCOME_SCHEMA = "part int, first long, last long, rows long, rejects long"
"""What a partition's outcome writer reports: its record_ids, rows and rejected rows."""


READ, DECIDED, REJECTED = "read", "decided", "rejected"
"""The kinds of staged outcome: every read row's status as classified; the statuses the
per-object stages decided for some rows; and the lines in rejects.jsonl of every row either
made E."""


def outcome_name(cycle: int, part: int, kind: str, what: str) -> str:
    """A partition's staged rejects (`what` "rejects") or status runs ("statuses")."""
    return f".{cycle:012d}-{part:05d}.{kind}-{what}.staged"


@dataclass(frozen=True)
class StagedPart:
    part: int
    first: int
    last: int
    rows: int
    rejects: int
    """Rows with status E (READ, DECIDED), or rejected rows' lines (REJECTED)."""


@dataclass(frozen=True)
class StagedOutcome:
    """Every read row's status and the rejected rows, as the executors staged them. The read
    rows' partitions follow each other in record_id order; each partition of the others is in
    record_id order on its own. They are read back as streams merged by record_id."""

    directory: Path
    cycle: int
    parts: Mapping[str, tuple[StagedPart, ...]]

    @property
    def events(self) -> int:
        return sum(p.rows for p in self.parts[READ])

    def _paths(self, kind: str, what: str) -> list[Path]:
        return [self.directory / outcome_name(self.cycle, p.part, kind, what) for p in self.parts[kind]]

    @property
    def statuses(self) -> StatusPieces:
        return StatusPieces(tuple(self._paths(READ, "statuses")), tuple(self._paths(DECIDED, "statuses")))

    def append_rejects(self) -> int:
        """Append the staged rejects to rejects.jsonl in record_id order, a line at a time, and
        flush it to disk; the staged pieces are then removed."""
        streams = [_reject_lines([path]) for path in self._paths(REJECTED, "rejects")]
        count = append_lines(self.directory, (line for _, line in heapq.merge(*streams)))
        for path in self._paths(REJECTED, "rejects"):
            path.unlink(missing_ok=True)
        return count

    def remove(self) -> None:
        for kind in self.parts:
            for what in ("rejects", "statuses"):
                for path in self._paths(kind, what):
                    path.unlink(missing_ok=True)


def append_lines(directory: Path, lines: Iterable[str]) -> int:
    """Append lines to rejects.jsonl, flushed to disk; the file is made only for a first line."""
    return _append(directory, ((line, 1) for line in lines))


def append_reject_rows(directory: Path, rows: pa.Table) -> int:
    """Append the lines of rejected rows (REJECT_FIELDS and reason, in record_id order) to
    rejects.jsonl, built as columns a batch at a time (`reject_lines`), row by row only for a
    batch holding a value they do not spell."""
    def pieces() -> Iterator[tuple[str, int]]:
        for batch in rows.to_batches(max_chunksize=REJECT_BATCH_ROWS):
            lines = column_reject_lines(batch, batch.schema.names, numbered=False)
            if lines is None:
                lines = "".join(reject_line(row) for row in batch.to_pylist())
            yield lines, batch.num_rows

    return _append(directory, pieces())


REJECT_BATCH_ROWS = 10_000


def _append(directory: Path, pieces: Iterable[tuple[str, int]]) -> int:
    """Append texts of a number of lines each; flushed to disk; the file is made only for a first line."""
    count = 0
    handle = None
    try:
        for text, lines in pieces:
            if not lines:
                continue
            if handle is None:
                directory.mkdir(parents=True, exist_ok=True)
                handle = open(directory / REJECTS_FILE, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
            handle.write(text)
            count += lines
        if handle is not None:
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        if handle is not None:
            handle.close()
    return count


def _reject_lines(paths: Iterable[Path]) -> Iterator[tuple[int, str]]:
    """(record_id, line of rejects.jsonl) from staged pieces, whose lines are `record_id<TAB>line`."""
    for path in paths:
        if not path.exists():
            continue
        with open(path, encoding="utf-8", newline="\n") as handle:
            for staged in handle:
                rid, line = staged.split("\t", 1)
                yield int(rid), line


@dataclass(frozen=True)
class StatusPieces:
    """The staged status runs in record_id order, those the per-object stages decided taking
    the place of the read ones; each iteration reads the files again, so that acknowledgement
    goes through them twice without holding them."""

    read: tuple[Path, ...]
    decided: tuple[Path, ...]

    def __iter__(self) -> Iterator[StatusRun]:
        decided = heapq.merge(*(_staged_runs([path]) for path in self.decided), key=lambda r: r[1].first)
        return joined_runs(_overridden(_staged_runs(self.read), decided))


def _staged_runs(paths: Iterable[Path]) -> Iterator[StatusRun]:
    for path in paths:
        if not path.exists():
            continue
        with open(path, encoding="ascii") as handle:
            for line in handle:
                code, first, last = line.split()
                yield Status(code), IdRun(int(first), int(last))


def _overridden(runs: Iterator[StatusRun], decided: Iterator[StatusRun]) -> Iterator[StatusRun]:
    """`runs` with the ids in `decided` (read ids, in the same order) given their decided status.
    A decided run may cross from one read run into the next (a resolve partition joins
    consecutive ids that two read partitions hold), and is split where they meet."""
    pending = next(decided, None)
    for status, run in runs:
        at = run.first
        while pending is not None and pending[1].first <= run.last:
            outcome, piece = pending
            if piece.first < at:
                raise OutputStateError(f"a decided status for record_ids {piece.first}..{piece.last} was not read")
            if piece.first > at:
                yield status, IdRun(at, piece.first - 1)
            end = min(piece.last, run.last)
            yield outcome, IdRun(piece.first, end)
            at = end + 1
            pending = (outcome, IdRun(end + 1, piece.last)) if piece.last > end else next(decided, None)
        if at <= run.last:
            yield status, IdRun(at, run.last)
    if pending is not None:
        raise OutputStateError(f"a decided status for record_ids {pending[1].first}..{pending[1].last} was not read")


def write_outcomes_distributed(
    read: DataFrame,
    decided: DataFrame,
    rejected: DataFrame,
    rejected_later: DataFrame,
    directory: Path,
    cycle: int,
    fields: tuple[str, ...],
) -> StagedOutcome:
    """Stage every read row's status, and every rejected row's line of rejects.jsonl, from the
    executors; nothing is sorted across partitions, and no row passes through the driver,
    whose memory stays the same whatever the cycle's size and its rows' statuses.

    `read` holds (record_id, status) for every read row, partitioned as it was read:
    partition i's record_ids, in order, before partition i+1's. `decided` holds (record_id,
    status) for the rows whose status the per-object stages decided. `rejected` and
    `rejected_later` hold (record_id, reason, *fields[1:]) of the rows `read` and `decided`
    say are E; each is staged only when there is such a row, so a cycle pays for the values of
    the rows it rejects only.
    """
    from pyspark.sql import functions as F

    parts = {READ: _stage(read.select(F.spark_partition_id().alias("part"), "record_id", "status"), directory, cycle,
                          READ, fields)}
    for earlier, later in itertools.pairwise(parts[READ]):
        if later.first <= earlier.last:
            raise OutputStateError(f"read partitions {earlier.part} and {later.part} are not in record_id order")
    sorted_decided = decided.sortWithinPartitions("record_id").select(
        F.spark_partition_id().alias("part"), "record_id", "status"
    )
    parts[DECIDED] = _stage(sorted_decided, directory, cycle, DECIDED, fields)
    sources = [rows for kind, rows in ((READ, rejected), (DECIDED, rejected_later))
               if any(p.rejects for p in parts[kind])]
    parts[REJECTED] = () if not sources else _stage(
        functools.reduce(lambda one, other: one.unionByName(other), sources).sortWithinPartitions("record_id").select(
            F.spark_partition_id().alias("part"), "record_id", "reason", *fields[1:]
        ),
        directory, cycle, REJECTED, fields,
    )
    return StagedOutcome(directory, cycle, parts)


def _stage(
    rows: DataFrame, directory: Path, cycle: int, kind: str, fields: tuple[str, ...]
) -> tuple[StagedPart, ...]:

    target = str(directory)
    summary_schema = arrow_schema_of(OUTCOME_SCHEMA)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        writer = _OutcomeWriter(Path(target), cycle, kind, fields)
        try:
            for batch in batches:
                writer.add(batch)
            writer.finish()
        finally:
            writer.close()
        if writer.rows:
            summary = {"part": writer.part, "first": writer.first, "last": writer.last, "rows": writer.rows,
                       "rejects": writer.rejected}
            yield pa.RecordBatch.from_pylist([summary], schema=summary_schema)

    return tuple(sorted(
        (StagedPart(r["part"], r["first"], r["last"], r["rows"], r["rejects"])
         for r in rows.mapInArrow(write_partition, OUTCOME_SCHEMA).collect()),
        key=lambda p: p.part,
    ))


STATUS_CODES = (Status.SUCCESS.value, Status.WARNING.value, Status.ERROR.value)


class _OutcomeWriter:
    """One partition's outcome rows, in record_id order, to its staged status runs (READ,
    DECIDED) or rejects (REJECTED), a batch at a time: columns are compared with Arrow and
    numpy, so that only a run of statuses or a rejected row costs Python work."""

    def __init__(self, directory: Path, cycle: int, kind: str, fields: tuple[str, ...]) -> None:
        self.directory = directory
        self.cycle = cycle
        self.kind = kind
        self.fields = fields
        self.part = -1
        self.first = self.last = -1
        self.rows = 0
        self.rejected = 0
        self.run: list[int] | None = None
        """[status code, first, last] of the run not yet written."""
        self.statuses: Any = None
        self.rejects: Any = None

    def _open(self, what: str, encoding: str) -> Any:
        path = self.directory / outcome_name(self.cycle, self.part, self.kind, what)
        return open(path, "w", encoding=encoding, newline="\n")  # noqa: SIM115

    def add(self, batch: pa.RecordBatch) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not batch.num_rows:
            return
        rid = batch.column("record_id").to_numpy()
        if np.any(np.diff(rid) <= 0) or (self.rows and rid[0] <= self.last):
            raise OutputStateError(f"outcome rows of partition {self.part} are not in record_id order")
        if not self.rows:
            self.part = batch.column("part")[0].as_py()
            self.first = int(rid[0])
        self.last = int(rid[-1])
        self.rows += batch.num_rows
        if self.kind != REJECTED:
            if self.statuses is None:
                self.statuses = self._open("statuses", "ascii")
            codes = pc.index_in(batch.column("status"), value_set=pa.array(STATUS_CODES)).to_numpy(
                zero_copy_only=False
            )
            self._runs(rid, codes)
            self.rejected += int(np.count_nonzero(codes == STATUS_CODES.index(Status.ERROR.value)))
        else:
            if self.rejects is None:
                self.rejects = self._open("rejects", "utf-8")
            rows = batch.select([*self.fields, "reason"])
            lines = column_reject_lines(rows, rows.schema.names)
            if lines is None:
                lines = "".join(f"{row['record_id']}\t{reject_line(row)}" for row in rows.to_pylist())
            self.rejects.write(lines)
            self.rejected += batch.num_rows

    def _runs(self, rid: Any, code: Any) -> None:
        for status, first, last in coded_runs(rid, code):
            if self.run is not None and self.run[0] == status and self.run[2] + 1 == first:
                self.run[2] = last
                continue
            self._flush_run()
            self.run = [status, first, last]

    def finish(self) -> None:
        self._flush_run()
        self.run = None

    def _flush_run(self) -> None:
        if self.run is not None:
            status, first, last = self.run
            self.statuses.write(f"{STATUS_CODES[status]} {first} {last}\n")

    def close(self) -> None:
        for handle in (self.statuses, self.rejects):
            if handle is not None:
                handle.close()
