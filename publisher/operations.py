"""Stage 5: turn surviving events into XDS operations, merged per object and kind (SPEC §4).

`build_operation_xml` is plain Python (tested without Spark); `build_operations` groups the
events in Spark and runs it in the executors.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from publisher.catalog import TableInfo
from publisher.events import EventType
from publisher.precedence import OBJECT, Outcome
from publisher.values import ValueType
from publisher.xds import (
    AttrChange,
    Operation,
    OperationKind,
    Value,
    association,
    build_operation,
)

OPERATION_SCHEMA = StructType(
    [
        StructField("op_time", TimestampType()),
        StructField("event_id", LongType()),
        StructField("kind", StringType()),
        StructField("xml", BinaryType()),
    ]
)


@dataclass(frozen=True)
class OperationContext:
    tables: dict[str, TableInfo]
    """By table name (the class name)."""
    schema_label: str
    insert_row_operation: str = "modify"


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
    or None for a modify that changes nothing."""
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
    return None if operation.changes_nothing else build_operation(operation)


def _as_dict(value: Any) -> dict[str, str | None] | None:
    if value is None:
        return None
    return dict(value)


def build_operations(resolved: DataFrame, current: DataFrame, ctx: OperationContext) -> DataFrame:
    """Group surviving events into operations and serialise each in the executors."""
    from publisher.workers import map_rows

    insert_as_add = F.lit(ctx.insert_row_operation == "add")
    t = F.col("effective_type")
    kind = (
        F.when(t == int(EventType.INSERT_FIELD), OperationKind.ADD.value)
        .when(t == int(EventType.DELETE_ROW), OperationKind.DELETE.value)
        .when((t == int(EventType.INSERT_ROW_QUERY_BACK)) & insert_as_add, OperationKind.ADD.value)
        .otherwise(OperationKind.MODIFY.value)
    )
    by_object = Window.partitionBy(*OBJECT).orderBy("position")
    units = (
        resolved.where(F.col("outcome").isin(Outcome.SURVIVES, Outcome.WINS))
        .withColumn("kind", kind)
        .withColumn("_previous", F.lag("kind").over(by_object))
        .withColumn(
            "_starts", F.when(F.col("_previous").isNull() | (F.col("_previous") != F.col("kind")), 1).otherwise(0)
        )
        .withColumn("_group", F.sum("_starts").over(by_object))
    )
    groups = (
        units.groupBy(*OBJECT, "_group", "kind")
        .agg(
            F.min("position").alias("position"),
            F.sort_array(
                F.collect_list(
                    F.struct("position", "effective_type", "attr_name", "value_type", "old_text", "new_text")
                )
            ).alias("units"),
        )
        .join(current.select(*OBJECT, "row"), on=list(OBJECT), how="left")
    )

    def serialise(group: dict[str, Any]) -> list[dict[str, Any]]:
        xml = build_operation_xml(group, ctx)
        if xml is None:
            return []
        position = group["position"]
        return [{"op_time": position["time"], "event_id": position["record_id"], "kind": group["kind"], "xml": xml}]

    return map_rows(groups, serialise, OPERATION_SCHEMA)
