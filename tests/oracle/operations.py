"""Surviving events into XDS operations one object at a time, merged per object and kind
(docs/concepts/xds.md). The oracle of `rules.columnar`'s runs."""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oracle.precedence import PUBLISHED, Decision
from publisher.config import InsertRowOperation
from publisher.model.catalog import TableInfo
from publisher.model.events import ROW_QUERY_BACK, EventType
from publisher.model.operation import AttrChange, Operation, OperationKind, Value, association
from publisher.model.values import ValueType
from publisher.model.xds import build_operation
from publisher.rules.changes import Change, Place, change_of
from publisher.rules.operations import OperationContext, References
from publisher.rules.precedence import CurrentRow


def operation_kind(
    event_type: int, insert_row_operation: InsertRowOperation = InsertRowOperation.MODIFY,
) -> OperationKind:
    """The operation an event contributes to, as the seed's table of event types gives it: an add
    for a field insert (and a row insert where insert_row_operation says add), a delete for a row
    delete, a modify for every other type."""
    row_insert = OperationKind.ADD if insert_row_operation == InsertRowOperation.ADD else OperationKind.MODIFY
    by_type = {EventType.INSERT_FIELD: OperationKind.ADD, EventType.DELETE_ROW: OperationKind.DELETE,
               EventType.INSERT_ROW_QUERY_BACK: row_insert}
    return by_type.get(EventType(event_type), OperationKind.MODIFY)


@dataclass(frozen=True)
class _Values:
    """How one object's values are published: its table's references resolved by `references`."""

    table: TableInfo
    references: References | None

    def one(self, name: str, value_type: ValueType, text: str | None) -> Value | None:
        if text is None:
            return None
        target = self.table.reference(name)
        if target is None or self.references is None:
            return Value(value_type, text)
        return self.references.value(target, text)

    def change(self, name: str, value_type: ValueType, texts: Sequence[str], remove_all: bool) -> AttrChange:
        """Every value of a multi-valued attribute (after removing all, when `remove_all`)."""
        values = [v for v in (self.one(name, value_type, t) for t in texts) if v is not None]
        return AttrChange(name, remove_all=remove_all, add=values[0] if values else None, more=tuple(values[1:]))


def attr_changes(unit: Mapping[str, Any], table: TableInfo, row: Mapping[str, str | None] | None,
                 kind: OperationKind, multi: Mapping[str, Sequence[str]] | None = None,
                 references: References | None = None) -> list[AttrChange]:
    """What one surviving event changes; query-back events take values from the current row
    (a multi-valued attribute: every value it has), and so does an insert for the multi-valued
    attributes it carries."""
    changes = _event_changes(unit, table, row, kind, multi or {}, _Values(table, references))
    carried = [m.attribute for m in table.multi_valued if m.attribute.name in unit.get("carries", ())]
    return changes + [_Values(table, references).change(a.name, a.value_type, (multi or {}).get(a.name, ()),
                                                         kind is OperationKind.MODIFY) for a in carried]


def _event_changes(unit: Mapping[str, Any], table: TableInfo, row: Mapping[str, str | None] | None,
                   kind: OperationKind, multi: Mapping[str, Sequence[str]], values: _Values) -> list[AttrChange]:
    event_type = int(unit["effective_type"])
    name = unit["attr_name"]
    if event_type == EventType.DELETE_ROW:
        return []
    current = row or {}
    if event_type in ROW_QUERY_BACK:
        remove_all = kind is OperationKind.MODIFY
        return [
            AttrChange(c.name, remove_all=remove_all, add=values.one(c.name, c.value_type, current.get(c.name)))
            for c in table.value_columns
        ] + [values.change(m.attribute.name, m.attribute.value_type, multi.get(m.attribute.name, ()), remove_all)
             for m in table.multi_valued]
    value_type = ValueType(unit["value_type"])
    if event_type == EventType.INSERT_FIELD:
        return [AttrChange(name, add=values.one(name, value_type, unit["new_text"]))]
    if event_type == EventType.UPDATE_FIELD:
        return [AttrChange(name, remove=values.one(name, value_type, unit["old_text"]),
                           add=values.one(name, value_type, unit["new_text"]))]
    if event_type == EventType.UPDATE_FIELD_REMOVE_ALL:
        return [AttrChange(name, remove_all=True, add=values.one(name, value_type, unit["new_text"]))]
    remove_all = event_type != EventType.INSERT_FIELD_QUERY_BACK
    if name in table.multi_valued_names:
        return [values.change(name, value_type, multi.get(name, ()), remove_all)]
    return [AttrChange(name, remove_all=remove_all, add=values.one(name, value_type, current.get(name)))]


def build_operation_xml(group: Mapping[str, Any], ctx: OperationContext) -> bytes | None:
    """One merged group of an object's consecutive same-kind events → one serialised operation,
    or None for a modify that changes nothing and announces no new object."""
    table = ctx.tables[group["class_name"]]
    kind = OperationKind(group["kind"])
    row = _as_dict(group.get("row"))
    units: Sequence[Mapping[str, Any]] = group["units"]
    multi, references = group.get("multi"), group.get("references")
    attrs = [change for unit in units for change in attr_changes(unit, table, row, kind, multi, references)]
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
    references: References | None = None,
) -> list[PublishedOperation]:
    """One object's operations: its published events in processing order, consecutive events
    of one kind merged into one operation."""
    groups: list[dict[str, Any]] = []
    for event, decision in zip(events, decisions, strict=True):
        if decision.outcome not in PUBLISHED:
            continue
        kind = operation_kind(decision.effective_type, ctx.insert_row_operation).value
        unit = {**event, "effective_type": decision.effective_type, "carries": decision.carries}
        if groups and groups[-1]["kind"] == kind:
            groups[-1]["units"].append(unit)
            continue
        groups.append({
            "class_name": event["class_name"],
            "canonical_key": event["canonical_key"],
            "kind": kind,
            "row": None if current is None else current.values,
            "multi": None if current is None else current.multi,
            "references": references,
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
            units = [(int(u["effective_type"]), u["attr_name"], u["old_text"], u["new_text"]) for u in group["units"]]
            first = group["units"][0]
            place = Place(first["record_id"], first.get("event_time"), first.get("transaction_id"))
            change = change_of(group["canonical_key"], units, place, table, _as_dict(group["row"]),
                               OperationKind(group["kind"]))
        first = group["position"]
        published.append(PublishedOperation(first["time"], int(first["record_id"]), group["kind"], xml, change))
    return published
