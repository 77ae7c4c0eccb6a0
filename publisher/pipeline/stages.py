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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from publisher.config import OutputConfig
from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.events import EVENT_LOG_COLUMNS
from publisher.outputs.files import DocumentWritten
from publisher.outputs.formats import CycleFormats, FormatsWritten
from publisher.pipeline.acknowledge import StatusRun
from publisher.pipeline.objects import ObjectsContext, StatusNote, publish_objects
from publisher.pipeline.window import CycleWindow
from publisher.rules.classify import ClassifyContext
from publisher.rules.columnar import OPERATION_FIELDS, object_starts, simple_operations, split_by_query_back

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
    run (the Spark path in each partition after a shuffle by object). Objects with no
    query-back event are resolved as column operations (`rules.columnar`), the others object by
    object (`objects.publish_objects`). `spent` gets the seconds of each step."""
    schema = arrow_schema_of(RESOLVED_SCHEMA)
    for chunk in _object_chunks(batches):
        started = time.perf_counter()
        simple, rest = (chunk.slice(0, 0), chunk) if ctx.operations.changes else split_by_query_back(chunk)
        operations = simple_operations(simple, ctx.operations)
        if operations is None:
            rest = chunk
        elif operations.num_rows:
            yield from _as_resolved(operations, schema).to_batches(RESOLVED_BATCH_ROWS)
        _add(spent, "columnar", time.perf_counter() - started)
        if rest.num_rows:
            yield from _per_object(rest, ctx, spent, schema)


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
    events: pa.Table, ctx: ObjectsContext, spent: dict[str, float], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    rows: list[tuple[Any, ...]] = []
    for item in publish_objects(events.to_pylist(), ctx, spent):
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
    count = operations.num_rows
    return pa.table(
        [operations[name] if name in OPERATION_FIELDS else pa.nulls(count, field.type)
         for name, field in zip(schema.names, schema, strict=True)],
        schema=schema,
    )


def _add(spent: dict[str, float], step: str, seconds: float) -> None:
    spent[step] = spent.get(step, 0.0) + seconds
