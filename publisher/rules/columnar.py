"""Stages 3 and 5 for the objects none of whose events needs query-back, as column operations.

Most of a backlog's objects are such objects (field inserts, updates, deletes), and precedence
leaves all their events standing: `precedence.decide` beats events only with a query-back
event's effect. Their operations are then consecutive same-kind events merged, which Arrow
does over a whole batch at once (runs found by comparing neighbours, bodies joined per run)
instead of Python per object. The other objects keep the per-object rules; a property in the
tests holds both ways equal on generated events.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.events import EventType
from publisher.model.operation import OperationKind
from publisher.outputs.xds import column_attr_changes, column_operations, column_refused
from publisher.rules.operations import OperationContext

_QUERY_BACK_FROM = int(EventType.INSERT_ROW_QUERY_BACK)
OPERATION_FIELDS = ("op_time", "event_id", "xml")


def split_by_query_back(events: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(events of objects with no query-back event, events of the others), of a table sorted by
    object (class_name, canonical_key); each keeps its rows' order."""
    if events.num_rows == 0:
        return events, events
    starts = object_starts(events)
    objects = np.cumsum(starts) - 1
    query_back = np.asarray(pc.greater_equal(events["event_type_code"], _QUERY_BACK_FROM)).astype(np.int64)
    needs = np.bincount(objects, weights=query_back)[objects] > 0
    return events.filter(pa.array(~needs)), events.filter(pa.array(needs))


def object_starts(events: pa.Table) -> np.ndarray:
    """True where a row's object differs from the row before's."""
    starts = np.ones(events.num_rows, dtype=bool)
    if events.num_rows > 1:
        same = pa.array(np.ones(events.num_rows - 1, dtype=bool))
        for name in ("class_name", "canonical_key"):
            column = events[name]
            same = pc.and_(same, pc.equal(column.slice(1), column.slice(0, events.num_rows - 1)))
        starts[1:] = ~np.asarray(same.combine_chunks() if isinstance(same, pa.ChunkedArray) else same)
    return starts


def simple_operations(events: pa.Table, ctx: OperationContext) -> pa.Table | None:
    """The operations (op_time, event_id, xml) of objects with no query-back event, in no
    particular order; None when some text is one XML cannot carry, so that the per-object
    rules say which."""
    if events.num_rows == 0:
        return pa.table({"op_time": events["position_time"], "event_id": events["record_id"],
                         "xml": pa.array([], pa.binary())})
    order = pc.sort_indices(events, sort_keys=[
        ("class_name", "ascending", "at_end"),
        ("canonical_key", "ascending", "at_end"),
        ("position_time", "ascending", "at_start"),
        ("record_id", "ascending", "at_end"),
    ])
    events = events.take(order)
    codes = events["event_type_code"]
    kinds = pc.if_else(
        pc.equal(codes, int(EventType.INSERT_FIELD)), OperationKind.ADD.value,
        pc.if_else(pc.equal(codes, int(EventType.DELETE_ROW)), OperationKind.DELETE.value, OperationKind.MODIFY.value),
    ).combine_chunks()
    is_update = pc.equal(codes, int(EventType.UPDATE_FIELD))
    fragments = column_attr_changes(
        kinds,
        events["attr_name"].combine_chunks(),
        events["value_type"].combine_chunks(),
        pc.equal(codes, int(EventType.UPDATE_FIELD_REMOVE_ALL)).combine_chunks(),
        pc.if_else(is_update, events["old_text"], pa.nulls(events.num_rows, pa.string())).combine_chunks(),
        events["new_text"].combine_chunks(),
    )
    starts = object_starts(events)
    kind_values = np.asarray(kinds.to_numpy(zero_copy_only=False))
    starts[1:] |= kind_values[1:] != kind_values[:-1]
    first = np.flatnonzero(starts)
    offsets = pa.array(np.append(first, events.num_rows).astype(np.int32))
    bodies = pc.binary_join(pa.ListArray.from_arrays(offsets, fragments), "")
    run_kinds = kinds.take(pa.array(first))
    published = pc.or_(pc.not_equal(run_kinds, OperationKind.MODIFY.value), pc.not_equal(bodies, ""))
    firsts = events.take(pa.array(first)).filter(published)
    run_kinds, bodies = run_kinds.filter(published), bodies.filter(published)
    associations = pc.binary_join_element_wise(
        firsts["canonical_key"], ",table=", firsts["class_name"], f",schema={ctx.schema_label}", ""
    )
    xml = column_operations(run_kinds, firsts["class_name"], firsts["record_id"], associations, bodies)
    if pc.any(column_refused(xml)).as_py():
        return None
    return pa.table({"op_time": firsts["position_time"], "event_id": firsts["record_id"],
                     "xml": pc.cast(xml, pa.binary())})
