"""A logical class in a triggerless cycle (docs: concepts/logical-classes.md, guides/triggerless.md):
its child tables' rows compared with the state's as sets of values per object, and its
references published as the associations of the objects they name.

A child table is kept in its parent's buckets, by a hash of its link columns (the parent's key),
so the values of the objects of one bucket are compared in that bucket: a value added or removed
is a `<modify>` of the object's attribute (the object's other attributes may change with it),
a new object's `<add>` carries every value it has, a deleted one's `<delete>` takes them along.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.canonical import canonical_key_of
from publisher.model.catalog import MultiValued, TableInfo, child_table
from publisher.model.operation import OperationKind
from publisher.model.values import ValueType
from publisher.model.xds import column_value_changes, column_values
from publisher.pipeline.row_reading import published_column
from publisher.rules.columnar.logical import published_references
from publisher.rules.operations import References
from publisher.triggerless.state import (
    TableLayout,
    bucket_files,
    key_name,
    key_names,
    read_bucket,
    read_state_file,
    value_name,
)

VALUE = "value"


@dataclass(frozen=True)
class ChildJob:
    """One multi-valued attribute of a bucket job's class: its child rows in the read, and in the
    state (`old` None: the state holds none, the attribute is new)."""

    multi: MultiValued
    layout: TableLayout
    table_index: int
    old: TableLayout | None
    kept_index: int


@dataclass(frozen=True)
class ChildRows:
    """One attribute's child rows of a bucket: `current` the values now (key texts, VALUE), one
    row per object and value; `changed` those added or removed since the state (`added`)."""

    current: pa.Table
    changed: pa.Table


def child_rows(child: ChildJob, read: Path, kept: Path | None, bucket: int, buckets: int) -> ChildRows:
    new = distinct(read_bucket(read, child.table_index, child.layout, bucket, buckets), child.layout)
    if child.old is None or kept is None:
        old = new.schema.empty_table()
    else:
        old = distinct(read_bucket(kept, child.kept_index, child.old, bucket, buckets, held=True), child.old)
    names = new.column_names
    joined = _present(old, "in_old").join(_present(new, "in_new"), names, join_type="full outer")
    in_old = pc.fill_null(joined.column("in_old"), False)
    in_new = pc.fill_null(joined.column("in_new"), False)
    changed = joined.filter(pc.not_equal(in_old, in_new))
    added = pc.fill_null(changed.column("in_new"), False)
    return ChildRows(new, changed.select(names).append_column("added", added))


def _present(rows: pa.Table, name: str) -> pa.Table:
    return rows.append_column(name, pa.array(np.ones(len(rows), bool)))


def distinct(rows: pa.Table, layout: TableLayout) -> pa.Table:
    """A child's rows as (key texts, VALUE), each pair once; a row with a NULL names no value."""
    keys = key_names(layout)
    rows = rows.select([*keys, value_name(0)]).rename_columns([*keys, VALUE])
    valid = pc.is_valid(rows.column(VALUE))
    for key in keys:
        valid = pc.and_(valid, pc.is_valid(rows.column(key)))
    return rows.filter(valid).group_by([*keys, VALUE], use_threads=False).aggregate([])


def objects_changed(children: Sequence[ChildRows], keys: list[str]) -> pa.Table | None:
    """The key texts of the objects whose values of some attribute changed, each once."""
    changed = [rows.changed.select(keys) for rows in children if len(rows.changed)]
    if not changed:
        return None
    return pa.concat_tables(changed).group_by(keys, use_threads=False).aggregate([])


class Referenced:
    """How the references of a bucket's objects are published: as the association of the object
    a value names, with association-ref where the tables hold that object now (the read's keys)."""

    def __init__(self, tables: Mapping[str, TableInfo], schema_label: str, read: Path,
                 indices: Mapping[str, int]) -> None:
        self.references = References(tables, schema_label)
        self.read = read
        self.indices = indices

    def published(self, target: str, texts: pa.Array) -> tuple[pa.Array, pa.Array]:
        """The texts as the associations they name, and the association-ref of those that exist:
        a text the referenced table's key reads as (most), else one naming the same key
        (`1.500` and a key `1.50`: the canonical keys, worked out only then)."""
        distinct_texts = pc.unique(texts.drop_null())
        index = self.indices[target]
        held = pc.is_in(distinct_texts, value_set=read_keys(self.read, index))
        existing = []
        for text, there in zip(distinct_texts.to_pylist(), held.to_pylist(), strict=True):
            found = self.references.target(target, text)
            if found is not None and (there or found[1] in canonical_keys(self.read, index,
                                                                          self.references.tables[target])):
                existing.append(found)
        targets = pa.array([target] * len(texts), pa.string())
        return published_references(targets, texts, self.references.found(existing))


