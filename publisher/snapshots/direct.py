"""A snapshot's direct path (`snapshot --direct`): a chunk's rows written as documents by the
snapshot itself, in the chunk's transaction, instead of logged as events the cycles read back.

Logging a row query-back per row costs every row twice over (an event written, read, read back
and acknowledged). The direct path reads each chunk's rows whole, as last committed, and writes
them as the operations their row query-backs would have published (`rules.columnar.rows`, the
column shapes `query_back_operations` builds them with), while it holds the reader's lock, so
that no cycle writes between them. Why that is consistent with the writers (docs:
guides/snapshots.md):
- The log's waiting events (status N) are read after the rows, by a later statement. A row with
  none has had every change committed before its read published, and none committed between
  the two reads; every later change is in events the cycles publish after the row's document
  (none runs before the snapshot ends), applied on the state the document holds. So it needs
  no lock: a share lock on every row would write a lock into each (WAL, dirty pages) and hold
  the application's writers back.
- A row with events waiting goes the logged way: it is logged as a row query-back in the same
  transaction, behind them, as the logged path does with every row, and under the logged path's
  share lock: a writer's delete of it not yet committed is waited for and the row passed over.
- So is a row with a value that cannot be published: its event says why, as `E`.

The operations' event-ids are negative, so that they never meet a record_id: the chunk's own
event (logged `S`: the log shows each chunk) numbers them, `-(record_id × 2^20 + place)`.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, Engine, func, select

from publisher.config import Config
from publisher.database import association_schema
from publisher.errors import TransientError
from publisher.model.canonical import canonical_key
from publisher.model.catalog import TableInfo
from publisher.model.events import Status
from publisher.outputs.cycle_files import next_cycle_number
from publisher.outputs.documents import write_documents
from publisher.pipeline.event_log import EventLogSource, event_log_source
from publisher.pipeline.row_reading import ReadColumns
from publisher.rules.columnar.rows import row_operations
from publisher.rules.operations import OperationContext
from publisher.snapshots.chunks import ChunkDone, ChunkExtent, EventLogger, KeyOrder, giving_way
from publisher.snapshots.state import TablePart

PLACE_BITS = 20
"""A chunk's operations are numbered within 2^20: chunks of the direct path hold at most that."""
MAX_CHUNK_ROWS = 1 << PLACE_BITS



@dataclass(frozen=True)
class DirectOutput:
    """Where and how the direct path writes: the status mode's output, its document size, and
    the operation rules a cycle would publish the rows with."""

    output: Path
    batch_size: int
    operations: OperationContext
    log: EventLogSource
    lock_lost: Callable[[], bool] | None
    """Whether the reader's lock slipped away: a cycle may be writing, so no chunk may. None in
    an executor: the driver holding the lock asks."""

    @classmethod
    def of(cls, config: Config, engine: Engine, tables: dict[str, TableInfo],
           lock_lost: Callable[[], bool] | None) -> DirectOutput:
        operations = OperationContext(tables, association_schema(config, engine), config.publisher.insert_row_operation)
        return cls(Path(config.output.directory).resolve(), config.publisher.batch_size, operations,
                   event_log_source(config, engine), lock_lost)


def why_not_direct(table: TableInfo) -> str | None:
    """Why a table's rows cannot be published directly, or None: a view has no lock to take,
    and a logical class's values come from other tables (its rows go the logged way)."""
    if table.is_view:
        return "a view, read without a lock"
    if table.is_logical:
        return "a logical class"
    return None


