"""Change-table rows one change at a time, each row a list in the change table's column order:
the oracle of `outputs.changes.columns`, which builds them a column at a time per table."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from publisher.config import ChangeTablesConfig
from publisher.model.catalog import TableInfo
from publisher.model.values import TYPED, ValueType, shown
from publisher.outputs.changes.columns import ChangeTableError, check_change, header_columns, partition_name
from publisher.rules.changes import (
    BEFORE_IMAGE,
    CHANGE_OPER,
    DELETE,
    StampedChange,
    as_utc,
    column_mask,
    record_length,
    trans_ind,
    transaction_hex,
)

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def change_rows(stamped: StampedChange, table: TableInfo, options: ChangeTablesConfig) -> list[list[Any]]:
    """A before-image row first when the change has one, then the change's own row."""
    change = stamped.change
    check_change(change, table)
    rows: list[list[Any]] = []
    if change.before is not None:
        rows.append(_row(stamped, table, options, BEFORE_IMAGE, change.before, b"", len(rows)))
    mask = column_mask(table, change.changed, first_bit=len(header_columns(options)))
    rows.append(_row(stamped, table, options, change.operation, change.after, mask, len(rows)))
    return rows


def _row(
    stamped: StampedChange, table: TableInfo, options: ChangeTablesConfig, operation: str,
    values: Mapping[str, str | None], mask: bytes, index: int,
) -> list[Any]:
    change = stamped.change
    time = as_utc(change.event_time)
    before_image = operation == BEFORE_IMAGE
    header: list[Any] = [
        stamped.change_seq,
        CHANGE_OPER[operation],
        mask,
        str(change.record_id),
        operation,
        transaction_hex(change.transaction_id),
        time,
        partition_name(time, options.partition_minutes),
    ]
    if options.trail_header:
        header += [
            "E",
            change.operation,
            trans_ind(stamped.place.row_index + index, stamped.place.rows),
            "B" if before_image or change.operation == DELETE else "A",
            time,
            "F" if change.fetched and not before_image else "R",
            change.record_id,
            record_length(values),
        ]
    return header + [_typed(table, column.value_type, text, column.name, change.record_id)
                     for column in table.data_columns for text in [values.get(column.name)]]


def _typed(table: TableInfo, value_type: ValueType, text: str | None, name: str, record_id: int) -> Any:
    if text is None or value_type is ValueType.STRING:
        return text
    try:
        value: Any = TYPED[value_type](text)
        if value_type is ValueType.INT and not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError
        return value
    except (ValueError, OverflowError):
        raise ChangeTableError(
            f"table {shown(table.name)}: column {shown(name)} of the change at event {record_id} "
            f"has {shown(text)}, which is not a {value_type.value} value a change table can hold"
        ) from None
