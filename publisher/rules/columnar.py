"""Stages 3 and 5 as column operations over a batch of objects, instead of Python per object.

Objects none of whose events needs query-back (field inserts, updates, deletes: most of a
backlog) keep all their events: `precedence.decide` beats events only with a query-back
event's effect. The objects with query-back events are decided here too, once their current
rows are read, by the same rules as `precedence.decide` written as group operations over
(object) and (object, attribute): the first row query-back after the last delete wins and
beats the object's other events, the first field query-back of an attribute beats that
attribute's logged values, a query-back of an object that is gone is `W`. Either way an
object's operations are then runs of consecutive same-kind published events, found by
comparing neighbours, with bodies joined per run. A query-back event whose value cannot be
published is E, with the value's problem as its reason. Properties in the tests hold both ways
equal to the per-object rules on generated events.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.config import InsertRowOperation
from publisher.model.events import FIELD_QUERY_BACK, INSERTING, LOGGED_VALUES, ROW_QUERY_BACK, EventType
from publisher.model.operation import OperationKind
from publisher.model.xds import column_attr_changes, column_operations, column_refused, refusal
from publisher.rules.changes import Change, change_of
from publisher.rules.operations import OperationContext
from publisher.rules.precedence import CurrentRow, row_problem, unreadable_reason

_QUERY_BACK_FROM = int(EventType.INSERT_ROW_QUERY_BACK)
_ROW_QB = sorted(int(t) for t in ROW_QUERY_BACK)
_FIELD_QB = sorted(int(t) for t in FIELD_QUERY_BACK)
_INSERTING = sorted(int(t) for t in INSERTING)
_LOGGED_VALUES = sorted(int(t) for t in LOGGED_VALUES)
_LOGGED_ADDS = frozenset(
    int(t) for t in (EventType.INSERT_FIELD, EventType.UPDATE_FIELD, EventType.UPDATE_FIELD_REMOVE_ALL)
)
OPERATION_FIELDS = ("op_time", "event_id", "xml")
CHANGE_FIELDS = ("change", "transaction_id", "change_time", "records")
"""With the change formats on, an operation's change besides (`changes.change_of`)."""
_UNIT_FIELDS = ("record_id", "event_time", "transaction_id", "attr_name", "old_text", "new_text")
_ADD, _MODIFY, _DELETE = OperationKind.ADD.value, OperationKind.MODIFY.value, OperationKind.DELETE.value


def split_by_query_back(events: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(events of objects with no query-back event, events of the others), of a table sorted by
    object (class_name, canonical_key); each keeps its rows' order."""
    if events.num_rows == 0:
        return events, events
    objects = object_ids(events)
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


def object_ids(events: pa.Table) -> np.ndarray:
    """Each row's object as 0, 1, … in the table's order, of a table sorted by object."""
    return np.cumsum(object_starts(events)) - 1


def wanted_objects(events: pa.Table) -> dict[str, list[str]]:
    """The distinct objects of a table sorted by object, as class name → canonical keys."""
    firsts = events.take(pa.array(np.flatnonzero(object_starts(events))))
    wanted: dict[str, list[str]] = {}
    for name, key in zip(firsts["class_name"].to_pylist(), firsts["canonical_key"].to_pylist(), strict=True):
        wanted.setdefault(name, []).append(key)
    return wanted


def in_processing_order(events: pa.Table) -> pa.Table:
    """Sorted by object, and within an object as `precedence.position` orders its events."""
    return events.take(pc.sort_indices(events, sort_keys=[
        ("class_name", "ascending", "at_end"),
        ("canonical_key", "ascending", "at_end"),
        ("position_time", "ascending", "at_start"),
        ("record_id", "ascending", "at_end"),
    ]))


def simple_operations(events: pa.Table, ctx: OperationContext) -> pa.Table:
    """The operations (op_time, event_id, xml, and with the formats on CHANGE_FIELDS) of
    objects with no query-back event, in no particular order."""
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
    events: pa.Table, current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext
) -> QueryBackResolution:
    """`precedence.decide` and the operations of objects with query-back events, given their
    current rows (absent: the object is gone)."""
    events = in_processing_order(events)
    rows = _current_of(events, current)
    problems = _problems(events, rows)
    published, effective, row_wins, vanished = _decide(
        events, np.array([r is not None for r in rows], bool), ~pc.is_null(problems).to_numpy(zero_copy_only=False),
        ctx,
    )
    kept = events.filter(pa.array(published))
    codes = effective[published]
    kinds = _kinds(codes, ctx)
    changes = _logged_changes(kept, codes, kinds, _field_values(kept, codes, current))
    winners = row_wins[published]
    if winners.any():
        rows_set = _row_changes(kept.filter(pa.array(winners)), current, ctx)
        changes = pc.replace_with_mask(changes, pa.array(winners), rows_set)
    announces = winners & (codes == int(EventType.INSERT_ROW_QUERY_BACK))
    operations = _merged(kept, codes, kinds, changes, announces, current, ctx)
    unreadable = pa.table({"record_id": events["record_id"], "reason": problems}).filter(pc.is_valid(problems))
    return QueryBackResolution(operations, events["record_id"].filter(pa.array(vanished)).combine_chunks(), unreadable)


