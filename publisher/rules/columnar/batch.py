"""Stages 3 and 5 as column operations over a batch of objects, instead of Python per object.

Objects none of whose events needs query-back (field inserts, updates, deletes: most of a
backlog) keep all their events: `decide` of `tests/oracle/precedence.py` beats events only with a query-back
event's effect. The objects with query-back events, and those of logical classes (child
tables, references), are decided once their current rows are read, by the same rules as
`decide` of `tests/oracle/precedence.py` written as group operations (`columnar.precedence`). Either way an
object's operations are then runs of consecutive same-kind published events, found by
comparing neighbours, with bodies joined per run; the values of a logical class and of a row
query-back are laid out by `columnar.logical.value_changes`. A query-back event whose value
cannot be published is E, with the value's problem as its reason. Properties in the tests hold
both ways equal to the per-object rules on generated events.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.catalog import TableInfo
from publisher.model.events import EventType
from publisher.model.operation import OperationKind
from publisher.model.xds import column_attr_changes, column_operations, column_refused, refusal
from publisher.rules.changes import Change, Place, change_of
from publisher.rules.columnar.logical import ValueChanges, logical_events, value_changes
from publisher.rules.columnar.precedence import (
    QUERY_BACK_FROM,
    decide,
    in_processing_order,
    object_ids,
    object_starts,
)
from publisher.rules.operations import OperationContext, References, operation_kind
from publisher.rules.precedence import CurrentRow

_LOGGED_ADDS = frozenset(
    int(t) for t in (EventType.INSERT_FIELD, EventType.UPDATE_FIELD, EventType.UPDATE_FIELD_REMOVE_ALL)
)
OPERATION_FIELDS = ("op_time", "event_id", "xml")
CHANGE_FIELDS = ("change", "transaction_id", "change_time", "records")
"""With the change formats on, an operation's change besides (`changes.change_of`)."""
_UNIT_FIELDS = ("attr_name", "old_text", "new_text")
"""With the effective event type, what `changes.Unit` holds of an event."""
_PLACE_FIELDS = ("record_id", "event_time", "transaction_id")
_ADD, _MODIFY, _DELETE = OperationKind.ADD.value, OperationKind.MODIFY.value, OperationKind.DELETE.value
_KIND_NAMES = pa.array([_ADD, _MODIFY, _DELETE], pa.string())
_KIND_INDEX = {OperationKind.ADD: 0, OperationKind.MODIFY: 1, OperationKind.DELETE: 2}


def split_by_query_back(
    events: pa.Table, tables: Mapping[str, TableInfo] | None = None
) -> tuple[pa.Table, pa.Table]:
    """(events of objects with no query-back event, events of the others), of a table sorted by
    object (class_name, canonical_key); each keeps its rows' order. With `tables`, objects of
    their logical classes go with the others: their rules read current rows or referenced
    objects (`query_back_operations`)."""
    if events.num_rows == 0:
        return events, events
    objects = object_ids(events)
    query_back = np.asarray(pc.greater_equal(events["event_type_code"], QUERY_BACK_FROM)).astype(np.int64)
    needs = np.bincount(objects, weights=query_back)[objects] > 0
    if tables is not None:
        needs |= logical_events(events, tables)
    return events.filter(pa.array(~needs)), events.filter(pa.array(needs))


def wanted_objects(events: pa.Table, tables: Mapping[str, TableInfo] | None = None) -> dict[str, list[str]]:
    """The distinct objects of a table sorted by object, as class name → canonical keys; with
    `tables`, only those whose current rows `query_back_operations` reads: those with a
    query-back event or of a class with multi-valued attributes."""
    if tables is not None:
        events = events.filter(pa.array(_rows_read(events, tables)))
    firsts = events.take(pa.array(np.flatnonzero(object_starts(events))))
    wanted: dict[str, list[str]] = {}
    for name, key in zip(firsts["class_name"].to_pylist(), firsts["canonical_key"].to_pylist(), strict=True):
        wanted.setdefault(name, []).append(key)
    return wanted


def _rows_read(events: pa.Table, tables: Mapping[str, TableInfo]) -> np.ndarray:
    """True for each event of an object whose current row its rules need."""
    parents = [name for name, table in tables.items() if table.multi_valued]
    needs = pc.or_(pc.is_in(events["class_name"], pa.array(parents, pa.string())),
                   pc.greater_equal(events["event_type_code"], QUERY_BACK_FROM))
    if not events.num_rows:
        return np.zeros(0, bool)
    objects = object_ids(events)
    return np.bincount(objects, weights=np.asarray(pc.fill_null(needs, False)).astype(np.int64))[objects] > 0


def simple_operations(events: pa.Table, ctx: OperationContext) -> pa.Table:
    """The operations (op_time, event_id, xml, and with the formats on CHANGE_FIELDS) of
    objects with no query-back event, of classes that are not logical, in no particular order."""
    events = in_processing_order(events)
    codes = np.asarray(events["event_type_code"]).astype(np.int64)
    kinds = _kinds(codes, ctx)
    return _merged(events, codes, kinds, _logged_changes(events, codes, kinds), np.zeros(len(codes), bool), {}, ctx)


