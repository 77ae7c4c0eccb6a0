"""What a triggerless cycle publishes for an object, from its published values in the state the
previous cycle kept and in the table now (`triggerless.cycle`): a new key an `<add>` of its
values, a key gone a `<delete>`, and a key whose values differ a `<modify>` of exactly the
attributes that changed, each the old value removed and the new one added, as a field event
publishes an update. The shapes are `model.xds`'s column shapes, as for every other operation.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.catalog import ColumnInfo
from publisher.model.operation import OperationKind
from publisher.model.values import ValueType
from publisher.model.xds import column_operations, column_refused, column_value_changes, column_values, refusal


def changed(old: pa.Array, new: pa.Array) -> pa.Array:
    """Per row, whether a value differs between two texts (None, NULL, equals only None)."""
    differs = pc.fill_null(pc.not_equal(old, new), False)
    return pc.or_(differs, pc.not_equal(pc.is_null(old), pc.is_null(new)))


def kinds_of(old_present: pa.Array, new_present: pa.Array) -> pa.Array:
    """The operation of each compared object: `add` where only the table holds it, `delete`
    where only the state did, `modify` where both do."""
    return pc.if_else(
        pc.invert(old_present), OperationKind.ADD.value,
        pc.if_else(pc.invert(new_present), OperationKind.DELETE.value, OperationKind.MODIFY.value))


def compared_operations(
    class_name: str, columns: Sequence[ColumnInfo], associations: pa.Array, kinds: pa.Array,
    old: Sequence[pa.Array], new: Sequence[pa.Array], event_ids: pa.Array,
    refs: Sequence[tuple[pa.Array | None, pa.Array | None]] = (), more: Sequence[pa.Array] = (),
) -> pa.Array:
    """Each object's operation (binary XML): `kinds` from `kinds_of`, `old` and `new` the
    published texts of each value column (null: NULL, or no such object), one row per object
    that changed; `refs` a reference column's old and new association-refs (null: none), which
    publishes its values as `dn`;
    `more` the changes of other attributes, as `column_value_changes` writes them."""
    count = len(kinds)
    is_add = pc.equal(kinds, OperationKind.ADD.value)
    no_remove_all = pa.array([False] * count, pa.bool_())
    fragments = []
    for index, (column, before, after) in enumerate(zip(columns, old, new, strict=True)):
        old_refs, new_refs = refs[index] if index < len(refs) else (None, None)
        value_type = column.value_type if old_refs is None and new_refs is None else ValueType.DN  # a reference
        types = pa.array([value_type.value] * count, pa.string())
        names = pa.array([column.name] * count, pa.string())
        differs = changed(before, after)
        removes = pc.if_else(pc.and_(differs, pc.invert(is_add)), before, pa.nulls(count, pa.string()))
        adds = pc.if_else(pc.or_(is_add, differs), after, pa.nulls(count, pa.string()))
        fragments.append(column_value_changes(kinds, names, no_remove_all, column_values(types, removes, old_refs),
                                              column_values(types, adds, new_refs)))
    fragments += more
    bodies = pc.binary_join_element_wise(*fragments, "") if fragments else pa.array([""] * count, pa.string())
    class_names = pa.array([class_name] * count, pa.string())
    xml = column_operations(kinds, class_names, event_ids, associations, bodies)
    refused = pc.index(column_refused(xml), True).as_py()
    if refused >= 0:
        named: list[tuple[str, Any]] = [("class name", class_name), ("association", associations[refused].as_py())]
        named += [(f"value of attribute {c.name!r}", n[refused].as_py()) for c, n in zip(columns, new, strict=True)]
        raise refusal(event_ids[refused].as_py(), named, xml[refused].as_py())
    return pc.cast(xml, pa.binary())
