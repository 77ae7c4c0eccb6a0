"""Which events a subscription tracks (seed 002's RDB$SUBSCRIPTIONS): its tables, their columns,
and the kinds of change, as the catalog names them.

Pure: the classifier asks `takes` once per distinct (type, table, column) of a batch. An event
the subscription does not track is neither published nor rejected. A malformed event of a
tracked table (a type outside 1..8, a column the table does not have) is tracked, so that it
is rejected and recorded, as the status mode would.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from publisher.model.catalog import Catalog, TableInfo
from publisher.model.events import DELETING, INSERTING, PER_FIELD, UPDATING, EventType
from publisher.model.operation import OperationKind

INSERT_FIELD_EVENTS = frozenset({EventType.INSERT_FIELD, EventType.INSERT_FIELD_QUERY_BACK})
"""Field events an insert logs: each says the object was inserted, whatever its column."""

OPERATION_TYPES: Mapping[str, frozenset[EventType]] = {
    "insert": INSERTING,
    "update": UPDATING,
    "delete": DELETING,
    "change": frozenset(EventType),
}


@dataclass(frozen=True)
class SubscriptionFilter:
    """A subscription resolved against the catalog once per cycle; picklable."""

    catalog: Catalog
    tables: frozenset[str]
    """The tracked tables' actual names."""
    columns: Mapping[str, frozenset[str]]
    """Per table with a column list, the tracked columns' actual names, its key columns included."""
    event_types: frozenset[EventType]

    def takes(self, event_type: EventType | None, table_name: object, column_name: object) -> bool:
        """Whether the subscription tracks an event; `event_type` None: not a type 1..8."""
        if event_type is not None and event_type not in self.event_types:
            return False
        table = self.catalog.lookup(table_name) if isinstance(table_name, str) else None
        if table is None or table.name not in self.tables:
            return False
        tracked = self.columns.get(table.name)
        if tracked is None or event_type not in PER_FIELD or not isinstance(column_name, str):
            return True
        column = table.column(column_name)
        # an insert's event says the object was inserted, whichever column it logs (`hides`)
        return column is None or column.name in tracked or event_type in INSERT_FIELD_EVENTS

    def hides(self, table: str, column: str) -> bool:
        """Whether the subscription leaves a column of a tracked table out: an insert's field
        event for it is published as the insert of the object alone, without its value, so
        that an object inserted with values in untracked columns only is not lost."""
        tracked = self.columns.get(table)
        return tracked is not None and column not in tracked


class UntrackableError(ValueError):
    """A subscription names a table or column the catalog does not publish."""


def subscription_filter(
    tables: Sequence[str], columns: Mapping[str, Sequence[str]], operations: Sequence[str], catalog: Catalog,
) -> SubscriptionFilter:
    """A subscription's names resolved as the event log's are (exactly, else ignoring case); a
    table or column the database does not publish is an error that names it."""
    found: dict[str, TableInfo] = {}
    for wanted in tables:
        table = catalog.lookup(wanted)
        if table is None:
            raise UntrackableError(f"tables: {catalog.refusal(wanted)}")
        found[table.name] = table
    tracked_columns: dict[str, frozenset[str]] = {}
    for wanted_table, wanted_columns in columns.items():
        table = catalog.lookup(wanted_table)
        assert table is not None
        tracked = {c.name for c in table.columns if c.is_key}
        for wanted in wanted_columns:
            column = table.column(wanted)
            if column is None:
                raise UntrackableError(
                    f"columns.{wanted_table}: table {table.name} has no column {wanted!r} "
                    f"(it has {', '.join(c.name for c in table.columns)}"
                    + "".join(f", {m.attribute.name} (multi-valued)" for m in table.multi_valued) + ")"
                )
            tracked.add(column.name)
        tracked_columns[table.name] = frozenset(tracked)
    types = frozenset().union(*(OPERATION_TYPES[op] for op in operations))
    return SubscriptionFilter(catalog, frozenset(found), tracked_columns, types)


def tracked_tables(catalog: Catalog, tracked: SubscriptionFilter) -> dict[str, TableInfo]:
    """The tracked tables with only their tracked columns: what a subscriber's query-back reads
    and its operations and changes carry."""
    kept = {}
    for name in tracked.tables:
        table = catalog.tables[name]
        columns = tracked.columns.get(name)
        kept[name] = table if columns is None else dataclasses.replace(
            table,
            columns=tuple(c for c in table.columns if c.name in columns),
            multi_valued=tuple(m for m in table.multi_valued if m.attribute.name in columns),
            references=tuple((a, target) for a, target in table.references if a in columns),
        )
    return kept


def tracked_kinds(event_types: frozenset[EventType]) -> frozenset[OperationKind]:
    """The operations a triggerless comparison publishes for a subscription: an `<add>` where it
    tracks inserts, a `<modify>` updates, a `<delete>` deletes."""
    return frozenset(kind for kind, types in ((OperationKind.ADD, INSERTING), (OperationKind.MODIFY, UPDATING),
                                              (OperationKind.DELETE, DELETING)) if event_types & types)
