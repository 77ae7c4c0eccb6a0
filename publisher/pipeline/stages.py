"""The stage contract both paths of a cycle implement, and what they share.

A cycle runs the same stages in the same order whichever way it takes: read and classify,
resolve (query back, precedence and operations per object), write documents, write formats
(change tables and messages), outcomes (every read row's status, the rejected rows). The driver
path holds each stage's result in the driver's memory; the Spark path holds it in Spark. Both
call the same rule functions, so both publish the same operations.
"""
from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.config import EVENT_LOG_COLUMNS, OutputConfig
from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.events import Status
from publisher.model.runs import StatusRun
from publisher.outputs.documents import DocumentWritten
from publisher.outputs.formats import CycleFormats, FormatsWritten
from publisher.pipeline.objects import SLICE_EVENTS, ObjectsContext, StatusNote, publish_objects, publish_read
from publisher.pipeline.queryback import CurrentRows
from publisher.pipeline.window import CycleWindow
from publisher.rules.classify import ClassifyContext
from publisher.rules.columnar import (
    OPERATION_FIELDS,
    object_starts,
    query_back_operations,
    simple_operations,
    split_by_query_back,
    wanted_objects,
)
from publisher.rules.operations import PublishedOperation
from publisher.rules.precedence import VANISHED_REASON

REJECT_FIELDS = tuple(EVENT_LOG_COLUMNS[i] for i in (0, 2, 3, 4, 5, 6, 7, 8, 9))
"""The event log values a rejected row is recorded with (all but the status)."""
RESOLVED_SCHEMA = (
    "record_id long, status string, reason string, op_time timestamp, event_id long, xml binary, "
    "change binary, transaction_id string, change_time timestamp, records int"
)
"""What resolving an object gives: a row per event that is not S (record_id, status, reason),
and a row per operation (op_time, event_id, xml, and its change for the formats)."""
RESOLVED_BATCH_ROWS = 10_000
RESOLVE_CHUNK_ROWS = 50_000
"""Rows resolved at once: a partition is taken in tables of about this many events."""


class Acknowledgement(Protocol):
    """How a cycle's outcome goes back once its output is durable: statuses in the event log
    (the status mode), or a subscriber's check-out advanced."""

    @property
    def writes_statuses(self) -> bool:
        """True: the event log's rows got their statuses (its statistics may need refreshing)."""

    def keep(self) -> None:
        """Keep what identifies the cycle's rows until they are acknowledged."""

    def acknowledge(self, runs: Iterable[StatusRun], published: bool) -> Mapping[Status, int]:
        """All or nothing; `published`: the cycle wrote documents."""

    def release(self) -> None:
        """What `keep` kept is no longer needed."""


@dataclass(frozen=True)
class CyclePlan:
    """What one cycle needs, resolved once from the configuration and the database."""

    window: CycleWindow
    output: Path
    classify: ClassifyContext
    objects: ObjectsContext
    future_events: bool
    batch_size: int
    formats: OutputConfig | None
    """The output settings when change tables or messages are on, else None."""
    acknowledgement: Acknowledgement

    def cycle_formats(self, cycle_number: int) -> CycleFormats:
        assert self.formats is not None
        operations = self.objects.operations
        return CycleFormats(self.output, cycle_number, operations.tables, operations.schema_label, self.formats)


@dataclass
class Outcomes:
    """What a path hands back for acknowledging."""

    events: int
    statuses: Iterable[StatusRun]
    """Every read row's status, as runs in record_id order; gone through twice."""
    append_rejects: Callable[[], int]
    """Appends the rejected rows to rejects.jsonl and says how many."""
    discard: Callable[[], None] = lambda: None
    """Removes what the path staged for acknowledging, once it is done or failed."""


Classified = TypeVar("Classified")
Resolved = TypeVar("Resolved")


@dataclass
class CyclePath(abc.ABC, Generic[Classified, Resolved]):
    """One way through a cycle's stages; `run_cycle` calls them in order."""

    plan: CyclePlan
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    """Seconds of the steps inside a stage, by stage (summed over tasks on Spark)."""

    @abc.abstractmethod
    def read_and_classify(self) -> Classified: ...

    @abc.abstractmethod
    def resolve(self, classified: Classified) -> Resolved: ...

    @abc.abstractmethod
    def write_documents(self, resolved: Resolved, cycle_number: int) -> list[DocumentWritten]: ...

    @abc.abstractmethod
    def write_formats(self, resolved: Resolved, cycle_number: int) -> FormatsWritten: ...

    @abc.abstractmethod
    def outcomes(self, classified: Classified, resolved: Resolved, cycle_number: int) -> Outcomes: ...


def resolve_batches(
    batches: Iterable[pa.RecordBatch], ctx: ObjectsContext, spent: dict[str, float]
) -> Iterator[pa.RecordBatch]:
    """Publishable events sorted by object → RESOLVED_SCHEMA batches; the one resolve both paths
    run (the Spark path in each partition after a shuffle by object). Objects are resolved as
    column operations (`rules.columnar`), those with query-back events in slices of about
    SLICE_EVENTS events once their current rows are read; object by object
    (`objects.publish_objects`) where the column rules leave it to them, for logical classes
    (child tables, references), and with the formats on, whose changes are described per
    operation. `spent` gets the seconds of each step."""
    schema = arrow_schema_of(RESOLVED_SCHEMA)
    with CurrentRows(ctx.query_back) as reader:
        for chunk in _object_chunks(batches):
            if ctx.operations.changes:
                yield from _per_object(chunk.to_pylist(), ctx, spent, schema, reader)
                continue
            logical, chunk = _split_logical(chunk, ctx)
            if logical.num_rows:
                yield from _per_object(logical.to_pylist(), ctx, spent, schema, reader)
            started = time.perf_counter()
            simple, query_back = split_by_query_back(chunk)
            operations = simple_operations(simple, ctx.operations)
            _add(spent, "columnar", time.perf_counter() - started)
            if operations is None:
                yield from _per_object(simple.to_pylist(), ctx, spent, schema, reader)
            elif operations.num_rows:
                yield from _as_resolved(operations, schema).to_batches(RESOLVED_BATCH_ROWS)
            for part in _object_slices(query_back, SLICE_EVENTS):
                yield from _resolve_query_back(part, reader, ctx, spent, schema)


