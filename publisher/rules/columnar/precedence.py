"""Precedence (`decide` of `tests/oracle/precedence.py`) as column operations over a batch of objects sorted by
object, in processing order: the same rules written as group operations over (object) and
(object, attribute). The first row query-back after the last delete wins and beats the
object's other events, the first field query-back of an attribute beats that attribute's logged
values, a query-back of an object that is gone is W, one whose value cannot be published is E;
a logical class's multi-valued attributes weigh in as `columnar.logical.ChildEvents` says.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.config import InsertRowOperation
from publisher.model.events import FIELD_QUERY_BACK, INSERTING, LOGGED_VALUES, ROW_QUERY_BACK, EventType
from publisher.rules.columnar.logical import ChildEvents
from publisher.rules.operations import OperationContext
from publisher.rules.order import arrow_sort_keys
from publisher.rules.precedence import CurrentRow, row_problem, unreadable_reason

QUERY_BACK_FROM = int(EventType.INSERT_ROW_QUERY_BACK)
_ROW_QB = sorted(int(t) for t in ROW_QUERY_BACK)
_FIELD_QB = sorted(int(t) for t in FIELD_QUERY_BACK)
_INSERTING = sorted(int(t) for t in INSERTING)
_LOGGED_VALUES = sorted(int(t) for t in LOGGED_VALUES)


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


def in_processing_order(events: pa.Table) -> pa.Table:
    """Sorted by object, and within an object in processing order (`rules.order`)."""
    return events.take(pc.sort_indices(events, sort_keys=[
        ("class_name", "ascending", "at_end"),
        ("canonical_key", "ascending", "at_end"),
        *arrow_sort_keys(),
    ]))


@dataclass(frozen=True)
class Decided:
    """`decide` of `tests/oracle/precedence.py` per event of objects in processing order."""

    published: np.ndarray
    effective: np.ndarray
    """The type each event publishes as (`Decision.effective_type`)."""
    row_wins: np.ndarray
    carriers: np.ndarray
    """The inserts that carry their object's multi-valued attributes (`Decision.carries`)."""
    vanished: np.ndarray
    """Query-back events of objects that are gone: W."""
    unreadable: pa.Array
    """Why a query-back event's value cannot be published (E), or null."""


def decide(events: pa.Table, current: Mapping[tuple[str, str], CurrentRow], ctx: OperationContext) -> Decided:
    """`decide` of `tests/oracle/precedence.py` over all objects at once, given their current rows (absent: the
    object is gone). An object whose row has a value that cannot be published has no winning
    row query-back."""
    rows = _current_of(events, current)
    reasons = _problems(events, rows)
    unreadable = pc.is_valid(reasons).to_numpy(zero_copy_only=False)
    at = _Objects.of(events, rows)
    children = ChildEvents.of(events, at.codes, at.objects, rows, ctx.tables)
    is_row, is_field = np.isin(at.codes, _ROW_QB), np.isin(at.codes, _FIELD_QB)
    rows_after_delete = ctx.insert_row_operation == InsertRowOperation.ADD
    row_wins = _row_winners(at, is_row & ~np.isin(at.objects, at.objects[unreadable & is_row]), rows_after_delete)
    row_won = np.isin(at.objects, at.objects[row_wins])
    eligible = is_field & at.present & at.after_delete & ~unreadable & ~children.taken
    won, first = np.unique(at.attribute[eligible], return_index=True)
    field_first = np.zeros(len(at.codes), bool)
    field_first[np.flatnonzero(eligible)[first]] = True
    inserts = at.after_delete & ~children.multi & (
        ((at.codes == EventType.INSERT_FIELD) & ~np.isin(at.attribute, won))
        | ((at.codes == EventType.INSERT_FIELD_QUERY_BACK) & field_first))
    carriers = _first_of_each(at.objects, inserts & children.carrying[at.objects] & ~row_won, at.count)
    carried = children.multi & ~children.troubled & np.isin(at.objects, at.objects[carriers])
    field_wins = field_first & ~row_won & ~carried
    beaten = (row_won & ~_retired_removals(events, at.codes, ctx)) | (
        np.isin(at.codes, _LOGGED_VALUES) & (np.isin(at.attribute, won) | carried))
    is_delete = at.codes == EventType.DELETE_ROW
    survives = ~is_row & ~is_field & ((is_delete & rows_after_delete) | ~beaten)
    return Decided(
        (survives | row_wins | field_wins) & ~children.silenced, _effective(at.codes, at.attribute, is_field),
        row_wins, carriers, (is_row | is_field) & ~at.present & ~children.silenced,
        pc.if_else(pa.array(children.silenced), pa.scalar(None, pa.string()), reasons),
    )


