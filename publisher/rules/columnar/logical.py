"""The column rules (`rules.columnar`) of logical classes: what a class's multi-valued
attributes and references change, over all objects at once.

In precedence (`decide` of `tests/oracle/precedence.py`), a child row's events are the parent's events of its
multi-valued attribute: a delete of the parent takes them along, an object that is gone has
none, a removal of a value the attribute still holds says nothing, and the parent's insert
carries every current value. In operations (`attr_changes` of `tests/oracle/operations.py`), a multi-valued
attribute publishes all its values in one change, and a reference's value is the association of
the object its text keys, with association-ref when that object exists (`operations.References`,
read by the caller for each slice). Properties in the tests hold both equal to the per-object
rules on generated events.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.catalog import TableInfo
from publisher.model.events import INSERTING, EventType
from publisher.model.operation import OperationKind, association
from publisher.model.values import ValueType
from publisher.model.xds import column_value_changes, column_values
from publisher.rules.operations import References
from publisher.rules.precedence import CurrentRow

_DELETE = int(EventType.DELETE_ROW)
_UPDATE = int(EventType.UPDATE_FIELD)
_INSERTING = sorted(int(t) for t in INSERTING)
_FIELD_QB_FROM = int(EventType.INSERT_FIELD_QUERY_BACK)
_REMOVING_ALL = [int(EventType.UPDATE_FIELD_REMOVE_ALL), int(EventType.UPDATE_FIELD_QUERY_BACK)]
_MODIFY = OperationKind.MODIFY.value
_CHANGE_ROWS = pa.schema([
    ("event", pa.int64()), ("seq", pa.int32()), ("name", pa.string()), ("value_type", pa.string()),
    ("remove_all", pa.bool_()), ("remove", pa.string()), ("adds", pa.list_(pa.string())),
])
"""An attribute change of an event: `seq` orders an event's changes; `adds` its added texts."""


def logical_events(events: pa.Table, tables: Mapping[str, TableInfo]) -> np.ndarray:
    """True for each event of a logical class."""
    return _of_classes(events["class_name"], [name for name, table in tables.items() if table.is_logical])


def _of_classes(classes: pa.Array | pa.ChunkedArray, names: list[str]) -> np.ndarray:
    if not names or not len(classes):
        return np.zeros(len(classes), bool)
    return np.asarray(pc.fill_null(pc.is_in(classes, pa.array(names, pa.string())), False))


def _multi_valued(events: pa.Table, tables: Mapping[str, TableInfo]) -> np.ndarray:
    """True for each event of a multi-valued attribute of its class (a child row's)."""
    found = np.zeros(events.num_rows, bool)
    for name, table in tables.items():
        if table.multi_valued and events.num_rows:
            names = pa.array(sorted(table.multi_valued_names), pa.string())
            found |= np.asarray(pc.fill_null(
                pc.and_(pc.equal(events["class_name"], name), pc.is_in(events["attr_name"], names)), False))
    return found


@dataclass(frozen=True)
class ChildEvents:
    """How multi-valued attributes weigh in `decide` of `tests/oracle/precedence.py`, per event of objects in
    processing order."""

    multi: np.ndarray
    """Of a multi-valued attribute of its class."""
    taken: np.ndarray
    """Made redundant by a delete of the object (`_taken_by_delete` of `tests/oracle/precedence.py`)."""
    silenced: np.ndarray
    """Redundant before anything else is weighed: taken, of an object that is gone, or the
    removal of a value its attribute still holds (`_still_held` of `tests/oracle/precedence.py`)."""
    troubled: np.ndarray
    """Of a multi-valued attribute with a value that cannot be published."""
    carrying: np.ndarray
    """Per object: it exists and has multi-valued attributes, which its insert carries."""

    @classmethod
    def of(cls, events: pa.Table, codes: np.ndarray, objects: np.ndarray, rows: list[CurrentRow | None],
           tables: Mapping[str, TableInfo]) -> ChildEvents:
        exists = np.array([row is not None for row in rows], bool)
        multi = _multi_valued(events, tables)
        taken = _taken_by_delete(codes, objects, multi)
        held = _still_held(events, codes, objects, rows, multi)
        silenced = taken | (multi & (~exists[objects] | held))
        firsts = events["class_name"].take(pa.array(np.flatnonzero(np.diff(objects, prepend=-1))))
        parents = _of_classes(firsts, [name for name, table in tables.items() if table.multi_valued])
        return cls(multi, taken, silenced, _troubled(events, objects, rows, multi), parents & exists)


