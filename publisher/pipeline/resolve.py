"""Resolve, which both paths run on each part of a cycle's events sorted by object: objects with
query-back events or of logical classes read their current rows (and the objects their
references name) in slices, and all go through the column rules; every event comes out as an
operation or a status note, as Arrow batches of RESOLVED_SCHEMA."""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from publisher.model.arrow import arrow_schema_of
from publisher.model.events import Status
from publisher.pipeline.objects import SLICE_EVENTS, ObjectsContext
from publisher.pipeline.queryback import CurrentRows
from publisher.pipeline.timing import StepTimer
from publisher.rules.columnar.batch import (
    CHANGE_FIELDS,
    OPERATION_FIELDS,
    query_back_operations,
    simple_operations,
    split_by_query_back,
    wanted_objects,
)
from publisher.rules.columnar.logical import referenced_keys
from publisher.rules.columnar.precedence import object_starts
from publisher.rules.operations import References
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
    column operations (`rules.columnar`), those with query-back events or of logical classes
    in slices of about SLICE_EVENTS events once what they need is read. `spent` gets the
    seconds of each step."""
    schema = arrow_schema_of(RESOLVED_SCHEMA)
    tables = ctx.operations.tables
    with CurrentRows(ctx.query_back) as reader:
        for chunk in _object_chunks(batches):
            started = time.perf_counter()
            simple, read = split_by_query_back(chunk, tables)
            operations = simple_operations(simple, ctx.operations)
            spent.add("columnar", time.perf_counter() - started)
            if operations.num_rows:
                yield from _as_resolved(operations, schema).to_batches(RESOLVED_BATCH_ROWS)
            for part in object_slices(read, SLICE_EVENTS):
                yield from _resolve_read(part, reader, ctx, spent, schema)


def _resolve_read(
    events: pa.Table, reader: CurrentRows, ctx: ObjectsContext, spent: StepTimer, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Objects whose rules read: their current rows read in bulk, and which of the objects
    their references name exist, then decided as column operations."""
    started = time.perf_counter()
    tables = ctx.operations.tables
    current = reader.read(wanted_objects(events, tables))
    referenced = References(ctx.query_back.tables, ctx.operations.schema_label)
    named = referenced_keys(events, current, tables, referenced)
    if named:
        referenced = referenced.found(reader.read(named, children=False))
    read = time.perf_counter()
    spent.add("query_back", read - started)
    resolution = query_back_operations(events, current, ctx.operations, referenced)
    spent.add("columnar", time.perf_counter() - read)
    if resolution.operations.num_rows:
        yield from _as_resolved(resolution.operations, schema).to_batches(RESOLVED_BATCH_ROWS)
    if len(resolution.vanished):
        vanished = _as_noted(resolution.vanished, Status.WARNING, VANISHED_REASON, schema)
        yield from vanished.to_batches(RESOLVED_BATCH_ROWS)
    if resolution.unreadable.num_rows:
        yield from _as_noted(resolution.unreadable["record_id"], Status.ERROR, resolution.unreadable["reason"],
                             schema).to_batches(RESOLVED_BATCH_ROWS)


def object_slices(events: pa.Table, rows: int) -> Iterator[pa.Table]:
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