def _problems(events: pa.Table, rows: list[CurrentRow | None]) -> pa.Array:
    """Per event, why it is E (`precedence.unreadable_reason`), or null: a row query-back of a
    row with a value that cannot be published, a field query-back of such a value."""
    troubled = np.array([row is not None and bool(row.problems) for row in rows], dtype=bool)
    reasons: list[str | None] = [None] * events.num_rows
    if not troubled.any():
        return pa.array(reasons, pa.string())
    objects = object_ids(events)
    codes = np.asarray(events["event_type_code"]).astype(np.int64)
    names = events["attr_name"].to_pylist()
    for index in np.flatnonzero(troubled[objects] & (codes >= _QUERY_BACK_FROM)).tolist():
        row_problems = rows[objects[index]].problems  # type: ignore[union-attr]
        if codes[index] in _ROW_QB:
            reasons[index] = unreadable_reason(row_problem(row_problems))
        elif names[index] in row_problems:
            reasons[index] = unreadable_reason(row_problems[names[index]])
    return pa.array(reasons, pa.string())


def _current_of(events: pa.Table, current: Mapping[tuple[str, str], CurrentRow]) -> list[CurrentRow | None]:
    firsts = events.take(pa.array(np.flatnonzero(object_starts(events))))
    names, keys = firsts["class_name"].to_pylist(), firsts["canonical_key"].to_pylist()
    return [current.get(obj) for obj in zip(names, keys, strict=True)]


