"""The operations of rows read whole and published as the row query-back of an insert, one
column at a time, for a direct snapshot's chunk (`snapshots.direct`).

`rules.columnar.query_back_operations` lays a row query-back out as one change row per
attribute, sorted and joined back per object, which is what its general case (several events
of an object, multi-valued attributes, references) needs. Rows of a plain table read whole, one
per object, need none of that: each value column is one column of attribute changes
(`column_whole_values`), and an operation is the table's columns joined side by side, in one
join. The shapes are `model.xds`'s, the same ones; a property in the tests holds the two equal.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.catalog import TableInfo
from publisher.model.events import EventType
from publisher.model.values import xml_problem
from publisher.model.xds import column_operations, column_refused, column_whole_values, refusal
from publisher.rules.operations import OperationContext, operation_kind


def row_operations(
    table: TableInfo, keys: Sequence[str] | pa.Array, texts: Sequence[Sequence[Any] | pa.Array], event_ids: pa.Array,
    ctx: OperationContext,
) -> pa.Array:
    """Each row's operation (binary XML), in the rows' order: `keys` canonical, `texts` the
    published text of each value column (the table's order; None for NULL).
    `insert_row_operation` says `<modify>` (every value removed, the row's own added) or
    `<add>`. A text XML cannot carry is refused (ValueError) naming the row's operation and
    the attribute: the texts are searched, not the operations, ten times their size."""
    kind = operation_kind(EventType.INSERT_ROW_QUERY_BACK, ctx.insert_row_operation)
    values = [_column(column) for column in texts]
    associations = pc.binary_join_element_wise(_column(keys), f",table={table.name},schema={ctx.schema_label}", "")
    _refuse_unwritable(table, associations, values, event_ids)
    fragments = [piece for column, column_texts in zip(table.value_columns, values, strict=True)
                 for piece in column_whole_values(kind, column.name, column.value_type, column_texts)]
    xml = column_operations(kind.value, table.name, event_ids, associations, *fragments)
    return pc.cast(xml, pa.binary())


def _column(values: Sequence[Any] | pa.Array) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values if isinstance(values, pa.Array) else pa.array(values, pa.string())


def _refuse_unwritable(table: TableInfo, associations: pa.Array, values: list[pa.Array], event_ids: pa.Array) -> None:
    """The first row with a text XML cannot carry, refused as `build_operation` refuses it."""
    if not len(associations):
        return
    for what, name in [("class name", table.name), *((f"attribute name {c.name!r}", c.name)
                                                     for c in table.value_columns)]:
        if xml_problem(name) is not None:
            raise refusal(event_ids[0].as_py(), [(what, name)], "")
    refused = column_refused(associations)
    for column in values:
        refused = pc.or_(refused, pc.fill_null(column_refused(column), False))
    row = pc.index(refused, True).as_py()
    if row >= 0:
        texts = [("association", associations[row].as_py()),
                 *((f"value of attribute {c.name!r}", v[row].as_py()) for c, v in zip(table.value_columns, values,
                                                                                      strict=True))]
        raise refusal(event_ids[row].as_py(), texts, "")
