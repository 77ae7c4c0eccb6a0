"""A triggerless cycle's operations as changes, for the change tables and messages (docs:
guides/formats.md): the comparison knows each changed object's values
before and after, as a field event logs them, so an `<add>` is an INSERT carrying every column,
a `<modify>` an UPDATE carrying the columns that changed with their old values as the
before-image, a `<delete>` a DELETE carrying the key.

A change's number is its operation's event-id (generation, bucket, place: unique and increasing
from cycle to cycle), its time the moment the generation was read, and the changes of a
bucket are a part of the formats' cycle numbered by the generation: a cycle repeated after a
crash writes the same changes to the same files.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence

import pyarrow as pa

from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.operation import OperationKind
from publisher.rules.changes import DELETE, INSERT, UPDATE, Change, StampedChange, TransactionPlace, time_prefix

OPERATIONS = {OperationKind.ADD.value: INSERT, OperationKind.MODIFY.value: UPDATE, OperationKind.DELETE.value: DELETE}


def compared_changes(table: TableInfo, columns: Sequence[ColumnInfo], kinds: pa.Array, key_texts: Sequence[pa.Array],
                     old: Sequence[pa.Array], new: Sequence[pa.Array], event_ids: pa.Array,
                     read_at: dt.datetime) -> Iterator[StampedChange]:
    """Each compared object's change, in the operations' order; the texts are the published ones
    (a reference's as the column holds it, not as the association it is published as)."""
    keys = [c.name for c in table.columns if c.is_key]
    names = [c.name for c in columns]
    order = {c.name: i for i, c in enumerate(table.data_columns)}
    """A column the table no longer has (a migration dropped it) is in no change row."""
    time_part = time_prefix(read_at)
    key_rows = list(zip(*(k.to_pylist() for k in key_texts), strict=True))
    old_rows = list(zip(*(o.to_pylist() for o in old), strict=True)) if old else [()] * len(kinds)
    new_rows = list(zip(*(n.to_pylist() for n in new), strict=True)) if new else [()] * len(kinds)
    for kind, key, before, after, event_id in zip(kinds.to_pylist(), key_rows, old_rows, new_rows,
                                                  event_ids.to_pylist(), strict=True):
        key_values = dict(zip(keys, key, strict=True))
        operation = OPERATIONS[kind]
        if operation == DELETE:
            change = Change(table.name, DELETE, event_id, read_at, None, key_values, None, tuple(keys), True)
        elif operation == INSERT:
            values = {**key_values, **{n: v for n, v in zip(names, after, strict=True) if n in order}}
            change = Change(table.name, INSERT, event_id, read_at, None, values, None,
                            tuple(sorted(values, key=order.__getitem__)), True)
        else:
            differ = sorted(((n, b, a) for n, b, a in zip(names, before, after, strict=True) if b != a and n in order),
                            key=lambda change: order[change[0]])
            change = Change(table.name, UPDATE, event_id, read_at, None, {**key_values, **{n: a for n, _, a in differ}},
                            {**key_values, **{n: b for n, b, _ in differ}}, tuple(n for n, _, _ in differ), True)
        yield StampedChange(change, f"{time_part}{event_id:019d}", TransactionPlace(0, 1, 0, change.records))
