"""Stage 5: turn surviving events into XDS operations, merged per object and kind (SPEC §4).

Plain Python per object, called by both the Spark path and the small-cycle path.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from publisher.model.catalog import TableInfo
from publisher.model.events import EventType
from publisher.model.operation import AttrChange, Operation, OperationKind, Value, association
from publisher.model.values import ValueType
from publisher.outputs.xds import build_operation
from publisher.rules.changes import Change, change_of
from publisher.rules.precedence import PUBLISHED, CurrentRow, Decision


@dataclass(frozen=True)
class OperationContext:
    tables: dict[str, TableInfo]
    """By table name (the class name)."""
    schema_label: str
    insert_row_operation: str = "modify"
    changes: bool = False
    """Also describe each operation as a `Change`, for the change tables and messages."""


def operation_kind(event_type: int, insert_row_operation: str = "modify") -> OperationKind:
    """The operation an event contributes to; consecutive events of one kind merge."""
    if event_type == EventType.INSERT_FIELD:
        return OperationKind.ADD
    if event_type == EventType.DELETE_ROW:
        return OperationKind.DELETE
    if event_type == EventType.INSERT_ROW_QUERY_BACK and insert_row_operation == "add":
        return OperationKind.ADD
    return OperationKind.MODIFY


def attr_changes(unit: Mapping[str, Any], table: TableInfo, row: Mapping[str, str | None] | None,
                 kind: OperationKind) -> list[AttrChange]:
    """What one surviving event changes; query-back events take values from the current row."""
    event_type = int(unit["effective_type"])
    name = unit["attr_name"]
    if event_type == EventType.DELETE_ROW:
        return []
    if event_type in (EventType.INSERT_ROW_QUERY_BACK, EventType.UPDATE_ROW_QUERY_BACK):
        current = row or {}
        return [
            AttrChange(c.name, remove_all=kind is OperationKind.MODIFY, add=_value(c.value_type, current.get(c.name)))
            for c in table.value_columns
        ]
    value_type = ValueType(unit["value_type"])
    if event_type == EventType.INSERT_FIELD:
        return [AttrChange(name, add=_value(value_type, unit["new_text"]))]
    if event_type == EventType.UPDATE_FIELD:
        return [AttrChange(name, remove=_value(value_type, unit["old_text"]), add=_value(value_type, unit["new_text"]))]
    if event_type == EventType.UPDATE_FIELD_REMOVE_ALL:
        return [AttrChange(name, remove_all=True, add=_value(value_type, unit["new_text"]))]
    current_value = _value(value_type, (row or {}).get(name))
    if event_type == EventType.INSERT_FIELD_QUERY_BACK:
        return [AttrChange(name, add=current_value)]
    return [AttrChange(name, remove_all=True, add=current_value)]


def _value(value_type: ValueType, text: str | None) -> Value | None:
    return None if text is None else Value(value_type, text)


def build_operation_xml(group: Mapping[str, Any], ctx: OperationContext) -> bytes | None:
    """One merged group of an object's consecutive same-kind events → one serialised operation,
    or None for a modify that changes nothing and announces no new object."""
    table = ctx.tables[group["class_name"]]
    kind = OperationKind(group["kind"])
    row = _as_dict(group.get("row"))
    units: Sequence[Mapping[str, Any]] = group["units"]
    attrs = [change for unit in units for change in attr_changes(unit, table, row, kind)]
    operation = Operation(
        kind=kind,
        class_name=table.name,
        association=association(group["canonical_key"], table.name, ctx.schema_label),
        event_id=int(group["position"]["record_id"]),
        attrs=tuple(attrs),
    )
    if operation.changes_nothing and not _announces(units):
        return None
    return build_operation(operation)


def _announces(units: Sequence[Mapping[str, Any]]) -> bool:
    """An insert's row query-back publishes even with nothing to set: on a table of key
    columns only (a membership, a grant) the operation itself is the news that the object exists."""
    return any(int(u["effective_type"]) == EventType.INSERT_ROW_QUERY_BACK for u in units)


def _as_dict(value: Any) -> dict[str, str | None] | None:
    if value is None:
        return None
    return dict(value)


@dataclass(frozen=True)
class PublishedOperation:
    """One serialised operation and where it stands in publication order."""

    op_time: dt.datetime | None
    event_id: int
    kind: str
    xml: bytes
    change: Change | None = None


def object_operations(
    events: Sequence[Mapping[str, Any]],
    decisions: Sequence[Decision],
    current: CurrentRow | None,
    ctx: OperationContext,
) -> list[PublishedOperation]:
    """One object's operations: its published events in processing order, consecutive events
    of one kind merged into one operation."""
    groups: list[dict[str, Any]] = []
    for event, decision in zip(events, decisions, strict=True):
        if decision.outcome not in PUBLISHED:
            continue
        kind = operation_kind(decision.effective_type, ctx.insert_row_operation).value
        unit = {**event, "effective_type": decision.effective_type}
        if groups and groups[-1]["kind"] == kind:
            groups[-1]["units"].append(unit)
            continue
        groups.append({
            "class_name": event["class_name"],
            "canonical_key": event["canonical_key"],
            "kind": kind,
            "row": None if current is None else current.values,
            "position": {"time": event["position_time"], "record_id": event["record_id"]},
            "units": [unit],
        })
    published = []
    for group in groups:
        xml = build_operation_xml(group, ctx)
        if xml is None:
            continue
        change = None
        if ctx.changes:
            table = ctx.tables[group["class_name"]]
            change = change_of(group, table, _as_dict(group["row"]), OperationKind(group["kind"]))
        first = group["position"]
        published.append(PublishedOperation(first["time"], int(first["record_id"]), group["kind"], xml, change))
    return published