@dataclass(frozen=True)
class QueryBackResolution:
    operations: pa.Table
    """(op_time, event_id, xml, and with the formats on CHANGE_FIELDS) per operation."""
    vanished: pa.Array
    """The record_ids of the query-back events whose object is gone: status W."""
    unreadable: pa.Table
    """(record_id, reason) of the query-back events whose value cannot be published: status E."""


def query_back_operations(
    events: pa.Table, current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext,
    referenced: References | None = None,
) -> QueryBackResolution:
    """`decide` of `tests/oracle/precedence.py` and the operations of objects with query-back events or of logical
    classes, given their current rows (absent: the object is gone) and, for references, which
    referenced objects exist (`columnar.logical.referenced_keys` says which to read)."""
    events = in_processing_order(events)
    decided = decide(events, current, ctx)
    published = decided.published
    kept = events.filter(pa.array(published))
    codes = decided.effective[published]
    kinds = _kinds(codes, ctx)
    changes = _logged_changes(kept, codes, kinds, _field_values(kept, codes, current))
    winners = decided.row_wins[published]
    several = winners | logical_events(kept, ctx.tables)
    texts = None
    if several.any():
        made = value_changes(
            kept.filter(pa.array(several)), codes[several], kinds.filter(pa.array(several)),
            (winners[several], decided.carriers[published][several]), current, ctx.tables,
            referenced or References(ctx.tables, ctx.schema_label),
        )
        changes = pc.replace_with_mask(changes, pa.array(several), made.fragments)
        texts = functools.partial(_texts_with, several, made, kept, codes)
    announces = winners & (codes == int(EventType.INSERT_ROW_QUERY_BACK))
    operations = _merged(kept, codes, kinds, changes, announces, current, ctx, texts)
    reasons = decided.unreadable
    unreadable = pa.table({"record_id": events["record_id"], "reason": reasons}).filter(pc.is_valid(reasons))
    vanished = events["record_id"].filter(pa.array(decided.vanished)).combine_chunks()
    return QueryBackResolution(operations, vanished, unreadable)


def _texts_with(
    several: np.ndarray, made: ValueChanges, events: pa.Table, codes: np.ndarray, start: int, end: int
) -> Iterator[tuple[str, str | None]]:
    """The attribute texts of published events [start, end), those of `several` as `made` holds them."""
    places = np.cumsum(several) - 1
    for index in range(start, end):
        if several[index]:
            yield from made.texts(int(places[index]))
        else:
            yield from _logged_texts(events.slice(index, 1), codes[index:index + 1])


def _kinds(codes: np.ndarray, ctx: OperationContext) -> pa.Array:
    """`rules.operations.operation_kind` of each effective event type, looked up by its code."""
    by_code = np.zeros(max(EventType) + 1, np.int8)
    for event_type in EventType:
        by_code[event_type] = _KIND_INDEX[operation_kind(event_type, ctx.insert_row_operation)]
    return _KIND_NAMES.take(pa.array(by_code[codes], pa.int8()))  # a numpy array of texts would take about 1 µs a row


def _logged_changes(
    events: pa.Table, codes: np.ndarray, kinds: pa.Array, field_values: pa.Array | None = None
) -> pa.Array:
    """Each event's attribute change as `attr_changes` of `tests/oracle/operations.py` makes it, for all but row
    query-backs: logged values, and a field query-back's current value (`field_values`)."""
    codes_array = pa.array(codes)
    is_update = pc.equal(codes_array, int(EventType.UPDATE_FIELD))
    remove_all = pc.or_(pc.equal(codes_array, int(EventType.UPDATE_FIELD_REMOVE_ALL)),
                        pc.equal(codes_array, int(EventType.UPDATE_FIELD_QUERY_BACK)))
    return column_attr_changes(
        kinds,
        events["attr_name"].combine_chunks(),
        events["value_type"].combine_chunks(),
        remove_all,
        pc.if_else(is_update, events["old_text"], pa.nulls(events.num_rows, pa.string())).combine_chunks(),
        events["new_text"].combine_chunks() if field_values is None else field_values,
    )


def _field_values(
    events: pa.Table, codes: np.ndarray, current: Mapping[tuple[str, str], CurrentRow]
) -> pa.Array:
    """The logged new value of each event, or for a field query-back its attribute's current value."""
    new = events["new_text"].combine_chunks()
    is_field = codes >= EventType.INSERT_FIELD_QUERY_BACK
    if not is_field.any():
        return new
    picked = events.filter(pa.array(is_field))
    values = [
        current[(name, key)].values.get(attr)
        for name, key, attr in zip(picked["class_name"].to_pylist(), picked["canonical_key"].to_pylist(),
                                   picked["attr_name"].to_pylist(), strict=True)
    ]
    return pc.replace_with_mask(new, pa.array(is_field), pa.array(values, pa.string()))