def _split_logical(chunk: pa.Table, ctx: ObjectsContext) -> tuple[pa.Table, pa.Table]:
    """(events of logical classes, the others): child tables and references are resolved
    object by object."""
    logical = [name for name, table in ctx.operations.tables.items() if table.is_logical]
    if not logical or not chunk.num_rows:
        return chunk.slice(0, 0), chunk
    mask = pc.fill_null(pc.is_in(chunk["class_name"], pa.array(logical, pa.string())), False)
    return chunk.filter(mask), chunk.filter(pc.invert(mask))


def _resolve_query_back(
    events: pa.Table, reader: CurrentRows, ctx: ObjectsContext, spent: dict[str, float], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Objects with query-back events: their current rows read in bulk, then decided as column
    operations, or object by object where the column rules leave them."""
    started = time.perf_counter()
    current = reader.read(wanted_objects(events))
    read = time.perf_counter()
    _add(spent, "query_back", read - started)
    resolution = query_back_operations(events, current, ctx.operations)
    _add(spent, "columnar", time.perf_counter() - read)
    if resolution is None:
        yield from _rows_batches(publish_read(events.to_pylist(), current, ctx, spent), schema)
        return
    if resolution.operations.num_rows:
        yield from _as_resolved(resolution.operations, schema).to_batches(RESOLVED_BATCH_ROWS)
    if len(resolution.vanished):
        vanished = _as_noted(resolution.vanished, Status.WARNING, VANISHED_REASON, schema)
        yield from vanished.to_batches(RESOLVED_BATCH_ROWS)
    if resolution.unresolved.num_rows:
        yield from _rows_batches(publish_read(resolution.unresolved.to_pylist(), current, ctx, spent), schema)


def _object_slices(events: pa.Table, rows: int) -> Iterator[pa.Table]:
    """A table sorted by object in slices of about `rows` rows, each ending where an object does."""
    if events.num_rows == 0:
        return
    starts = np.flatnonzero(object_starts(events))
    wanted = np.searchsorted(starts, np.arange(rows, events.num_rows, rows))
    cuts = np.unique(np.concatenate([[0], starts[wanted[wanted < len(starts)]], [events.num_rows]]))
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        yield events.slice(int(lo), int(hi - lo))


def _object_chunks(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
    """The stream in tables of about RESOLVE_CHUNK_ROWS rows or more, each ending where an
    object does."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows < RESOLVE_CHUNK_ROWS:
            continue
        table = pa.Table.from_batches(pending)
        cut = int(np.flatnonzero(object_starts(table))[-1])
        if cut == 0:
            continue
        yield table.slice(0, cut)
        pending, rows = table.slice(cut).to_batches(), table.num_rows - cut
    if pending:
        yield pa.Table.from_batches(pending)


def _per_object(
    events: list[dict[str, Any]], ctx: ObjectsContext, spent: dict[str, float], schema: pa.Schema,
    reader: CurrentRows,
) -> Iterator[pa.RecordBatch]:
    return _rows_batches(publish_objects(events, ctx, spent, reader), schema)


def _rows_batches(items: Iterable[StatusNote | PublishedOperation], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    rows: list[tuple[Any, ...]] = []
    for item in items:
        if isinstance(item, StatusNote):
            rows.append((item.record_id, item.status.value, item.reason, None, None, None, None, None, None, None))
        else:
            change = item.change
            rows.append((
                None, None, None, item.op_time, item.event_id, item.xml,
                None if change is None else change.to_bytes(),
                None if change is None else change.transaction_id,
                None if change is None else change.event_time,
                None if change is None else change.records,
            ))
        if len(rows) == RESOLVED_BATCH_ROWS:
            yield rows_batch(rows, schema)
            rows = []
    if rows:
        yield rows_batch(rows, schema)


def _as_resolved(operations: pa.Table, schema: pa.Schema) -> pa.Table:
    """Operations (op_time, event_id, xml) as RESOLVED_SCHEMA rows."""
    return _resolved_rows({name: operations[name] for name in OPERATION_FIELDS}, operations.num_rows, schema)


def _as_noted(record_ids: pa.Array, status: Status, reason: str, schema: pa.Schema) -> pa.Table:
    """Events of one status and reason as RESOLVED_SCHEMA rows."""
    count = len(record_ids)
    return _resolved_rows({"record_id": record_ids, "status": pa.array([status.value] * count, pa.string()),
                           "reason": pa.array([reason] * count, pa.string())}, count, schema)


def _resolved_rows(columns: dict[str, Any], count: int, schema: pa.Schema) -> pa.Table:
    return pa.table(
        [columns[name] if name in columns else pa.nulls(count, field.type)
         for name, field in zip(schema.names, schema, strict=True)],
        schema=schema,
    )


def _add(spent: dict[str, float], step: str, seconds: float) -> None:
    spent[step] = spent.get(step, 0.0) + seconds
