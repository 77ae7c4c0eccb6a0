"""What every dialect's capture shares: identifiers, templates, the event log DDL and the events
each change logs."""
from __future__ import annotations

import abc
import functools
import inspect
import string
import textwrap
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Literal

from sqlalchemy import Connection, Engine

from publisher.capture.tables import CaptureError, Column, Event, Style, Table, dollar_tag
from publisher.config import EVENT_LOG_COLUMNS, Config
from publisher.database import table_schema
from publisher.dialects import Dialect, dialect_of, families, named_class
from publisher.model.column_types import type_name
from publisher.model.events import EventType
from publisher.model.statements import Lexis
from publisher.model.valuetext import value_text_sql

TRUE = "TRUE"
FALSE = "FALSE"


@functools.cache
def _template(folder: Path, name: str) -> string.Template:
    """A template without its leading comment lines, which document it for readers only."""
    lines = (folder / f"{name}.sql").read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    return string.Template("\n".join(lines).rstrip())


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def all_of(conditions: Iterable[str]) -> str:
    parts = [c for c in conditions if c != TRUE]
    if FALSE in parts:
        return FALSE
    if len(parts) <= 1:
        return parts[0] if parts else TRUE
    return " AND ".join(f"({c})" for c in parts)


def any_of(conditions: Iterable[str]) -> str:
    parts = [c for c in conditions if c != FALSE]
    if TRUE in parts:
        return TRUE
    return " OR ".join(parts) or FALSE


def carrying(triggers: Iterable[Sequence[str]], names_of: Callable[[str], set[str]]) -> tuple[str, ...]:
    """The tables among (trigger, table) pairs that have a trigger named as capture names it."""
    return tuple(sorted({table for trigger, table in triggers if trigger in names_of(table)}))


def indent(text: str, spaces: int) -> str:
    return textwrap.indent(text, " " * spaces)