def _taken_by_delete(codes: np.ndarray, objects: np.ndarray, multi: np.ndarray) -> np.ndarray:
    """`_taken_by_delete` of `tests/oracle/precedence.py` over all objects: an event of a multi-valued attribute (not
    a delete) is taken when, of its object's other events, the last delete or insert before it
    is a delete (the object is gone), or the next one after it is (it goes with the delete)."""
    n = len(codes)
    index = np.arange(n)
    child = multi & (codes != _DELETE)
    if not child.any():
        return child
    starts = np.flatnonzero(np.diff(objects, prepend=-1))
    first = starts[objects]
    end = np.append(starts[1:], n)[objects]
    marks = ~child & ((codes == _DELETE) | np.isin(codes, _INSERTING))
    last_mark = np.maximum.accumulate(np.where(marks, index, -1))
    gone = (last_mark >= first) & (codes[np.maximum(last_mark, 0)] == _DELETE)
    next_other = np.minimum.accumulate(np.where(~child, index, n)[::-1])[::-1]
    goes = (next_other < end) & (codes[np.minimum(next_other, n - 1)] == _DELETE)
    return child & (gone | goes)


def _still_held(events: pa.Table, codes: np.ndarray, objects: np.ndarray, rows: list[CurrentRow | None],
                multi: np.ndarray) -> np.ndarray:
    """The removals (type 2 with no new value) of a value its multi-valued attribute holds now."""
    held = np.zeros(len(codes), bool)
    removals = multi & (codes == _UPDATE) & np.asarray(pc.is_null(events["new_text"]))
    removals &= np.asarray(pc.is_valid(events["old_text"]))
    picked = np.flatnonzero(removals)
    names = events["attr_name"].take(pa.array(picked)).to_pylist()
    olds = events["old_text"].take(pa.array(picked)).to_pylist()
    for index, name, old in zip(picked.tolist(), names, olds, strict=True):
        row = rows[objects[index]]
        held[index] = row is not None and old in row.multi.get(name, ())
    return held


def _troubled(events: pa.Table, objects: np.ndarray, rows: list[CurrentRow | None], multi: np.ndarray) -> np.ndarray:
    """Events of a multi-valued attribute its current row cannot publish (`CurrentRow.problems`)."""
    troubled = np.zeros(len(objects), bool)
    with_problems = np.array([row is not None and bool(row.problems) for row in rows], bool)
    picked = np.flatnonzero(multi & with_problems[objects]) if len(rows) else np.zeros(0, np.int64)
    names = events["attr_name"].take(pa.array(picked, pa.int64())).to_pylist()
    for index, name in zip(picked.tolist(), names, strict=True):
        troubled[index] = name in rows[objects[index]].problems  # type: ignore[union-attr]
    return troubled


def referenced_keys(events: pa.Table, current: Mapping[tuple[str, str], CurrentRow],
                    tables: Mapping[str, TableInfo], referenced: References) -> dict[str, list[str]]:
    """The objects the references of a slice's events may name (class name → canonical keys), to
    read which exist: those keyed by the texts its reference attributes' events log and by its
    objects' current values of those attributes."""
    targets = _targets(events["class_name"], events["attr_name"], tables)
    pairs = {*_pairs(targets, events["old_text"]), *_pairs(targets, events["new_text"])}
    named = events.filter(pa.array(_of_classes(events["class_name"], [n for n, t in tables.items() if t.references])))
    objects = named.group_by(["class_name", "canonical_key"]).aggregate([])
    for name, key in zip(objects["class_name"].to_pylist(), objects["canonical_key"].to_pylist(), strict=True):
        row = current.get((name, key))
        for attribute, target in tables[name].references if row is not None else ():
            texts = (row.values.get(attribute), *row.multi.get(attribute, ()))  # type: ignore[union-attr]
            pairs.update((target, text) for text in texts if text is not None)
    wanted: dict[str, set[str]] = {}
    for target, text in pairs:
        found = referenced.target(target, text)
        if found is not None:
            wanted.setdefault(found[0], set()).add(found[1])
    return {name: sorted(keys) for name, keys in wanted.items()}