def _retired_removals(events: pa.Table, codes: np.ndarray, ctx: OperationContext) -> np.ndarray:
    """Removals of a retired attribute's values (type 3 of a column a migration took away), which
    no row query-back beats: it sets the columns the table has now."""
    found = np.zeros(len(codes), bool)
    retired = {(name, column) for name, table in ctx.tables.items() for column in table.retired}
    if not retired:
        return found
    for index in np.flatnonzero(codes == EventType.UPDATE_FIELD_REMOVE_ALL).tolist():
        found[index] = (events["class_name"][index].as_py(), events["attr_name"][index].as_py()) in retired
    return found


@dataclass(frozen=True)
class _Objects:
    """Per event of objects in processing order: its type, its object (numbered below `count`),
    whether that exists, whether the event follows its object's last delete, and its
    (object, attribute) (`_per_attribute`)."""

    codes: np.ndarray
    objects: np.ndarray
    count: int
    present: np.ndarray
    after_delete: np.ndarray
    attribute: np.ndarray
    reinserted: np.ndarray
    """The object's insert follows its last delete."""

    @classmethod
    def of(cls, events: pa.Table, rows: list[CurrentRow | None]) -> _Objects:
        codes = np.asarray(events["event_type_code"]).astype(np.int64)
        objects = object_ids(events)
        count = len(rows)
        present = np.array([row is not None for row in rows], bool)[objects] if len(codes) else np.zeros(0, bool)
        last_delete = _last_of_each(objects, codes == EventType.DELETE_ROW, count)
        reinserted = (_last_of_each(objects, np.isin(codes, _INSERTING), count) > last_delete)[objects]
        return cls(codes, objects, count, present, np.arange(len(codes)) > last_delete[objects],
                   _per_attribute(events, objects), reinserted)


def _row_winners(at: _Objects, candidates: np.ndarray, rows_after_delete: bool) -> np.ndarray:
    """The first row query-back of each object that exists, among `candidates`, after its last
    delete, or before it when its insert follows and a type 5 does not publish an <add>."""
    eligible = candidates & at.present & (at.after_delete | (at.reinserted & (not rows_after_delete)))
    return _first_of_each(at.objects, eligible, at.count)


def _effective(codes: np.ndarray, attribute: np.ndarray, is_field: np.ndarray) -> np.ndarray:
    """Each event's type, but a field query-back's: the strongest (7 < 8) of its attribute's."""
    effective = codes.copy()
    strong = np.unique(attribute[codes == EventType.UPDATE_FIELD_QUERY_BACK])
    effective[is_field] = np.where(np.isin(attribute[is_field], strong), int(EventType.UPDATE_FIELD_QUERY_BACK),
                                   int(EventType.INSERT_FIELD_QUERY_BACK))
    return effective


def _first_of_each(groups: np.ndarray, mask: np.ndarray, count: int) -> np.ndarray:
    """True at the first event of each group (numbered below `count`) where `mask` is."""
    index = np.arange(len(groups))
    first = np.full(count, len(groups))
    np.minimum.at(first, groups[mask], index[mask])
    return mask & (index == first[groups])


def _last_of_each(groups: np.ndarray, mask: np.ndarray, count: int) -> np.ndarray:
    """Per group (numbered below `count`), the index of its last event where `mask` is, or -1."""
    last = np.full(count, -1)
    np.maximum.at(last, groups[mask], np.arange(len(groups))[mask])
    return last


def _per_attribute(events: pa.Table, objects: np.ndarray) -> np.ndarray:
    """A number per (object, attribute name) of each event; events naming no attribute share
    their object's."""
    names = events["attr_name"].combine_chunks().dictionary_encode()
    codes = np.asarray(names.indices.fill_null(-1)).astype(np.int64) + 1
    return objects * (len(names.dictionary) + 1) + codes


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
    for index in np.flatnonzero(troubled[objects] & (codes >= QUERY_BACK_FROM)).tolist():
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
