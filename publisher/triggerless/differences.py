"""What differs in one bucket: the state's rows and the read's joined by key (`matched_rows`),
and each object whose values, or whose being there, changed, with its old and new texts."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.catalog import ColumnInfo
from publisher.model.values import ValueType
from publisher.triggerless.match import matched_rows
from publisher.triggerless.rules import changed, kinds_of
from publisher.triggerless.state import HASH, TableLayout, key_names, value_name

LARGE_BYTES = 1 << 30
"""A bucket's column of more bytes than this is compared as `large_string`."""


def lost_columns(layout: TableLayout, old_layout: TableLayout | None) -> list[ColumnInfo]:
    """Value columns the state kept and the table no longer has (a migration dropped them): the
    consumer's values of them are removed, as if they had become NULL."""
    if old_layout is None:
        return []
    now = {name for name, _ in layout.columns}
    return [ColumnInfo(name, ValueType(kind), False) for name, kind in old_layout.columns if name not in now]


def compare_bucket(layout: TableLayout, old: pa.Table | None, old_layout: TableLayout | None,
                   new: pa.Table, also: pa.Table | None = None) -> tuple[pa.Table, pa.Table]:
    """The bucket's objects that differ, in key order: their key texts, `kind`, and each value
    column's old (`o<i>`) and new (`n<i>`) text; and the keys of the rows read that name no one
    object (`unkeyed_rows`), left out. The old state's columns are matched by name: a column the
    table gained has no old values, one it lost (`lost_columns`) no new ones. `also`: the keys of
    objects whose other attributes changed (a class's values), which differ where both hold them.

    The join matches keys to row positions alone (`matched_rows`); the values are then taken
    where they are compared, so the join does not carry every row's texts."""
    keys = key_names(layout)
    lost = lost_columns(layout, old_layout)
    new_values = [*(new.column(value_name(i)) for i in range(len(layout.columns))),
                  *(pa.nulls(len(new), pa.string()) for _ in lost)]
    if old is None or old_layout is None:
        old = pa.table([*(pa.array([], pa.string()) for _ in keys), pa.array([], pa.uint64())], names=[*keys, HASH])
        old_values = [pa.array([], pa.string()) for _ in new_values]
    else:
        positions = {name: i for i, (name, _) in enumerate(old_layout.columns)}
        names = [*(name for name, _ in layout.columns), *(c.name for c in lost)]
        old_values = [old.column(value_name(positions[name])) if name in positions else pa.nulls(len(old), pa.string())
                      for name in names]
    matched, unkeyed = matched_rows(old.select([*keys, HASH]), new.select([*keys, HASH]), keys)
    if also is not None:
        matched = matched.join(also.append_column("also", pa.array(np.ones(len(also), bool))), keys,
                               join_type="left outer")
    old_at, new_at = matched.column("old_at"), matched.column("new_at")
    in_old, in_new = pc.is_valid(old_at), pc.is_valid(new_at)
    differs = pc.not_equal(in_old, in_new)
    if also is not None:
        differs = pc.or_(differs, pc.and_(pc.and_(in_old, in_new), pc.fill_null(matched.column("also"), False)))
    olds = [_taken(column, old_at) for column in old_values]
    news = [_taken(column, new_at) for column in new_values]
    for old_texts, new_texts in zip(olds, news, strict=True):
        differs = pc.or_(differs, pc.and_(in_new, changed(old_texts, new_texts)))
    found = pa.table([*(matched.column(k) for k in keys), *olds, *news, kinds_of(in_old, in_new)],
                     names=[*keys, *(f"o{i}" for i in range(len(olds))), *(f"n{i}" for i in range(len(news))), "kind"])
    found = found.filter(differs)  # chunk by chunk: the rows read are not copied whole
    found = pa.table([_widened(column) for column in found.columns], names=found.column_names)
    return found.sort_by([(k, "ascending") for k in keys]), unkeyed


def _taken(values: pa.Array | pa.ChunkedArray, at: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """`values` at the positions `at`, null where a position is. Where `at` is every position in
    order, then only nulls (the rows read as they are, then the objects gone; in a cycle where the
    table's rows did not move, the state's rows too), that is `values` followed by nulls: nothing
    is copied."""
    if isinstance(at, pa.ChunkedArray):
        at = at.combine_chunks()
    count = len(values)
    if at.null_count == len(at) - count and _in_order(at.slice(0, count)):
        chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
        return pa.chunked_array([*chunks, pa.nulls(len(at) - count, values.type)], values.type)
    if isinstance(values, pa.ChunkedArray):
        values = _widened(values).combine_chunks()
    return values.take(at)


def _widened(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Texts of more than `LARGE_BYTES` in all as `large_string`, which no offset overflows
    when they are taken or sorted into one array."""
    if pa.types.is_string(values.type) and values.nbytes > LARGE_BYTES:
        return values.cast(pa.large_string())
    return values


def _in_order(positions: pa.Array) -> bool:
    return positions.null_count == 0 and bool(np.array_equal(positions.to_numpy(), np.arange(len(positions))))