def _pairs(targets: pa.Array, texts: pa.Array | pa.ChunkedArray) -> Iterator[tuple[str, str]]:
    """The distinct (target class, text) of rows with both; a class name holds no NUL."""
    for joined in pc.unique(pc.binary_join_element_wise(targets, texts, "\x00").drop_null()).to_pylist():
        target, text = joined.split("\x00", 1)
        yield target, text


def _targets(classes: pa.Array | pa.ChunkedArray, names: pa.Array | pa.ChunkedArray,
             tables: Mapping[str, TableInfo]) -> pa.Array:
    """The class whose objects each row's attribute names (a reference's), or null."""
    targets = pa.nulls(len(classes), pa.string())
    classes, names = _array(classes), _array(names)
    for name, table in tables.items():
        for attribute, target in table.references:
            named = pc.fill_null(pc.and_(pc.equal(classes, name), pc.equal(names, attribute)), False)
            targets = pc.if_else(named, target, targets)
    return _array(targets)


def published_references(targets: pa.Array, texts: pa.Array, referenced: References) -> tuple[pa.Array, pa.Array]:
    """Each text as published, and its association-ref or null: a reference's as the association
    of the object it keys, with association-ref when that object exists (`operations.References`);
    another text as it is."""
    encoded = _array(pc.binary_join_element_wise(targets, texts, "\x00")).dictionary_encode()
    published: list[str] = []
    refs: list[str | None] = []
    for joined in encoded.dictionary.to_pylist():
        target, text = joined.split("\x00", 1)
        found = referenced.target(target, text)
        named = text if found is None else association(found[1], found[0], referenced.schema_label)
        published.append(named)
        refs.append(named if found is not None and found in referenced.existing else None)
    return (pc.coalesce(pc.take(pa.array(published, pa.string()), encoded.indices), texts),
            pc.take(pa.array(refs, pa.string()), encoded.indices))


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


@dataclass(frozen=True)
class ValueChanges:
    """Each event's attribute changes as its operation's body holds them, joined."""

    fragments: pa.Array
    published: pa.Table
    """(event, name, remove, adds) per change, its texts as published."""

    def texts(self, event: int) -> Iterator[tuple[str, str | None]]:
        """The texts of an event's changes, named in the order `xds.refusal` takes an operation's."""
        for row in self.published.filter(pc.equal(self.published["event"], event)).to_pylist():
            name = row["name"]
            yield f"attribute name {name!r}", name
            if row["remove"] is not None:
                yield f"removed value of attribute {name!r}", row["remove"]
            for text in row["adds"]:
                yield f"added value of attribute {name!r}", text


