"""Capture by row triggers alone, for databases that check keys row by row: three triggers per table.

These databases check a key's uniqueness row by row, so no statement can hand one row's key to
another, and the row triggers' order is the changes' order: an update that changes a row's key
logs the old key's removal, then the new key's insert events, as the row moves."""
from __future__ import annotations

import abc
import dataclasses

from publisher.capture.base import Capture, all_of, any_of, indent
from publisher.capture.tables import Column, Event, Style, Table

ROW_TRIGGER_SUFFIXES = {"INSERT": "ins", "UPDATE": "upd", "DELETE": "del"}
"""The suffix of each operation's trigger: `<table>_publisher_<suffix>`."""


class RowTriggers(Capture):
    """A dialect whose triggers are AFTER INSERT, UPDATE and DELETE row triggers, each logging
    its events one guarded INSERT at a time, from the templates drop_trigger, create_trigger and
    log_event."""

    @abc.abstractmethod
    def trigger_name(self, table: str, suffix: str) -> str:
        """The name of the table's trigger of one operation."""

    @abc.abstractmethod
    def same(self, column: Column, old: str, new: str) -> str:
        """Whether the column's published text is the same in the rows `old` and `new`."""

    @abc.abstractmethod
    def key_sql(self, table: Table, row: str) -> str:
        """The table_key of the row OLD or NEW."""

    def key_changed(self, table: Table) -> str:
        return any_of(self.changed(c, "OLD", "NEW") for c in table.key)

    def key_kept(self, table: Table) -> str:
        return all_of(self.same(c, "OLD", "NEW") for c in table.key)

    def moved_events(self, table: Table, style: Style) -> list[Event]:
        """The events of an update that changed the key (a child's: its links or value): the old
        row's, then the new row's. A child's query-backs name the parent object, so the new
        row's is logged only for another parent than the old row's."""
        gone, come = self.delete_events(table, style), self.insert_events(table, style)
        if table.multi_valued and not self.logs_multi_value(table.multi_valued.value, style):
            other = any_of(self.changed(c, "OLD", "NEW") for _, c in table.logged_key)
            come = [dataclasses.replace(e, condition=all_of([other, e.condition])) for e in come]
        return gone + come

    def operation_events(self, table: Table, style: Style) -> dict[str, list[Event]]:
        """The events each operation's trigger may log, in order."""
        changed = self.key_changed(table)
        kept = self.key_kept(table)
        moved = [
            dataclasses.replace(e, condition=all_of([changed, e.condition]))
            for e in self.moved_events(table, style)
        ]
        updates = [
            dataclasses.replace(e, condition=all_of([kept, e.condition]))
            for e in self.update_events(table, style)
        ]
        return {
            "INSERT": self.insert_events(table, style),
            "UPDATE": moved + updates,
            "DELETE": self.delete_events(table, style),
        }

    def trigger_sql(self, table: Table, style: Style) -> list[str]:
        statements = []
        for operation, events in self.operation_events(table, style).items():
            trigger = self.qualify(self.trigger_name(table.name, ROW_TRIGGER_SUFFIXES[operation]))
            body = indent("\n".join(self.log_event(table, e) for e in events), 4)
            create = self.render(
                "create_trigger", trigger=trigger, operation=operation, table=self.qualify(table.name), body=body
            )
            statements += self.replacing(trigger, create)
        return statements

    def capture_trigger_names(self, table: str) -> set[str]:
        return {self.trigger_name(table, suffix) for suffix in ROW_TRIGGER_SUFFIXES.values()}

    def drop_capture_sql(self, carrier: str, installed_on: str, shared: bool) -> list[str]:
        """Trigger names are the schema's, not the table's: dropped by their names alone."""
        names = sorted(self.capture_trigger_names(installed_on))
        return [self.render("drop_trigger", trigger=self.qualify(name)) for name in names]

    def replacing(self, trigger: str, create: str) -> list[str]:
        """The statements that put `create` in place of the trigger's earlier version."""
        return [self.render("drop_trigger", trigger=trigger), create]

    def log_event(self, table: Table, event: Event) -> str:
        key_sql = self.key_sql(table, "OLD" if event.key == "old" else "NEW")
        return self.render(
            "log_event",
            condition=event.condition,
            **self.event_log_fields(),
            **self.event_values(table, event, key_sql),
        )