@functools.lru_cache(maxsize=4)
def read_keys(directory: Path, table_index: int) -> pa.Array:
    """The key texts of a table (keyed by one column) as a generation read it: whether an object
    a reference names exists. Read once per process and generation."""
    files = bucket_files(directory, table_index)
    if not files:
        return pa.array([], pa.string())
    return pa.concat_arrays([read_state_file(path, [key_name(0)]).column(0).combine_chunks() for path in files])


@functools.lru_cache(maxsize=4)
def canonical_keys(directory: Path, table_index: int, table: TableInfo) -> frozenset[str]:
    """The canonical keys of a table as a generation read it (`read_keys`), for the references
    whose text is not a key text as read."""
    found = set()
    for text in read_keys(directory, table_index).drop_null().to_pylist():
        try:
            found.add(canonical_key_of([text], table.key_columns))
        except ValueError:
            continue
    return frozenset(found)


def multi_valued_changes(table: TableInfo, child: ChildJob, rows: ChildRows, found: pa.Table, keys: Sequence[str],
                         kinds: pa.Array, rejects: list[dict[str, Any]], referenced: Referenced) -> pa.Array:
    """Each differing object's change of one multi-valued attribute, as its operation's body
    holds it: an `<add>` every value the object has, a `<modify>` the values removed and added.

    Values are compared as the database spells them, and published as text: two rows may publish
    one value (timestamps within a second), see `_published_changes`."""
    names = key_names(child.layout)
    objects = found.select(names).append_column("object", pa.array(np.arange(len(found)), pa.int64()))
    objects = objects.append_column("kind", kinds)

    def of(kind: OperationKind, values: pa.Table, held: bool) -> pa.Table:
        chosen = objects.filter(pc.equal(objects.column("kind"), kind.value)).drop_columns(["kind"])
        joined = values.join(chosen, names, join_type="inner").select(["object", VALUE, "added"])
        return joined.append_column("held", pa.array(np.full(len(joined), held), pa.bool_()))

    everything = rows.current.append_column("added", pa.array(np.ones(len(rows.current), bool)))
    values = pa.concat_tables([of(OperationKind.ADD, everything, False), of(OperationKind.MODIFY, rows.changed, False),
                               of(OperationKind.MODIFY, everything, True)])
    values = values.sort_by([("object", "ascending"), ("added", "ascending"), (VALUE, "ascending")])
    multi = child.multi
    texts, problems = published_column(child_table(multi), multi.value, values.column(VALUE).combine_chunks())
    owners = values.column("object").to_pylist()
    added = values.column("added").to_pylist()
    held = values.column("held").to_pylist()
    rejects += [{"table_name": table.name, "table_key": keys[owners[row]], "column_name": multi.attribute.name,
                 "reason": reason} for row, reason in problems.items() if added[row] and not held[row]]
    target = table.reference(multi.attribute.name)
    refs = None
    value_type = multi.attribute.value_type
    if target is not None:
        texts, refs = referenced.published(target, texts)
        value_type = ValueType.DN
    xml = column_values(pa.array([value_type.value] * len(texts), pa.string()), texts, refs).to_pylist()
    removes, adds = _published_changes(owners, added, held, values.column(VALUE).to_pylist(), xml, len(found))
    count = len(found)
    return column_value_changes(
        kinds, pa.array([multi.attribute.name] * count, pa.string()), pa.array([False] * count, pa.bool_()),
        pa.array(["".join(v) if v else None for v in removes], pa.string()),
        pa.array(["".join(v) if v else None for v in adds], pa.string()))


def _published_changes(owners: list[int], added: list[bool], held: list[bool], spelled: list[Any],
                       published: list[str | None], count: int) -> tuple[list[dict[str, None]], list[dict[str, None]]]:
    """Per object, the published values removed and added, each once: a removal of a value the
    attribute still holds (another row publishes it) says nothing, as in the triggered mode
    (`_still_held` of `tests/oracle/precedence.py`), nor does an addition of a value it held already. Rows
    `held` are a modified object's values now, which only say what it holds."""
    rows = list(zip(owners, added, held, spelled, published, strict=True))
    now = {(owner, value) for owner, _, is_held, _, value in rows if is_held}
    new = {(owner, text) for owner, is_added, is_held, text, _ in rows if is_added and not is_held}
    before = {(owner, value) for owner, is_added, is_held, text, value in rows
              if (is_held and (owner, text) not in new) or not (is_added or is_held)}
    removes: list[dict[str, None]] = [{} for _ in range(count)]
    adds: list[dict[str, None]] = [{} for _ in range(count)]
    for owner, is_added, is_held, _, value in rows:
        if value is None or is_held or (owner, value) in (before if is_added else now):
            continue
        (adds if is_added else removes)[owner][value] = None
    return removes, adds
