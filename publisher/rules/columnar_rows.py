"""The operations of rows read whole and published as the row query-back of an insert, one
column at a time, for a direct snapshot's chunk (`service.snapshot_direct`).

`rules.columnar.query_back_operations` lays a row query-back out as one change row per
attribute, sorted and joined back per object, which is what its general case (several events
of an object, multi-valued attributes, references) needs. Rows of a plain table read whole, one
per object, need none of that: each value column is one column of attribute changes, and an
operation's body is the table's columns joined side by side. The shapes are `model.xds`'s
column shapes, the same ones; a property in the tests holds the two equal.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from publisher.config import InsertRowOperation
from publisher.model.catalog import TableInfo
from publisher.model.operation import OperationKind
from publisher.model.xds import column_operations, column_refused, column_value_changes, column_values, refusal
from publisher.rules.operations import OperationContext


def row_operations(
    table: TableInfo, keys: Sequence[str], texts: Sequence[Sequence[Any]], event_ids: pa.Array,
    ctx: OperationContext,
) -> pa.Array:
    """Each row's operation (binary XML), in the rows' order: `keys` canonical, `texts` the
    published text of each value column (the table's order; None for NULL), every one of
    which XML can carry. `insert_row_operation` says `<modify>` (every value removed, the row's
    own added) or `<add>`."""
    count = len(keys)
    kind = OperationKind.ADD.value if ctx.insert_row_operation == InsertRowOperation.ADD else OperationKind.MODIFY.value
    kinds = pa.array([kind] * count, pa.string())
    remove_all = pa.array([kind == OperationKind.MODIFY.value] * count, pa.bool_())
    no_removes = pa.nulls(count, pa.string())
    fragments = []
    for column, values in zip(table.value_columns, texts, strict=True):
        types = pa.array([column.value_type.value] * count, pa.string())
        names = pa.array([column.name] * count, pa.string())
        adds = column_values(types, pa.array(values, pa.string()))
        fragments.append(column_value_changes(kinds, names, remove_all, no_removes, adds))
    bodies = pc.binary_join_element_wise(*fragments, "") if fragments else pa.array([""] * count, pa.string())
    class_names = pa.array([table.name] * count, pa.string())
    associations = pc.binary_join_element_wise(pa.array(keys, pa.string()), f",table={table.name},schema="
                                               f"{ctx.schema_label}", "")
    xml = column_operations(kinds, class_names, event_ids, associations, bodies)
    refused = pc.index(column_refused(xml), True).as_py()
    if refused >= 0:
        named = [("class name", table.name), ("association", associations[refused].as_py()),
                 *((f"value of attribute {c.name!r}", values[refused]) for c, values in zip(
                     table.value_columns, texts, strict=True))]
        raise refusal(event_ids[refused].as_py(), named, xml[refused].as_py())
    return pc.cast(xml, pa.binary())