def value_changes(events: pa.Table, codes: np.ndarray, kinds: pa.Array, expanded: tuple[np.ndarray, np.ndarray],
                  current: Mapping[tuple[str, str], CurrentRow], tables: Mapping[str, TableInfo],
                  referenced: References) -> ValueChanges:
    """`attr_changes` of `tests/oracle/operations.py` of published events (effective types `codes`, operation
    `kinds`) whose values are more than one logged or read text: a logical class's, and the
    winning row query-backs; `expanded` holds those winners and the inserts that carry their
    object's multi-valued attributes."""
    rows = _change_rows(events, codes, kinds, expanded, current, tables)
    event, names, adds = (_array(rows[c]) for c in ("event", "name", "adds"))
    targets = _targets(events["class_name"].take(event), names, tables)
    value_types = pc.if_else(pc.is_valid(targets), ValueType.DN.value, _array(rows["value_type"]))
    removes, remove_refs = published_references(targets, _array(rows["remove"]), referenced)
    parents = pc.list_parent_indices(adds)
    texts, refs = published_references(targets.take(parents), pc.list_flatten(adds), referenced)
    counts = np.asarray(pc.list_value_length(adds))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    each = column_values(value_types.take(parents), texts, refs)
    values = pc.binary_join(pa.ListArray.from_arrays(offsets, each), "")
    added = pc.if_else(pa.array(counts > 0), values, pa.scalar(None, pa.string()))
    fragments = column_value_changes(kinds.take(event), names, _array(rows["remove_all"]),
                                     column_values(value_types, removes, remove_refs), added)
    per_event = np.concatenate([[0], np.cumsum(np.bincount(np.asarray(event), minlength=events.num_rows))])
    published = pa.table({"event": event, "name": names, "remove": removes,
                          "adds": pa.ListArray.from_arrays(offsets, texts)})
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(per_event.astype(np.int32)), fragments), "")
    return ValueChanges(joined, published)


def _change_rows(events: pa.Table, codes: np.ndarray, kinds: pa.Array, expanded: tuple[np.ndarray, np.ndarray],
                 current: Mapping[tuple[str, str], CurrentRow], tables: Mapping[str, TableInfo]) -> pa.Table:
    """Every attribute change of the events, in order: each event's own (none for a delete or a
    winning row query-back), then a winning row query-back's of every value column and
    multi-valued attribute, or the multi-valued attributes an insert carries."""
    row_wins, _ = expanded
    own = (codes != _DELETE) & ~row_wins
    logged = np.flatnonzero(own & (codes < _FIELD_QB_FROM))
    picked = events.take(pa.array(logged, pa.int64()))
    logged_codes = codes[logged]
    logged_rows = pa.table([
        pa.array(logged, pa.int64()), pa.array(np.zeros(len(logged), np.int32)), picked["attr_name"],
        picked["value_type"], pa.array(logged_codes == _REMOVING_ALL[0]),
        pc.if_else(pa.array(logged_codes == _UPDATE), _array(picked["old_text"]), pa.scalar(None, pa.string())),
        _singletons(_array(picked["new_text"])),
    ], schema=_CHANGE_ROWS)
    read = _read_back(events, codes, own & (codes >= _FIELD_QB_FROM), current, tables)
    read_rows = pa.table({**{name: pa.array(read[name], _CHANGE_ROWS.field(name).type) for name in read},
                          "remove": pa.nulls(len(read["event"]), pa.string())}, schema=_CHANGE_ROWS)
    rows = pa.concat_tables([logged_rows, read_rows, _expanded(events, kinds, expanded, current, tables)])
    return rows.take(pc.sort_indices(rows, [("event", "ascending"), ("seq", "ascending")])).combine_chunks()


def _singletons(texts: pa.Array) -> pa.Array:
    """Each text as a list of it, or of nothing where it is null."""
    offsets = np.concatenate([[0], np.cumsum(np.asarray(pc.is_valid(texts)))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), texts.drop_null())


_Columns = dict[str, list[Any]]
"""Change rows (`_CHANGE_ROWS`, but `remove`: none) as lists per column."""


def _read_back(events: pa.Table, codes: np.ndarray, picked: np.ndarray, current: Mapping[tuple[str, str], CurrentRow],
               tables: Mapping[str, TableInfo]) -> _Columns:
    """The changes of published field query-backs: every value a multi-valued attribute holds, or
    the column's current value."""
    indices = np.flatnonzero(picked)
    chosen = events.take(pa.array(indices, pa.int64()))
    names, keys, attributes = (chosen[c].to_pylist() for c in ("class_name", "canonical_key", "attr_name"))
    adds = []
    for name, key, attribute in zip(names, keys, attributes, strict=True):
        row = current[(name, key)]
        multi = attribute in tables[name].multi_valued_names
        adds.append(list(row.multi.get(attribute, ())) if multi else _listed(row.values.get(attribute)))
    return {"event": indices.tolist(), "seq": [0] * len(indices), "name": attributes,
            "value_type": chosen["value_type"].to_pylist(),
            "remove_all": (codes[indices] == _REMOVING_ALL[1]).tolist(), "adds": adds}


