"""Resolve, which both paths run on each part of a cycle's events sorted by object: objects with
query-back events read their current rows in slices, and all go through the columnar rules but
logical classes, which go through the per-object rules; every event comes out as an operation
or a status note, as Arrow batches of RESOLVED_SCHEMA."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.events import Status
from publisher.pipeline.objects import SLICE_EVENTS, ObjectsContext, StatusNote, publish_objects
from publisher.pipeline.queryback import CurrentRows
from publisher.pipeline.timing import StepTimer
from publisher.rules.columnar import (
    CHANGE_FIELDS,
    OPERATION_FIELDS,
    object_starts,
    query_back_operations,
    simple_operations,
    split_by_query_back,
    wanted_objects,
)
from publisher.rules.operations import PublishedOperation
from publisher.rules.precedence import VANISHED_REASON

RESOLVED_SCHEMA = (
    "record_id long, status string, reason string, op_time timestamp, event_id long, xml binary, "
    "change binary, transaction_id string, change_time timestamp, records int"
)
"""What resolving an object gives: a row per event that is not S (record_id, status, reason),
and a row per operation (op_time, event_id, xml, and its change for the formats)."""


RESOLVED_BATCH_ROWS = 10_000


RESOLVE_CHUNK_ROWS = 50_000
"""Rows resolved at once: a partition is taken in tables of about this many events."""


def resolve_batches(
    batches: Iterable[pa.RecordBatch], ctx: ObjectsContext, spent: StepTimer
) -> Iterator[pa.RecordBatch]:
    """Publishable events sorted by object → RESOLVED_SCHEMA batches; the one resolve both paths
    run (the Spark path in each partition after a shuffle by object). Objects are resolved as
    column operations (`rules.columnar`), those with query-back events in slices of about
    SLICE_EVENTS events once their current rows are read; logical classes (child tables,
    references) object by object (`objects.publish_objects`). `spent` gets the seconds of each
    step."""
    schema = arrow_schema_of(RESOLVED_SCHEMA)
    with CurrentRows(ctx.query_back) as reader:
        for chunk in _object_chunks(batches):
            logical, chunk = _split_logical(chunk, ctx)
            if logical.num_rows:
                yield from _per_object(logical.to_pylist(), ctx, spent, schema, reader)
            started = time.perf_counter()
            simple, query_back = split_by_query_back(chunk)
            operations = simple_operations(simple, ctx.operations)
            spent.add("columnar", time.perf_counter() - started)
            if operations.num_rows:
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
    events: pa.Table, reader: CurrentRows, ctx: ObjectsContext, spent: StepTimer, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Objects with query-back events: their current rows read in bulk, then decided as column
    operations."""
    started = time.perf_counter()
    current = reader.read(wanted_objects(events))
    read = time.perf_counter()
    spent.add("query_back", read - started)
    resolution = query_back_operations(events, current, ctx.operations)
    spent.add("columnar", time.perf_counter() - read)
    if resolution.operations.num_rows:
        yield from _as_resolved(resolution.operations, schema).to_batches(RESOLVED_BATCH_ROWS)
    if len(resolution.vanished):
        vanished = _as_noted(resolution.vanished, Status.WARNING, VANISHED_REASON, schema)
        yield from vanished.to_batches(RESOLVED_BATCH_ROWS)
    if resolution.unreadable.num_rows:
        yield from _as_noted(resolution.unreadable["record_id"], Status.ERROR, resolution.unreadable["reason"],
                             schema).to_batches(RESOLVED_BATCH_ROWS)


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
    events: list[dict[str, Any]], ctx: ObjectsContext, spent: StepTimer, schema: pa.Schema,
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
    """Operations (OPERATION_FIELDS, and CHANGE_FIELDS with the formats on) as RESOLVED_SCHEMA rows."""
    names = [*OPERATION_FIELDS, *(name for name in CHANGE_FIELDS if name in operations.column_names)]
    return _resolved_rows({name: operations[name] for name in names}, operations.num_rows, schema)


def _as_noted(
    record_ids: pa.Array | pa.ChunkedArray, status: Status, reason: str | pa.ChunkedArray, schema: pa.Schema
) -> pa.Table:
    """Events of one status, and one reason or a reason each, as RESOLVED_SCHEMA rows."""
    count = len(record_ids)
    reasons = pa.array([reason] * count, pa.string()) if isinstance(reason, str) else reason
    return _resolved_rows({"record_id": record_ids, "status": pa.array([status.value] * count, pa.string()),
                           "reason": reasons}, count, schema)


def _resolved_rows(columns: dict[str, Any], count: int, schema: pa.Schema) -> pa.Table:
    return pa.table(
        [columns[name] if name in columns else pa.nulls(count, field.type)
         for name, field in zip(schema.names, schema, strict=True)],
        schema=schema,
    )