def _decide(
    events: pa.Table, exists: np.ndarray, unreadable: np.ndarray, ctx: OperationContext
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(published, effective type, row query-back winners, vanished) per event, of objects in
    processing order, given which objects exist and which query-back events are `unreadable`:
    `precedence.decide` over all objects at once. An object whose row has a value that cannot
    be published has no winning row query-back."""
    n = events.num_rows
    codes = np.asarray(events["event_type_code"]).astype(np.int64)
    objects = object_ids(events)
    index = np.arange(n)
    present = exists[objects] if n else np.zeros(0, bool)
    is_row = np.isin(codes, _ROW_QB)
    is_field = np.isin(codes, _FIELD_QB)
    is_delete = codes == EventType.DELETE_ROW
    rows_after_delete = ctx.insert_row_operation == InsertRowOperation.ADD
    last_delete = np.full(len(exists), -1)
    np.maximum.at(last_delete, objects[is_delete], index[is_delete])
    after_delete = index > last_delete[objects]
    is_inserting = np.isin(codes, _INSERTING)
    last_insert = np.full(len(exists), -1)
    np.maximum.at(last_insert, objects[is_inserting], index[is_inserting])
    reinserted = (last_insert > last_delete)[objects]
    troubled = np.zeros(len(exists), bool)
    troubled[objects[unreadable & is_row]] = True
    row_eligible = is_row & present & ~troubled[objects] & (after_delete | (reinserted & (not rows_after_delete)))
    first_row = np.full(len(exists), n)
    np.minimum.at(first_row, objects[row_eligible], index[row_eligible])
    has_row_winner = (first_row < n)[objects]
    row_wins = row_eligible & (index == first_row[objects])
    attribute = _per_attribute(events, objects)
    field_eligible = is_field & present & after_delete & ~unreadable
    won, first = np.unique(attribute[field_eligible], return_index=True)
    field_wins = np.zeros(n, bool)
    field_wins[index[field_eligible][first]] = True
    field_wins &= ~has_row_winner
    effective = codes.copy()
    strong = np.unique(attribute[codes == EventType.UPDATE_FIELD_QUERY_BACK])
    effective[is_field] = np.where(np.isin(attribute[is_field], strong), int(EventType.UPDATE_FIELD_QUERY_BACK),
                                   int(EventType.INSERT_FIELD_QUERY_BACK))
    logged = np.isin(codes, _LOGGED_VALUES)
    beaten = has_row_winner | (logged & np.isin(attribute, won))
    survives = ~is_row & ~is_field & ((is_delete & rows_after_delete) | ~beaten)
    return survives | row_wins | field_wins, effective, row_wins, (is_row | is_field) & ~present


def _per_attribute(events: pa.Table, objects: np.ndarray) -> np.ndarray:
    """A number per (object, attribute name) of each event; events naming no attribute share
    their object's."""
    names = events["attr_name"].combine_chunks().dictionary_encode()
    codes = np.asarray(names.indices.fill_null(-1)).astype(np.int64) + 1
    return objects * (len(names.dictionary) + 1) + codes


def _kinds(codes: np.ndarray, ctx: OperationContext) -> pa.Array:
    """`operations.operation_kind` of each effective event type."""
    adds = (codes == EventType.INSERT_FIELD) | (
        (codes == EventType.INSERT_ROW_QUERY_BACK) & (ctx.insert_row_operation == InsertRowOperation.ADD)
    )
    return pa.array(np.where(adds, _ADD, np.where(codes == EventType.DELETE_ROW, _DELETE, _MODIFY)), pa.string())


def _logged_changes(
    events: pa.Table, codes: np.ndarray, kinds: pa.Array, field_values: pa.Array | None = None
) -> pa.Array:
    """Each event's attribute change as `operations.attr_changes` makes it, for all but row
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


def _row_changes(winners: pa.Table, current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext) -> pa.Array:
    """Each winning row query-back's attribute changes: every value column of its table set
    to its current value, as `operations.attr_changes` makes them, joined."""
    kinds: list[str] = []
    names: list[str] = []
    types: list[str] = []
    adds: list[str | None] = []
    counts: list[int] = []
    for name, key, code in zip(winners["class_name"].to_pylist(), winners["canonical_key"].to_pylist(),
                               winners["event_type_code"].to_pylist(), strict=True):
        columns = ctx.tables[name].value_columns
        values = current[(name, key)].values
        is_add = code == EventType.INSERT_ROW_QUERY_BACK and ctx.insert_row_operation == InsertRowOperation.ADD
        kind = _ADD if is_add else _MODIFY
        kinds.extend([kind] * len(columns))
        names.extend(c.name for c in columns)
        types.extend(c.value_type.value for c in columns)
        adds.extend(values.get(c.name) for c in columns)
        counts.append(len(columns))
    kind_array = pa.array(kinds, pa.string())
    changes = column_attr_changes(
        kind_array, pa.array(names, pa.string()), pa.array(types, pa.string()),
        pc.equal(kind_array, _MODIFY), pa.nulls(len(kinds), pa.string()), pa.array(adds, pa.string()),
    )
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    return pc.binary_join(pa.ListArray.from_arrays(offsets, changes), "")


def _merged(
    events: pa.Table, codes: np.ndarray, kinds: pa.Array, changes: pa.Array, announces: np.ndarray,
    current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext,
) -> pa.Table:
    """Published events in processing order, with their effective types (`codes`) → one
    operation per run of an object's consecutive same-kind events, its body their changes
    joined; a modify with an empty body is dropped unless a unit of it `announces` the object
    (`operations._announces`). With the formats on, each operation's change too. Raises
    ValueError naming the operation and the text when some text is one XML cannot carry."""
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
        texts = _named_texts(firsts["class_name"][run].as_py(), associations[run].as_py(),
                             events.slice(start, end - start), codes[start:end])
        raise refusal(firsts["record_id"][run].as_py(), texts, xml[run].as_py())
    described = []
    if ctx.changes:
        described = _run_changes(events, codes, first[runs], ends[runs], run_kinds, current, ctx)
    return _operations_table(firsts["position_time"], firsts["record_id"], pc.cast(xml, pa.binary()), described, ctx)


def _named_texts(
    class_name: str, association: str, run: pa.Table, codes: np.ndarray
) -> Iterator[tuple[str, str | None]]:
    """The texts of an operation's logged events, named in the order `xds.refusal` takes them."""
    yield "class name", class_name
    yield "association", association
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
    """`changes.change_of` of each published run [start, end) of events, of kind `kinds`."""
    units = events.select(list(_UNIT_FIELDS)).to_pylist()
    for unit, code in zip(units, codes.tolist(), strict=True):
        unit["effective_type"] = code
    names, keys = events["class_name"].to_pylist(), events["canonical_key"].to_pylist()
    described = []
    for start, end, kind in zip(starts.tolist(), ends.tolist(), kinds.to_pylist(), strict=True):
        obj = (names[start], keys[start])
        row = current.get(obj)
        group = {"canonical_key": obj[1], "units": units[start:end]}
        described.append(change_of(group, ctx.tables[obj[0]], None if row is None else dict(row.values),
                                   OperationKind(kind)))
    return described