def publish_chunk(
    engine: Engine, order: KeyOrder, logger: EventLogger, part: TablePart, last_key: str | None,
    after: Sequence[Any] | None, chunk_rows: int, direct: DirectOutput, numbering: Numbering,
) -> ChunkDone:
    """One chunk's rows read as last committed; those with no event waiting written as
    operations, the others logged if the share lock finds them still there (as the logged path
    counts, a row passed over is not taken); the progress committed with them."""

    def work(conn: Connection) -> ChunkDone:
        reading = order.reading
        table = reading.table
        extent = order.extent(conn, after, chunk_rows)
        last = extent.last
        read = reading.columns([]) if last is None else reading.read(
            conn, order.rows_upto(reading.select(), after, extent, lock=False))
        held = np.zeros(len(read), np.bool_)
        held[list(read.problems)] = True
        waiting = waiting_keys(conn, direct.log, table)
        if waiting:
            held |= np.asarray(pc.is_in(read.keys, value_set=pa.array(list(waiting), pa.string())))
        logged = logger.log(conn, table.name, _still_there(conn, order, after, extent,
                                                           read.keys.filter(pa.array(held)))) if held.any() else 0
        written = np.flatnonzero(~held)
        if len(written):
            if direct.lock_lost is not None and direct.lock_lost():
                raise TransientError("the snapshot lost the status mode's lock; start it again to continue")
            assert last is not None
            _write(direct, numbering, logger.mark(conn, table.name, last[0]), table, read, pa.array(written))
        taken = len(written) + logged
        part.advance(conn, last[0] if last else last_key, taken, extent.finished)
        return ChunkDone(taken, extent, len(written))

    return giving_way(engine, work)


def _still_there(conn: Connection, order: KeyOrder, after: Sequence[Any] | None, extent: ChunkExtent,
                 keys: pa.Array) -> list[str]:
    """Of the chunk's rows to log, in key order, those its rows read again under the share lock
    still hold: a writer's uncommitted delete of one is waited for, and the row passed over (its
    own events publish it)."""
    wanted = set(keys.to_pylist())
    return [key for key, _ in order.locked_keys(conn, after, extent) if key in wanted]


def waiting_keys(conn: Connection, log: EventLogSource, table: TableInfo) -> set[str]:
    """The canonical keys of the table's objects with an event still waiting (N) in the log."""
    columns = log.table.c
    names = log.columns
    status, name, key = columns[names.status], columns[names.table_name], columns[names.table_key]
    query = select(key).where(status == Status.NEW.value, func.lower(name) == table.name.lower())
    waiting = set()
    for (text,) in conn.execute(query):
        try:
            waiting.add(_canonical(str(text), table.key_columns))
        except ValueError:
            continue
    return waiting


_canonical = functools.lru_cache(maxsize=200_000)(canonical_key)
"""A backlog's keys are read again by every chunk: each text is made canonical once."""


class Numbering:
    """The names of a chunk's documents: the output's next cycle number for each chunk (chunks
    written one at a time), or one cycle number a key range was given and the index after its
    last document (ranges written at once, `snapshot_ranges`)."""

    def __init__(self, output: Path, cycle: int | None = None) -> None:
        self.output = output
        self.cycle = cycle
        self.index = 0

    def take(self, documents: int) -> tuple[int, int]:
        """(cycle number, index of the first document) for a chunk's `documents`."""
        if self.cycle is None:
            return next_cycle_number(self.output), 0
        first = self.index
        self.index += documents
        return self.cycle, first


def _write(direct: DirectOutput, numbering: Numbering, marker: int, table: TableInfo, read: ReadColumns,
           rows: pa.Array) -> None:
    """The `rows` of `read` as the row query-back of an insert publishes them (`row_operations`),
    in key order, in documents of the output's next cycle number, durable before the chunk
    commits. A plain table's operations hold no reference (a logical class's go the logged way)."""
    keys = read.keys.take(rows)
    texts = [column.take(rows) for column in read.texts]
    event_ids = pa.array(-(marker * MAX_CHUNK_ROWS + np.arange(len(rows), dtype=np.int64)))
    xml = row_operations(table, keys, texts, event_ids, direct.operations)
    cycle, first = numbering.take(-(-len(rows) // direct.batch_size))
    write_documents(xml, direct.output, cycle, direct.batch_size, first, references=False)
