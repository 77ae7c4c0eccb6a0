"""What building operations needs (docs/concepts/xds.md): the tables and settings of the cycle's operations,
and how a reference's value is published.

The operations themselves are built as column operations (`rules.columnar`); `tests/oracle/operations.py`
builds them one object at a time, and the property tests hold the two equal.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from publisher.config import InsertRowOperation
from publisher.model.canonical import canonical_key_of
from publisher.model.catalog import TableInfo
from publisher.model.events import EventType
from publisher.model.operation import OperationKind, Value, association
from publisher.model.values import ValueType


def operation_kind(
    event_type: int, insert_row_operation: InsertRowOperation = InsertRowOperation.MODIFY,
) -> OperationKind:
    """The operation an event contributes to; consecutive events of one kind merge. An insert
    logged field by field is an add; a row query-back insert is an add only where
    `insert_row_operation = "add"`, otherwise a modify of the object the consumer may have."""
    if event_type == EventType.INSERT_FIELD:
        return OperationKind.ADD
    if event_type == EventType.DELETE_ROW:
        return OperationKind.DELETE
    if event_type == EventType.INSERT_ROW_QUERY_BACK and insert_row_operation == InsertRowOperation.ADD:
        return OperationKind.ADD
    return OperationKind.MODIFY


@dataclass(frozen=True)
class OperationContext:
    tables: dict[str, TableInfo]
    """By table name (the class name)."""
    schema_label: str
    insert_row_operation: InsertRowOperation = InsertRowOperation.MODIFY
    changes: bool = False
    """Also describe each operation as a `Change`, for the change tables and messages."""


@dataclass(frozen=True)
class References:
    """How a reference's value is published: as the referenced object's association, with
    association-ref when that object exists (`existing`, read for the slice being built)."""

    tables: Mapping[str, TableInfo]
    schema_label: str
    existing: frozenset[tuple[str, str]] = frozenset()
    """(class name, canonical key) of the referenced objects found."""

    def target(self, class_name: str, text: str) -> tuple[str, str] | None:
        """(class name, canonical key) a reference's value names, or None if it names no key."""
        table = self.tables.get(class_name)
        if table is None:
            return None
        try:
            return table.name, canonical_key_of([text], table.key_columns)
        except ValueError:
            return None

    def found(self, existing: Iterable[tuple[str, str]]) -> References:
        """The same, knowing which referenced objects exist."""
        return replace(self, existing=frozenset(existing))

    def value(self, class_name: str, text: str) -> Value:
        target = self.target(class_name, text)
        if target is None:
            return Value(ValueType.DN, text)
        named = association(target[1], target[0], self.schema_label)
        return Value(ValueType.DN, named, named if target in self.existing else None)