def _expanded(events: pa.Table, kinds: pa.Array, expanded: tuple[np.ndarray, np.ndarray],
              current: Mapping[tuple[str, str], CurrentRow], tables: Mapping[str, TableInfo]) -> pa.Table:
    """A winning row query-back's changes: every value column and multi-valued attribute set to its
    current values; an insert's: the multi-valued attributes it carries (those it can publish).
    Laid out a class at a time: its winners' value columns, then the multi-valued attributes."""
    row_wins, carriers = expanded
    indices = np.flatnonzero(row_wins | carriers)
    chosen = events.take(pa.array(indices, pa.int64()))
    wins = row_wins[indices]
    modify = np.asarray(pc.equal(kinds.take(pa.array(indices, pa.int64())), _MODIFY).fill_null(False), bool)
    classes = np.asarray(chosen["class_name"].to_numpy(zero_copy_only=False), dtype=object)
    rows = [current[obj] for obj in zip(classes.tolist(), chosen["canonical_key"].to_pylist(), strict=True)]
    parts = []
    for name in dict.fromkeys(classes.tolist()):
        of_class = classes == name
        table = tables[name]
        parts.append(_column_changes(indices, modify, rows, np.flatnonzero(of_class & wins), table))
        if table.multi_valued:
            parts.append(_multi_changes(indices, modify, rows, np.flatnonzero(of_class), wins, table))
    return pa.concat_tables(parts) if parts else _CHANGE_ROWS.empty_table()


def _column_changes(indices: np.ndarray, modify: np.ndarray, rows: Sequence[CurrentRow], winners: np.ndarray,
                    table: TableInfo) -> pa.Table:
    """The value columns of one class's winning row query-backs (`winners`, places in `rows`),
    each set to its current value: `seq` 0, 1, … in the table's order."""
    columns = table.value_columns
    count = len(columns)
    texts = [rows[at].values.get(c.name) for at in winners.tolist() for c in columns]
    return pa.table({
        "event": pa.array(np.repeat(indices[winners], count), pa.int64()),
        "seq": pa.array(np.tile(np.arange(count, dtype=np.int32), len(winners))),
        "name": pa.array([c.name for c in columns] * len(winners), pa.string()),
        "value_type": pa.array([c.value_type.value for c in columns] * len(winners), pa.string()),
        "remove_all": pa.array(np.repeat(modify[winners], count)),
        "remove": pa.nulls(len(texts), pa.string()),
        "adds": _singletons(pa.array(texts, pa.string())),
    }, schema=_CHANGE_ROWS)


def _multi_changes(indices: np.ndarray, modify: np.ndarray, rows: Sequence[CurrentRow], chosen: np.ndarray,
                   wins: np.ndarray, table: TableInfo) -> pa.Table:
    """The multi-valued attributes of one class's chosen events with every value they hold: all of
    them after a winner's value columns, those an insert can publish after its own change."""
    out: dict[str, list[Any]] = {"event": [], "seq": [], "name": [], "value_type": [], "remove_all": [], "adds": []}
    first_of_winner = len(table.value_columns)
    for at in chosen.tolist():
        row, win = rows[at], bool(wins[at])
        carried = [m.attribute for m in table.multi_valued if win or m.attribute.name not in row.problems]
        first = first_of_winner if win else 1
        out["event"] += [int(indices[at])] * len(carried)
        out["seq"] += range(first, first + len(carried))
        out["name"] += [a.name for a in carried]
        out["value_type"] += [a.value_type.value for a in carried]
        out["remove_all"] += [bool(modify[at])] * len(carried)
        out["adds"] += [list(row.multi.get(a.name, ())) for a in carried]
    return pa.table({**{name: pa.array(values, _CHANGE_ROWS.field(name).type) for name, values in out.items()},
                     "remove": pa.nulls(len(out["event"]), pa.string())}, schema=_CHANGE_ROWS)


def _listed(text: str | None) -> list[str]:
    return [] if text is None else [text]