class Capture(abc.ABC):
    """What both dialects share: identifiers, the event log DDL and the events each change logs."""

    name: str

    def __init__(self, config: Config, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.schema = table_schema(config, engine)
        self.preparer = engine.dialect.identifier_preparer

    def quote(self, name: str) -> str:
        return self.preparer.quote(name)

    def literal(self, text: str) -> str:
        """A string literal of the dialect's SQL."""
        return literal(text)

    def qualify(self, name: str) -> str:
        """A schema object's name as SQL; without a schema (`Dialect.table_schema`) the bare name,
        as trigger bodies there must not name one."""
        if self.schema is None:
            return self.quote(name)
        return f"{self.quote(self.schema)}.{self.quote(name)}"

    @classmethod
    def templates(cls) -> Path:
        """The folder of the capture's SQL templates: `sql/` beside the module of the class that
        names the capture, in its database's folder (and in the wheel, which carries it)."""
        owner = next(c for c in cls.__mro__ if "name" in vars(c))
        return Path(inspect.getfile(owner)).parent / "sql"

    def render(self, template: str, **values: str) -> str:
        return _template(self.templates(), template).substitute(values, dollar=dollar_tag(values.values()))

    def event_log_fields(self) -> dict[str, str]:
        """The event log's identifiers, by their role names, for every template that writes it."""
        columns = self.config.event_log.columns
        names = {role: self.quote(getattr(columns, role)) for role in (*EVENT_LOG_COLUMNS, "transaction_id")}
        return {"event_log": self.qualify(self.config.event_log.table), **names}

    def event_log_ddl(self) -> list[str]:
        fields = self.event_log_fields()
        index = self.quote(f"{self.config.event_log.table}_status_idx")
        return [
            self.render("event_log", **fields),
            self.render("event_log_index", index=index, **fields),
        ]

    @abc.abstractmethod
    def carriers(self, conn: Connection, any_trigger: bool) -> tuple[str, ...]:
        """The tables carrying this project's capture triggers, found by the names it gives them."""

    @abc.abstractmethod
    def triggers(self, conn: Connection) -> list[tuple[str, str]]:
        """(trigger, table) of every trigger on the schema's tables."""

    @abc.abstractmethod
    def capture_trigger_names(self, table: str) -> set[str]:
        """Every trigger capture gives the table, named as the database stores it."""

    @abc.abstractmethod
    def drop_capture_sql(self, carrier: str, installed_on: str, shared: bool) -> list[str]:
        """Statements that drop from the table `carrier` the capture installed on `installed_on`
        (its triggers, and the functions they ran where they had their own); `shared`: a table
        named `installed_on` carries a capture of its own."""

    def moved(self, conn: Connection, installed_on: Iterable[str]) -> dict[str, str]:
        """Of the tables capture was installed on, those whose triggers another table carries:
        a renamed table keeps its triggers, which go on logging its changes under the name they
        were installed for. The table carrying them, by that name."""
        triggers = [(trigger.lower(), table) for trigger, table in self.triggers(conn)]
        found = {}
        for name in installed_on:
            names = {n.lower() for n in self.capture_trigger_names(name)}
            carriers = {table for trigger, table in triggers if trigger in names and table.lower() != name.lower()}
            if len(carriers) == 1:
                found[name] = carriers.pop()
        return found

    def execute(self, statements: Sequence[str]) -> None:
        """Run install statements in one transaction."""
        with self.engine.connect() as conn:
            for statement in statements:
                # a driver may read % as a placeholder even without parameters (its dialect
                # says which); format() strings have them.
                conn.exec_driver_sql(statement.replace("%", "%%"))
            conn.commit()

    # --- a migration of published tables (`publisher migrate`) ------------------------------

    lexis = Lexis()  # where its SQL text's statements end
    transactional_ddl = True
    """A migration runs in one transaction, its DDL and the captures made anew with it, undone
    whole if a statement fails; the tables it alters stay locked until it commits. Where each
    DDL statement commits on its own, so do an install's trigger statements: a table's shape is
    recorded before them (`shape_history`)."""

    def begin_migration_sql(self, tables: Sequence[str]) -> list[str]:
        """What makes the application's writes of `tables` wait from here to the migration's end."""
        return []

    def migration_lock_busy(self, error: Exception) -> bool:
        """Whether `begin_migration_sql` failed only because the application's transactions
        hold the tables now: it is tried again a moment later."""
        return False

    def lock_gone_stale(self, error: Exception) -> bool:  # the statement, undone, runs after `retake_sql`
        return False

    def retake_sql(self, tables: Sequence[str]) -> list[str]:
        return [*self.end_migration_sql(), *self.begin_migration_sql(tables)]

    def end_migration_sql(self) -> list[str]:
        return []

    def before_migration_sql(self, statement: str, tables: Sequence[str]) -> list[str]:
        """What goes before a statement that may change these tables."""
        return []

    def truncate_sql(self, statement: str, tables: Sequence[str]) -> list[str]:
        """A TRUNCATE of published tables as a migration runs it."""
        return [statement]

    def subscription_indexes(self) -> list[str]:
        """Indexes on the event log that check-outs select their events by."""
        return []

    # --- what the capture of some databases does beside its triggers --------------------------

    has_native_capture = False
    """A table's triggers may call a function compiled for the server (`native`) instead."""

    def native_install_sql(self) -> list[str]:
        """What the native capture needs once per schema, after checking the server can run it;
        CaptureError where it cannot, or the database has none."""
        raise self._no_native()

    def check_native(self) -> None:
        """Raise CaptureError, saying why, where the server cannot run the native capture."""
        raise self._no_native()

    def native_trigger_sql(self, table: Table, style: Style) -> list[str]:
        """The table's triggers on the native capture (where `has_native_capture`)."""
        raise self._no_native()

    def _no_native(self) -> CaptureError:
        having = " and ".join(f"{dialect.title}'s" for dialect in families()
                              if capture_class(dialect).has_native_capture)
        return CaptureError(f"the native capture is {having}; {self.engine.dialect.name} has the SQL capture only")

    def native_tables(self) -> set[str]:
        """The tables (in lower case) whose capture is the native one."""
        return set()

    def may_follow(self) -> bool:
        """Whether an event trigger may follow a migration in its own transaction, moving the
        tables it changes onto a capture that names no column (`follow`). Elsewhere a migration
        that drops or renames a column is followed by the next cycle's reinstall alone."""
        return False

    def follow_ddl(self) -> list[str]:
        """The event trigger and its functions, where the database and the user allow them."""
        return []

    def follow_records(self, tables: Sequence[Table], style: Style,
                       on_native: Collection[str]) -> dict[str, tuple[str, str, str]] | None:
        """What the event trigger needs of each table but those `on_native` (`shape.record_sql`);
        None where no event trigger follows migrations."""
        return None

    def kept_switches(self, table: str, carried: str | None = None) -> list[str]:
        """Statements that leave the capture of `table` switched off again where it was before
        its triggers were made anew; none where capture has no switch."""
        return []

    @abc.abstractmethod
    def check(self, table: Table) -> None:
        """Raise CaptureError if the table cannot carry this dialect's triggers."""

    @abc.abstractmethod
    def trigger_sql(self, table: Table, style: Style) -> list[str]:
        ...

    def ref(self, row: str, column: Column) -> str:
        """A column of a row: OLD or NEW in a row trigger, a transition table's alias otherwise."""
        return f"{row}.{self.quote(column.name)}"

    def as_text(self, ref: str, column: Column) -> str:
        """A value as the event log stores it: the text query-back reads it as, too."""
        return value_text_sql(self.name, ref, column.value_type, type_name(column.sql_type))

    def logs_value(self, column: Column) -> bool:
        """Whether a trigger can write the column's value, or must log a field query-back."""
        return True

    def logged_bytes(self, column: Column) -> int | None:
        """The longest value (in bytes) of the column a trigger writes; a longer one it logs as
        a field query-back, where its text costs the application's write too much. None: any."""
        return None

    def _short(self, refs: Sequence[str], limit: int | None) -> str:
        """That the values `refs` are all short enough to log (NULL is)."""
        return TRUE if limit is None else all_of(f"COALESCE(LENGTH({ref}), 0) <= {limit}" for ref in refs)

    def _long(self, refs: Sequence[str], limit: int) -> str:
        return any_of(f"COALESCE(LENGTH({ref}), 0) > {limit}" for ref in refs)

    def _not_logged(self, ref: str, column: Column) -> str:
        """That a new row's value logs no type 1: NULL, or longer than the triggers write."""
        limit = self.logged_bytes(column)
        return f"{ref} IS NULL" if limit is None else any_of([f"{ref} IS NULL", self._long([ref], limit)])

    @abc.abstractmethod
    def changed(self, column: Column, old: str, new: str) -> str:
        """Whether the column's published text differs between the rows `old` and `new`."""

    def null(self) -> str:
        return "NULL"

    def transaction_sql(self) -> str | None:
        """What an event logged by a statement outside the triggers (a snapshot's) writes in
        transaction_id, as the triggers' templates write it; None: the column stays NULL."""
        return None

    def insert_events(self, table: Table, style: Style, new: str = "NEW") -> list[Event]:
        """The events of a new row (an insert, or an update that gave a row a new key): the
        logged values first, so that they make one `<add>`, then the field query-backs. A row
        that logs no value logs one type 1 without one where each is NULL (an `<add>` too), or a
        row query-back where some are read back: one operation of the whole row, as
        `insert_row_operation` says, not a `<modify>` of the values read back alone."""
        if table.multi_valued:
            return self.value_events(table, style, "new", new)
        if style == "row" or not table.values:
            return [Event(EventType.INSERT_ROW_QUERY_BACK, "new", None, None, None, TRUE)]
        logged, read_back = [], []
        for column in table.values:
            value = self.ref(new, column)
            limit = self.logged_bytes(column)
            if self.logs_value(column):
                logged.append(Event(EventType.INSERT_FIELD, "new", column.name, None, self.as_text(value, column),
                                    all_of([f"{value} IS NOT NULL", self._short([value], limit)])))
            if not self.logs_value(column) or limit is not None:
                read_back.append(Event(EventType.INSERT_FIELD_QUERY_BACK, "new", column.name, None, None,
                                       f"{value} IS NOT NULL" if limit is None else self._long([value], limit)))
        none_logged = all_of(self._not_logged(self.ref(new, c), c) for c in table.values if self.logs_value(c))
        some_read_back = any_of(event.condition for event in read_back)
        first = table.values[0].name
        if some_read_back == FALSE:
            logged.append(Event(EventType.INSERT_FIELD, "new", first, None, None, none_logged))
            return logged
        logged.append(Event(EventType.INSERT_FIELD, "new", first, None, None,
                            all_of([none_logged, f"NOT ({some_read_back})"])))
        whole = Event(EventType.INSERT_ROW_QUERY_BACK, "new", None, None, None, all_of([none_logged, some_read_back]))
        return [*logged, whole, *read_back]

    def update_events(self, table: Table, style: Style, old: str = "OLD", new: str = "NEW") -> list[Event]:
        """The events of an update that kept the key; none for a child row that kept its links
        and value, as its other columns are not published."""
        if table.multi_valued:
            return []
        if style == "row":
            changed = any_of(self.changed(c, old, new) for c in table.values)
            if changed == FALSE:
                return []
            return [Event(EventType.UPDATE_ROW_QUERY_BACK, "new", None, None, None, changed)]
        events = []
        for column in table.values:
            changed = self.changed(column, old, new)
            refs = [self.ref(old, column), self.ref(new, column)]
            limit = self.logged_bytes(column)
            if self.logs_value(column):
                events.append(Event(EventType.UPDATE_FIELD, "new", column.name, self.as_text(refs[0], column),
                                    self.as_text(refs[1], column), all_of([changed, self._short(refs, limit)])))
            if not self.logs_value(column) or limit is not None:
                events.append(Event(EventType.UPDATE_FIELD_QUERY_BACK, "new", column.name, None, None,
                                    changed if limit is None else all_of([changed, self._long(refs, limit)])))
        return events

    def delete_events(self, table: Table, style: Style, old: str = "OLD") -> list[Event]:
        """The events of a row gone (a delete, or an update that took a row's key away)."""
        if table.multi_valued:
            return self.value_events(table, style, "old", old)
        return [Event(EventType.DELETE_ROW, "old", None, None, None, TRUE)]

    def value_events(self, table: Table, style: Style, side: Literal["old", "new"], row: str) -> list[Event]:
        """A child row come or gone, against its parent's key: the attribute's value added or
        removed (type 2 from or to NULL), or in row style or for a value the trigger cannot
        write, a type 8 that has the publisher read the attribute back. A row whose links or
        value are NULL (where key columns allow it) is no value of any object."""
        assert table.multi_valued
        attribute, value = table.multi_valued.attribute, table.multi_valued.value
        linked = all_of(f"{self.ref(row, c)} IS NOT NULL" for _, c in table.logged_key)
        if not self.logs_multi_value(value, style):
            return [Event(EventType.UPDATE_FIELD_QUERY_BACK, side, attribute, None, None, linked)]
        ref = self.ref(row, value)
        text_sql = self.as_text(ref, value)
        old, new = (text_sql, None) if side == "old" else (None, text_sql)
        limit = self.logged_bytes(value)
        events = [Event(EventType.UPDATE_FIELD, side, attribute, old, new,
                        all_of([linked, f"{ref} IS NOT NULL", self._short([ref], limit)]))]
        if limit is not None:
            events.append(Event(EventType.UPDATE_FIELD_QUERY_BACK, side, attribute, None, None,
                                all_of([linked, self._long([ref], limit)])))
        return events

    def logs_multi_value(self, value: Column, style: Style) -> bool:
        """Whether a child's rows log their values; if not, they log query-backs, one per
        parent object an update statement changes."""
        return style == "field" and self.logs_value(value)

    def event_values(self, table: Table, event: Event, key_sql: str) -> dict[str, str]:
        return {
            "type_sql": str(int(event.event_type)),
            "table_name_sql": self.literal(table.logged_name),
            "key_sql": key_sql,
            "column_sql": self.null() if event.column is None else self.literal(event.column),
            "old_sql": event.old or self.null(),
            "new_sql": event.new or self.null(),
        }


def capture_class(dialect: Dialect) -> type[Capture]:
    """The capture class a database family names (`Dialect.capture`): one registry, the
    families', finds a database's capture as it finds the rest of it."""
    found = named_class(dialect.capture)
    if not issubclass(found, Capture):
        raise TypeError(f"{dialect.capture} (the capture of {dialect.name!r}) is no publisher.capture.base.Capture")
    return found


def capture_of(config: Config, engine: Engine) -> Capture:
    """The capture of the engine's database."""
    return capture_class(dialect_of(engine))(config, engine)
