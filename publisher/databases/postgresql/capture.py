"""PostgreSQL capture: a row trigger for inserts and deletes, a statement trigger for updates.

An UPDATE is logged per statement, from its transition tables, pairing the old and new rows by
table_key: the keys only among the old rows are deleted first, the keys in both are updated, the
keys only among the new rows are inserted last. So a statement that swaps or renumbers keys updates
each kept key in place and never logs an object's insert ahead of its delete, which row triggers
would; a logical class's child rows are paired by their links and value, so a swap logs nothing.
Inserts and deletes are logged per row. The triggers spell binary values too: no field query-back
event (7, 8) for a binary column. A table's shape row (`capture.shape_history`) is taken in the
install's transaction after its trigger statements, or by the event trigger in the migration's, past
the event log's sequence's last value.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence

from sqlalchemy import Connection, text
from sqlalchemy import column as sql_column

from publisher.capture.base import TRUE, all_of, carrying, indent, literal
from publisher.capture.tables import CaptureError, Column, Event, Style, Table, captured
from publisher.databases.postgresql import text_settings
from publisher.databases.postgresql.follow import FollowingCapture
from publisher.databases.postgresql.names import (
    KEY_VALUE_FUNCTION,
    POSTGRESQL_NEW_ROWS,
    POSTGRESQL_OLD_ROWS,
    postgresql_function_names,
    postgresql_identifier,
    postgresql_trigger_name,
    postgresql_trigger_names,
    postgresql_truncate_trigger_name,
    postgresql_update_trigger_name,
)
from publisher.databases.postgresql.native import NativeCapture
from publisher.dialects.reflection import reflection
from publisher.model.statements import Lexis
from publisher.model.values import ValueType
from publisher.subscriptions.tables import transaction_of


class PostgreSQLCapture(NativeCapture, FollowingCapture):
    """Per table: a row trigger and its plpgsql function for inserts and deletes (field events
    in one INSERT per row), and a statement trigger and its function for updates."""

    name = "postgresql"
    lexis = Lexis(dollar_quotes=True)
    """PostgreSQL: `$tag$ … $tag$` bodies, `E'…'` texts with backslash escapes, nested `/* */`."""

    def carriers(self, conn: Connection, any_trigger: bool) -> tuple[str, ...]:
        """A table's row trigger (its switch: dropped, capture is off), or with `any_trigger`
        any of its three."""
        rows = self.triggers(conn)
        if any_trigger:
            return carrying(rows, self.capture_trigger_names)
        return carrying(rows, lambda t: {postgresql_identifier(postgresql_trigger_name(t))})

    def triggers(self, conn: Connection) -> list[tuple[str, str]]:
        rows = conn.execute(
            text(
                "SELECT t.tgname, c.relname FROM pg_catalog.pg_trigger t "
                "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE NOT t.tgisinternal AND n.nspname = COALESCE(:schema, current_schema())"
            ),
            {"schema": self.schema},
        )
        return [(str(trigger), str(table)) for trigger, table in rows]

    def capture_trigger_names(self, table: str) -> set[str]:
        return set(postgresql_trigger_names(table))

    def drop_capture_sql(self, carrier: str, installed_on: str, shared: bool) -> list[str]:
        """The three triggers, then the PL/pgSQL capture's functions (the native capture has none
        of its own), unless a table of the old name carries a capture of its own that runs them."""
        on = self.qualify(carrier)
        triggers = [self.render("drop_trigger", trigger=self.quote(name), table=on)
                    for name in postgresql_trigger_names(installed_on)]
        if shared:
            return triggers
        functions = [f"DROP FUNCTION IF EXISTS {self.qualify(f)}()" for f in postgresql_function_names(installed_on)]
        return triggers + functions

    def kept_switches(self, table: str, carried: str | None = None) -> list[str]:
        """Statements that leave the capture of `table` and its class's child tables switched as
        it is now, after their triggers are made anew: a row trigger disabled again, or dropped
        again where the table keeps its other triggers (a table that lost them all was rebuilt,
        and gets its capture back). `carried`: the name the triggers `table` has now are named
        for (a renamed table's old name); then `table` alone, whose child tables carry triggers
        named for themselves."""
        tables = captured(self.config, self.engine, self.schema, table)
        if carried is not None:
            tables = [t for t in tables if t.name == table]
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, t.tgname, t.tgenabled FROM pg_catalog.pg_trigger t "
                    "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
                    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE NOT t.tgisinternal AND n.nspname = COALESCE(:schema, current_schema())"
                ),
                {"schema": self.schema},
            ).all()
        statements = []
        for found in tables:
            enabled = {trigger: state for name, trigger, state in rows if name == found.name}
            row, *others = postgresql_trigger_names(carried or found.name)
            switch = self.quote(postgresql_trigger_names(found.name)[0])
            if enabled.get(row) == "D":
                statements.append(f"ALTER TABLE {self.qualify(found.name)} DISABLE TRIGGER {switch}")
            elif row not in enabled and enabled.keys() & set(others):
                statements.append(f"DROP TRIGGER {switch} ON {self.qualify(found.name)}")
        return statements

    def subscription_indexes(self) -> list[str]:
        """The index that finds a check-out's events by their transaction."""
        log = self.config.event_log.table
        expression = transaction_of(sql_column(self.config.event_log.columns.transaction_id))
        found_by = expression.compile(self.engine, compile_kwargs={"literal_binds": True})
        name = f"{log}_transaction_idx"
        inspector = reflection(self.engine, self.schema)
        if inspector.has_table(log, schema=self.schema) and any(
                found["name"] == name for found in inspector.get_indexes(log, schema=self.schema)):
            return []  # not stated again: it would lock the event log (`event_log_ddl`)
        return [f"CREATE INDEX IF NOT EXISTS {self.quote(name)} ON {self.qualify(log)} (({found_by}))"]

    def quote(self, name: str) -> str:
        """Every identifier quoted: PL/pgSQL reads some names SQL leaves bare (`NEW.by`,
        `NEW.loop`, `NEW.strict`) as its own keywords."""
        return '"' + name.replace('"', '""') + '"'

    def event_log_ddl(self) -> list[str]:
        """What the event log lacks of its table, index and transaction column. An existing
        one's are not stated again: `ADD COLUMN IF NOT EXISTS` takes an ACCESS EXCLUSIVE lock
        and `CREATE INDEX IF NOT EXISTS` a SHARE lock on it whether or not they exist, which the
        install holds to its end, holding up (or deadlocking with) every write the triggers log."""
        table, index = super().event_log_ddl()
        transaction = self.render("event_log_transaction", **self.event_log_fields())
        key_value = self.render("key_value_function", function=self.qualify(KEY_VALUE_FUNCTION))
        log = self.config.event_log.table
        inspector = reflection(self.engine, self.schema)
        if not inspector.has_table(log, schema=self.schema):
            return [table, index, transaction, key_value]
        indexes = {found["name"] for found in inspector.get_indexes(log, schema=self.schema)}
        columns = {found["name"] for found in inspector.get_columns(log, schema=self.schema)}
        return ([] if f"{log}_status_idx" in indexes else [index]) + (
            [] if self.config.event_log.columns.transaction_id in columns else [transaction]) + [key_value]

    def null(self) -> str:
        return "NULL::text"

    def transaction_sql(self) -> str:
        return "txid_current()::text"

    def changed(self, column: Column, old: str, new: str) -> str:
        return f"{self._published(old, column)} IS DISTINCT FROM {self._published(new, column)}"

    def _published(self, row: str, column: Column) -> str:
        """What tells two values' published texts apart: the text itself, byte for byte (the
        type's equality calls 1.5 and 1.50, or 'alice' and 'Alice' under a case-insensitive
        collation, equal); a binary value's bytes, which its base64 spells one to one."""
        ref = self.ref(row, column)
        if column.value_type is ValueType.OCTET:
            return ref
        return f'{self.as_text(ref, column)} COLLATE "C"'

    def key_sql(self, table: Table, row: str) -> str:
        return self._key_text(table.logged_key, row)

    def identity_sql(self, table: Table, row: str) -> str:
        """What pairs an UPDATE statement's old and new rows: the logged key, or for a child
        row its key, links and value, since its values are a set: a row whose link or value
        changed is a value removed and another added."""
        if table.multi_valued is None:
            return self.key_sql(table, row)
        return self._key_text(tuple((c.name, c) for c in table.key), row)

    def _key_text(self, parts: Sequence[tuple[str, Column]], row: str) -> str:
        function = self.qualify(KEY_VALUE_FUNCTION)
        texts = []
        for name, column in parts:
            text = self.as_text(self.ref(row, column), column)
            value = text if column.value_type is ValueType.INT else f"{function}({text})"
            texts.append(f"{literal(name + '=')} || {value}")
        return " || '+' || ".join(texts)

    def check(self, table: Table) -> None:
        """A statement trigger fires for the table a statement names, not for its partitions or
        inheritance children, nor for their parent when the statement names them."""
        query = text(
            "SELECT c.relkind = 'p', c.relispartition, "
            "EXISTS (SELECT FROM pg_catalog.pg_inherits i WHERE i.inhparent = c.oid), "
            "(SELECT p.relname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhparent "
            " WHERE i.inhrelid = c.oid ORDER BY i.inhseqno LIMIT 1) "
            "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :table AND n.nspname = COALESCE(:schema, current_schema())"
        )
        with self.engine.connect() as conn:
            row = conn.execute(query, {"table": table.name, "schema": self.schema}).one_or_none()
        if row is None:
            return
        partitioned, partition, has_children, parent = row
        if partitioned:
            why = "it is partitioned: an UPDATE that names one of its partitions would not fire its UPDATE trigger"
        elif partition:
            why = f"it is a partition of {parent!r}: an UPDATE through {parent!r} would not fire its UPDATE trigger"
        elif has_children:
            why = (
                "it has inheritance children: their rows are read through it, but their inserts and deletes "
                "fire none of its triggers"
            )
        elif parent is not None:
            why = f"it inherits from {parent!r}: an UPDATE through {parent!r} would not fire its UPDATE trigger"
        else:
            return
        raise CaptureError(f"table {table.name!r} cannot be captured: {why}")

    def trigger_sql(self, table: Table, style: Style) -> list[str]:
        table_sql = self.qualify(table.name)
        row_trigger = postgresql_trigger_name(table.name)
        update_trigger = self.quote(postgresql_update_trigger_name(table.name))
        truncate_trigger = self.quote(postgresql_truncate_trigger_name(table.name))
        row_function, update_function = map(self.qualify, postgresql_function_names(table.name))
        settings = self.settings_sql(table)
        inserted = self.insert_events(table, style)
        on_row = self.render(
            "trigger_function",
            function=row_function,
            old_key=self.key_sql(table, "OLD"),
            new_key=self.key_sql(table, "NEW"),
            on_insert=indent(self.log_events(table, inserted), 8),
            on_delete=indent(self.log_events(table, self.delete_events(table, style)), 8),
            **settings,
        )
        on_update = self.render(
            "update_function",
            function=update_function,
            on_update=indent(self.log_update(table, style), 8),
            capture_on=indent(self.capture_on(table), 8).lstrip(),
            on_truncate=indent(self.log_truncate(table, style), 12),
            **settings,
        )
        return [
            self.render("drop_trigger", trigger=self.quote(row_trigger), table=table_sql),
            self.render("drop_trigger", trigger=update_trigger, table=table_sql),
            self.render("drop_trigger", trigger=truncate_trigger, table=table_sql),
            on_row,
            on_update,
            self.render("create_trigger", trigger=self.quote(row_trigger), table=table_sql, function=row_function),
            self.render(
                "create_update_trigger",
                trigger=update_trigger,
                table=table_sql,
                function=update_function,
                old_rows=self.quote(POSTGRESQL_OLD_ROWS),
                new_rows=self.quote(POSTGRESQL_NEW_ROWS),
            ),
            self.render("create_truncate_trigger", trigger=truncate_trigger, table=table_sql, function=update_function),
            self.render("grant_writers", table=table_sql, table_name=literal(table_sql),
                        event_log=(log := self.qualify(self.config.event_log.table)), event_log_name=literal(log)),
        ]

    def log_update(self, table: Table, style: Style) -> str:
        """One INSERT of the events of each kind of key an UPDATE statement leaves, in this
        order: removed, kept, added (the old and new rows fully joined by key, see log_update.sql).

        Old and new rows are paired by their table_key's text, byte for byte: a key its type
        calls equal but spells otherwise ('alice' and 'Alice' under a case-insensitive
        collation) names another object for the consumer. A child table's rows are paired by
        their whole identity (`identity_sql`), so none is kept: values are removed, then added."""
        old_rows, new_rows = self.quote(POSTGRESQL_OLD_ROWS), self.quote(POSTGRESQL_NEW_ROWS)
        switched_on = self.capture_on(table)
        old_key, new_key = self.key_sql(table, "_o"), self.key_sql(table, "_n")
        same = f'({self.identity_sql(table, "_o")}) COLLATE "C" = ({self.identity_sql(table, "_n")}) COLLATE "C"'
        old_only = f"NOT EXISTS (SELECT FROM {new_rows} AS _n WHERE {same})"
        new_only = f"NOT EXISTS (SELECT FROM {old_rows} AS _o WHERE {same})"
        gone, come = self.delete_events(table, style, "_o"), self.insert_events(table, style, "_n")
        if table.multi_valued and not self.logs_multi_value(table.multi_valued.value, style):
            # One query-back per parent object whose values the statement changed.
            (gone_event,), (come_event,) = gone, come
            parents = self.render(
                "child_parents", old_rows=old_rows, new_rows=new_rows, old_key=old_key, new_key=new_key,
                old_only=all_of([gone_event.condition, old_only]), new_only=all_of([come_event.condition, new_only]),
            )
            return self.render(
                "log_rows",
                rows=parents,
                condition=all_of(["v.logged", switched_on]),
                fields=self._values([dataclasses.replace(come_event, condition=TRUE)]),
                table_name_sql=literal(table.logged_name),
                key_sql="_k.k",
                **self.event_log_fields(),
            )
        present = {row: f"{self.ref(row, table.key[0])} IS NOT NULL" for row in ("_o", "_n")}
        absent = {row: f"{self.ref(row, table.key[0])} IS NULL" for row in ("_o", "_n")}
        kinds = [
            (absent["_n"], gone),
            (all_of(present.values()), self.update_events(table, style, "_o", "_n")),
            (absent["_o"], come),
        ]
        return self.render(
            "log_update",
            old_rows=old_rows,
            new_rows=new_rows,
            same=same,
            switched_on=switched_on,
            old_key=old_key,
            new_key=new_key,
            fields=self._kind_values(kinds),
            table_name_sql=literal(table.logged_name),
            **self.event_log_fields(),
        )

    def settings_sql(self, table: Table) -> dict[str, str]:
        """settings_on and settings_off of the table's capture functions: nothing where its values'
        texts depend on no setting."""
        settings = text_settings.text_settings(table)
        if not settings:
            return {"settings_on": "", "settings_off": ""}
        on = self.render("settings_on", same_text=text_settings.same_text_sql(settings),
                         current=text_settings.current_sql(settings), set=text_settings.set_sql(settings))
        off = self.render("settings_off", restore=text_settings.restore_sql(settings))
        return {"settings_on": indent(on, 4), "settings_off": indent(off, 4)}

    def capture_on(self, table: Table) -> str:
        """Whether the table's capture is on: its row trigger, the switch, is there and enabled."""
        row_trigger = postgresql_identifier(postgresql_trigger_name(table.name))
        return self.render("capture_on", row_trigger=literal(row_trigger))

    def _kind_values(self, kinds: Sequence[tuple[str, Sequence[Event]]]) -> str:
        """The rows (kind, position, event_type, column_name, logged, old_text, new_text) of
        each kind's events, logged where the kind's condition and the event's hold."""
        return ",\n".join(
            f"    ({kind}, {position}, {int(e.event_type)}, "
            f"{self.null() if e.column is None else literal(e.column)}, {all_of([condition, e.condition])}, "
            f"{e.old or self.null()}, {e.new or self.null()})"
            for kind, (condition, events) in enumerate(kinds, 1)
            for position, e in enumerate(events, 1)
        )

    def log_truncate(self, table: Table, style: Style) -> str:
        """What deleting every row of the table would log, in table_key order: a delete per
        object, or for a child table its values removed (a query-back per parent in row style)."""
        rows = f"ONLY {self.qualify(table.name)} AS _o"
        gone = self.delete_events(table, style, "_o")
        key_sql = self.key_sql(table, "_o")
        if table.multi_valued and not self.logs_multi_value(table.multi_valued.value, style):
            (gone_event,) = gone
            rows = f"(SELECT DISTINCT ({key_sql}) COLLATE \"C\" FROM {rows} WHERE {gone_event.condition}) AS _k(k)"
            key_sql, gone = "_k.k", [dataclasses.replace(gone_event, condition=TRUE)]
        return self.render(
            "log_rows",
            rows=rows,
            condition=all_of(["v.logged"]),
            fields=self._values(gone),
            table_name_sql=literal(table.logged_name),
            key_sql=key_sql,
            **self.event_log_fields(),
        )

    def _values(self, events: Sequence[Event]) -> str:
        """The rows (position, event_type, column_name, logged, old_text, new_text) of events."""
        return ",\n".join(
            f"    ({position}, {int(e.event_type)}, "
            f"{self.null() if e.column is None else literal(e.column)}, {e.condition}, "
            f"{e.old or self.null()}, {e.new or self.null()})"
            for position, e in enumerate(events, 1)
        )

    def log_events(self, table: Table, events: Sequence[Event]) -> str:
        return "\n".join(self._statements(table, events))

    def _statements(self, table: Table, events: Sequence[Event]) -> Iterator[str]:
        """Consecutive field events of one key share one INSERT; the event order is kept."""
        runs = itertools.groupby(events, lambda e: (e.column is not None, e.key))
        for (is_field, key), group in runs:
            key_sql = "_old_key" if key == "old" else "_new_key"
            if is_field:
                rows = ",\n".join(
                    f"    ({int(e.event_type)}, {literal(e.column or '')}, {e.condition}, "
                    f"{e.old or self.null()}, {e.new or self.null()})"
                    for e in group
                )
                yield self.render(
                    "log_fields",
                    fields=rows,
                    table_name_sql=literal(table.logged_name),
                    key_sql=key_sql,
                    **self.event_log_fields(),
                )
                continue
            for event in group:
                yield self.render(
                    "log_event",
                    condition=event.condition,
                    **self.event_log_fields(),
                    **self.event_values(table, event, key_sql),
                )