def _merged(
    events: pa.Table, codes: np.ndarray, kinds: pa.Array, changes: pa.Array, announces: np.ndarray,
    current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext, texts: _Texts | None = None,
) -> pa.Table:
    """Published events in processing order, with their effective types (`codes`) → one
    operation per run of an object's consecutive same-kind events, its body their changes
    joined; a modify with an empty body is dropped unless a unit of it `announces` the object
    (`_announces` of `tests/oracle/operations.py`). With the formats on, each operation's change too. Raises
    ValueError naming the operation and the text when some text is one XML cannot carry:
    `texts` names the attribute texts of events [start, end), which are the logged ones unless
    given."""
    if events.num_rows == 0:
        return _operations_table(events["position_time"], events["record_id"], pa.array([], pa.binary()), [], ctx)
    starts = object_starts(events)
    kind_values = np.asarray(kinds.to_numpy(zero_copy_only=False))
    starts[1:] |= kind_values[1:] != kind_values[:-1]
    first = np.flatnonzero(starts)
    offsets = pa.array(np.append(first, events.num_rows).astype(np.int32))
    bodies = pc.binary_join(pa.ListArray.from_arrays(offsets, changes), "")
    run_kinds = kinds.take(pa.array(first))
    announced = np.add.reduceat(announces.astype(np.int64), first) > 0
    published = pc.or_(pc.or_(pc.not_equal(run_kinds, _MODIFY), pc.not_equal(bodies, "")), pa.array(announced))
    firsts = events.take(pa.array(first)).filter(published)
    run_kinds, bodies = run_kinds.filter(published), bodies.filter(published)
    associations = pc.binary_join_element_wise(
        firsts["canonical_key"], ",table=", firsts["class_name"], f",schema={ctx.schema_label}", ""
    )
    xml = column_operations(run_kinds, firsts["class_name"], firsts["record_id"], associations, bodies)
    ends = np.append(first[1:], events.num_rows)
    runs = np.flatnonzero(np.asarray(published))
    refused = np.flatnonzero(np.asarray(column_refused(xml)))
    if len(refused):
        run = int(refused[0])
        start, end = int(first[runs[run]]), int(ends[runs[run]])
        named = [("class name", firsts["class_name"][run].as_py()), ("association", associations[run].as_py())]
        attributes = _logged_texts(events.slice(start, end - start), codes[start:end]) if texts is None else (
            texts(start, end))
        raise refusal(firsts["record_id"][run].as_py(), [*named, *attributes], xml[run].as_py())
    described = []
    if ctx.changes:
        described = _run_changes(events, codes, first[runs], ends[runs], run_kinds, current, ctx)
    return _operations_table(firsts["position_time"], firsts["record_id"], pc.cast(xml, pa.binary()), described, ctx)


_Texts = Callable[[int, int], Iterator[tuple[str, str | None]]]


def _logged_texts(run: pa.Table, codes: np.ndarray) -> Iterator[tuple[str, str | None]]:
    """The texts of logged events, named in the order `xds.refusal` takes an operation's."""
    for name, code, old, new in zip(run["attr_name"].to_pylist(), codes.tolist(), run["old_text"].to_pylist(),
                                    run["new_text"].to_pylist(), strict=True):
        if name is None or code == EventType.DELETE_ROW:
            continue
        yield f"attribute name {name!r}", name
        if code == EventType.UPDATE_FIELD:
            yield f"removed value of attribute {name!r}", old
        if code in _LOGGED_ADDS:
            yield f"added value of attribute {name!r}", new


def _operations_table(
    op_time: pa.Array, event_id: pa.Array, xml: pa.Array, changes: list[Change], ctx: OperationContext
) -> pa.Table:
    columns = {"op_time": op_time, "event_id": event_id, "xml": xml}
    if ctx.changes:
        columns["change"] = pa.array([c.to_bytes() for c in changes], pa.binary())
        columns["transaction_id"] = pa.array([c.transaction_id for c in changes], pa.string())
        columns["change_time"] = pa.array([c.event_time for c in changes], pa.timestamp("us", tz="UTC"))
        columns["records"] = pa.array([c.records for c in changes], pa.int32())
    return pa.table(columns)


def _run_changes(
    events: pa.Table, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, kinds: pa.Array,
    current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext,
) -> list[Change]:
    """`changes.change_of` of each published run [start, end) of events, of kind `kinds`. Each
    event is a unit of its run; where in the log the run stands (its first event's id, time and
    transaction) is read for the runs' first events alone."""
    names, keys = events["class_name"].to_pylist(), events["canonical_key"].to_pylist()
    units = list(zip(codes.tolist(), *(events[name].to_pylist() for name in _UNIT_FIELDS), strict=True))
    firsts = events.select(list(_PLACE_FIELDS)).take(pa.array(starts, pa.int64()))
    places = zip(*(firsts[name].to_pylist() for name in _PLACE_FIELDS), strict=True)
    described = []
    for start, end, kind, place in zip(starts.tolist(), ends.tolist(), kinds.to_pylist(), places, strict=True):
        obj = (names[start], keys[start])
        row = current.get(obj)
        described.append(change_of(obj[1], units[start:end], Place(*place), ctx.tables[obj[0]],
                                   None if row is None else row.values, OperationKind(kind)))
    return described
