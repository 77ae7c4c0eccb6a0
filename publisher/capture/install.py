"""The capture side: the event log table and the triggers that fill it (SPEC §1-§3).

SQL lives in ``sql/<dialect>/*.sql`` as ``string.Template`` text; this module reflects the
published tables and fills identifiers (quoted by the dialect), literals and expressions in.

Triggers log one of two styles:

- ``field``: an insert logs a type 1 per non-NULL non-key column, an update a type 2 per
  changed non-key column, a delete a type 4. An insert whose non-key columns are all NULL
  logs one type 1 with a NULL value, so the object's creation is still published; a table
  with no non-key column has no field to log and logs row events (type 5) on insert.
- ``row``: 5 on insert, 6 on update, 4 on delete.

In both styles an update that changes a key column logs a type 4 for the old key and then
the new key's insert events, and an update that changes no published text logs nothing. A
non-key column counts as changed when its published text changes (``1.5`` to ``1.50``,
``'alice'`` to ``'Alice'`` under a case-insensitive collation), not its type's equality; a key
counts as changed when its table_key text does, since that text is the object the consumer
knows.

PostgreSQL logs an UPDATE per statement, from its transition tables, pairing the old and new
rows by table_key: the keys only among the old rows are deleted first, the keys in both are
updated, the keys only among the new rows are inserted last. So a statement that swaps or
renumbers keys updates each kept key in place and never logs an object's insert ahead of its
delete, which row triggers would. Inserts and deletes are logged per row.

SQLite exception: it has no base64 function and triggers cannot use CTEs, so a binary
(BLOB) column is logged as a field query-back event (type 7 on insert, 8 on update) without
values; the publisher reads the value back and base64-encodes it.

Logical classes (`model.logical`): a class's child tables get triggers with its parent's.
A child row is a value of the attribute, logged against the parent's table and key (spelled
as the parent's triggers spell it): a type 2 without an old value when it comes, without a new
value when it goes; its key is its links and value, so changing either is a removal and an
addition (PostgreSQL pairs a statement's rows by that key: a swap logs nothing). Row style, or
a BLOB on SQLite: a type 8 of the attribute, one per parent an update changes.
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import hashlib
import itertools
import string
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from sqlalchemy import Engine, inspect, text
from sqlalchemy import types as sqltypes

from publisher.config import ClassConfig, Config
from publisher.database import is_sqlite, table_schema
from publisher.model.catalog import PublishedTables, check_link, column_info
from publisher.model.events import EVENT_LOG_COLUMNS, EventType
from publisher.model.keys import writable_key_column
from publisher.model.logical import LogicalClassError, child_links, child_of, child_tables, class_config
from publisher.model.values import ValueType, value_type_of
from publisher.model.valuetext import function_settings_sql, value_text_sql

Style = Literal["field", "row"]
STYLES: tuple[Style, ...] = ("field", "row")
KEY_VALUE_FUNCTION = "publisher_key_value"
SQLITE_TRIGGER_SUFFIXES = {"INSERT": "ins", "UPDATE": "upd", "DELETE": "del"}
POSTGRESQL_NAME_BYTES = 63
"""PostgreSQL cuts longer identifiers (NAMEDATALEN - 1), at a character boundary."""
POSTGRESQL_OLD_ROWS = "_publisher_old"
POSTGRESQL_NEW_ROWS = "_publisher_new"
"""The transition tables of the UPDATE statement trigger."""
_TABLE_KEY_SPECIALS = ",;'+\"=\\<>"
_TRUE = "TRUE"
_FALSE = "FALSE"


class CaptureError(ValueError):
    """Capture cannot be installed as asked: a missing table, no primary key, an unknown style."""


@dataclasses.dataclass(frozen=True)
class _Column:
    name: str
    sql_type: sqltypes.TypeEngine
    value_type: ValueType


@dataclasses.dataclass(frozen=True)
class _MultiValued:
    """What a child table's rows are: values of an attribute of their parent's object."""

    attribute: str
    value: _Column
    parent: str
    parent_key: tuple[tuple[str, _Column], ...]
    """(the parent's key column, the child's column holding it), in the parent's key order."""


@dataclasses.dataclass(frozen=True)
class _Table:
    name: str
    key: tuple[_Column, ...]
    """Key columns in primary-key order: what tells the table's rows apart."""
    values: tuple[_Column, ...]
    multi_valued: _MultiValued | None = None
    """Set for a child table of a logical class, whose rows are logged against the parent."""

    @property
    def logged_name(self) -> str:
        """The table_name of the table's events: the parent's for a child table."""
        return self.multi_valued.parent if self.multi_valued else self.name

    @property
    def logged_key(self) -> tuple[tuple[str, _Column], ...]:
        """(name, column) of each part of the events' table_key, in order: a child's links, as
        the parent's key columns."""
        if self.multi_valued:
            return self.multi_valued.parent_key
        return tuple((c.name, c) for c in self.key)


@dataclasses.dataclass(frozen=True)
class _Event:
    """One event a trigger may log; SQL expressions refer to OLD/NEW, ``key`` names whose key."""

    event_type: EventType
    key: Literal["old", "new"]
    column: str | None
    old: str | None
    new: str | None
    condition: str


def sqlite_trigger_name(table: str, suffix: str) -> str:
    return f"{table}_publisher_{suffix}"


def postgresql_trigger_name(table: str) -> str:
    """The row trigger of inserts and deletes: the one `triggered_tables` looks for, and the
    table's switch: while it is dropped or disabled, the UPDATE trigger logs nothing either."""
    return f"{table}_publisher"


def postgresql_update_trigger_name(table: str) -> str:
    """The statement trigger of updates."""
    return _postgresql_name(table, "_publisher_upd")


def _postgresql_identifier(name: str) -> str:
    return name.encode("utf-8")[:POSTGRESQL_NAME_BYTES].decode("utf-8", errors="ignore")


def _postgresql_name(table: str, suffix: str) -> str:
    """The name of a trigger or function of the table's: the table's name and the suffix.

    Where PostgreSQL would cut that, the table's name is cut instead and marked with a digest
    of the whole: a cut suffix would give the UPDATE trigger or function the name of the row
    trigger or function, and a cut table name two long tables sharing a prefix one function."""
    name = table + suffix
    if len(name.encode("utf-8")) <= POSTGRESQL_NAME_BYTES:
        return name
    marked = f"_{hashlib.sha256(table.encode('utf-8')).hexdigest()[:8]}{suffix}"
    room = POSTGRESQL_NAME_BYTES - len(marked.encode("utf-8"))
    return table.encode("utf-8")[:room].decode("utf-8", errors="ignore") + marked


def triggered_tables(config: Config, engine: Engine) -> tuple[str, ...]:
    """The tables of the configured schema that carry this project's capture triggers.

    They are what is published when ``publisher.tables`` is empty: found by the names this
    module gives the triggers, so installing capture on a table is what puts it on the list.
    A configured child table is not listed: it is no class, its triggers log its parent's.
    """
    children = child_tables(config.classes)
    with engine.connect() as conn:
        if is_sqlite(engine):
            rows = conn.execute(text("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"))
            found = _carrying(rows, lambda t: {sqlite_trigger_name(t, s) for s in SQLITE_TRIGGER_SUFFIXES.values()})
            return tuple(t for t in found if t.lower() not in children)
        rows = conn.execute(
            text(
                "SELECT t.tgname, c.relname FROM pg_catalog.pg_trigger t "
                "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE NOT t.tgisinternal AND n.nspname = COALESCE(:schema, current_schema())"
            ),
            {"schema": table_schema(config, engine)},
        )
        found = _carrying(rows, lambda t: {_postgresql_identifier(postgresql_trigger_name(t))})
        return tuple(t for t in found if t.lower() not in children)


def published_tables(config: Config, engine: Engine) -> PublishedTables:
    """The allow-list of a cycle: ``publisher.tables`` when set, else the triggered tables;
    never a configured child table, whose rows are published as their parent's values."""
    if config.publisher.tables:
        children = child_tables(config.classes)
        names = tuple(t for t in config.publisher.tables if t.lower() not in children)
        return PublishedTables(names, configured=True)
    return PublishedTables(triggered_tables(config, engine), configured=False)


def _carrying(triggers: Iterable[Sequence[str]], names_of: Callable[[str], set[str]]) -> tuple[str, ...]:
    """The tables among (trigger, table) pairs that have a trigger named as capture names it."""
    return tuple(sorted({table for trigger, table in triggers if trigger in names_of(table)}))


def event_log_ddl(config: Config, engine: Engine) -> list[str]:
    """Statements that create the event log (and its helpers) unless it exists already."""
    return _dialect(config, engine).event_log_ddl()


def subscription_ddl(config: Config, engine: Engine) -> list[str]:
    """The subscribers' state tables (see `pipeline.checkout`), and on PostgreSQL the index that
    finds a check-out's events by their transaction."""
    from sqlalchemy import MetaData, Table, column
    from sqlalchemy.schema import CreateIndex, CreateTable

    from publisher.pipeline.checkout import checkin_table, subscriber_table, transaction_of

    schema = table_schema(config, engine)
    metadata = MetaData()
    log = config.event_log.table
    tables = [subscriber_table(log, schema, metadata), checkin_table(log, schema, metadata)]
    statements = [str(CreateTable(t, if_not_exists=True).compile(engine)) for t in tables]
    statements += [str(CreateIndex(i, if_not_exists=True).compile(engine)) for t in tables for i in t.indexes]
    if engine.dialect.name == "postgresql":
        preparer = engine.dialect.identifier_preparer
        expression = transaction_of(column(config.event_log.columns.transaction_id))
        found_by = expression.compile(engine, compile_kwargs={"literal_binds": True})
        name = preparer.quote(f"{log}_transaction_idx")
        target = preparer.format_table(Table(log, MetaData(), schema=schema))
        statements.append(f"CREATE INDEX IF NOT EXISTS {name} ON {target} (({found_by}))")
    return statements


def trigger_sql(config: Config, engine: Engine, table: str, style: Style) -> list[str]:
    """Statements that (re)install the capture triggers of one table, replacing any earlier ones:
    for a logical class's parent, those of its child tables too; for a child table, its own as
    a child of its class."""
    _check_style(style, table)
    dialect = _dialect(config, engine)
    statements = []
    for reflected in _captured(config, engine, dialect.schema, table):
        dialect.check(reflected)
        statements += dialect.trigger_sql(reflected, style)
    return statements


def install_capture(
    config: Config,
    engine: Engine,
    tables: Sequence[str],
    style: Style = "field",
    dry_run: bool = False,
) -> list[str]:
    """Create the event log and every named table's triggers in one transaction.

    Every table is reflected before anything runs, so one bad name installs nothing. With
    ``dry_run`` nothing runs; either way the statements are returned, for printing.
    """
    _check_style(style)
    statements = event_log_ddl(config, engine)
    if config.subscriptions or config.subscribers:
        statements += subscription_ddl(config, engine)
    named = {t.lower() for t in tables}
    for table in tables:
        child = child_of(config.classes, table)
        if child is None or child.class_name.lower() not in named:  # else installed with its class
            statements += trigger_sql(config, engine, table, style)
    if not dry_run:
        _execute(engine, statements)
    return statements


def _execute(engine: Engine, statements: Sequence[str]) -> None:
    with engine.connect() as conn:
        if is_sqlite(engine):
            # Python's sqlite3 runs DDL outside any transaction unless one is begun explicitly.
            conn.exec_driver_sql("BEGIN")
        for statement in statements:
            conn.exec_driver_sql(statement)
        conn.commit()


def _check_style(style: str, table: str | None = None) -> None:
    if style not in STYLES:
        where = f" for table {table!r}" if table else ""
        expected = ", ".join(STYLES)
        raise CaptureError(f"unknown capture style {style!r}{where}, expected one of {expected}")


def _captured(config: Config, engine: Engine, schema: str | None, table: str) -> list[_Table]:
    """The tables whose triggers capture the named one: itself, and a class's child tables."""
    child = child_of(config.classes, table)
    parent = _reflect(engine, schema, child.class_name if child else table)
    cls = child.cls if child else class_config(config.classes, parent.name)
    children = _children(engine, schema, parent, cls) if cls else []
    return children if child else [parent, *children]


def _children(engine: Engine, schema: str | None, parent: _Table, cls: ClassConfig) -> list[_Table]:
    """The class's child tables, each logging its rows as values of its attribute."""
    dialect = engine.dialect.name
    children = []
    try:
        for link in child_links(inspect(engine), schema, parent.name, [c.name for c in parent.key], cls):
            child = _reflect(engine, schema, link.table, named_in_key=False)
            columns = {c.name: c for c in (*child.key, *child.values)}
            parent_key = tuple((k.name, columns[c]) for k, c in zip(parent.key, link.links, strict=True))
            for (name, column), key in zip(parent_key, parent.key, strict=True):
                check_link(link, column_info(name, key.sql_type, dialect), column_info(column.name, column.sql_type,
                                                                                       dialect))
            multi_valued = _MultiValued(link.attribute, columns[link.value], parent.name, parent_key)
            children.append(dataclasses.replace(child, multi_valued=multi_valued))
    except LogicalClassError as exc:
        raise CaptureError(str(exc)) from None
    return children


def _reflect(engine: Engine, schema: str | None, table: str, named_in_key: bool = True) -> _Table:
    """The table's columns and key; ``named_in_key``: its key columns' names are written in
    table_keys (a child table's are not: it logs its parent's)."""
    inspector = inspect(engine)
    where = f"schema {schema}" if schema else "the database"
    tables = inspector.get_table_names(schema=schema)
    views = inspector.get_view_names(schema=schema)
    name = _resolve(table, tables)
    if name is None:
        if _resolve(table, views) is not None:
            raise CaptureError(
                f"{table!r} is a view in {where}; capture triggers go on its base tables"
            )
        raise CaptureError(f"table {table!r} does not exist in {where}")
    columns = {
        c["name"]: _Column(c["name"], c["type"], value_type_of(c["type"]))
        for c in inspector.get_columns(name, schema=schema)
    }
    key_names = inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or []
    if not key_names:
        raise CaptureError(
            f"table {name!r} has no primary key; a table_key needs one to name the changed row"
        )
    for key_name in key_names if named_in_key else ():
        if not writable_key_column(key_name):
            raise CaptureError(
                f"table {name!r}: key column {key_name!r} cannot be named in a table_key: "
                f"{_unwritable_because(key_name)}"
            )
    return _Table(
        name=name,
        key=tuple(columns[k] for k in key_names),
        values=tuple(c for n, c in columns.items() if n not in key_names),
    )


def _unwritable_because(column: str) -> str:
    if not column:
        return "the name is empty"
    special = [c for c in _TABLE_KEY_SPECIALS if c in column]
    if special:
        return f"it holds {' '.join(special)}, which a table_key gives a meaning of its own"
    return "it has leading or trailing spaces, which a table_key drops"


def _resolve(name: str, names: Iterable[str]) -> str | None:
    """The exact name if present, else the one name that matches it ignoring case."""
    names = list(names)
    if name in names:
        return name
    matches = [n for n in names if n.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def _dialect(config: Config, engine: Engine) -> _Dialect:
    cls = _SQLite if is_sqlite(engine) else _PostgreSQL
    return cls(config, engine)


@functools.cache
def _template(dialect: str, name: str) -> string.Template:
    """A template without its leading comment lines, which document it for readers only."""
    lines = (_sql_dir() / dialect / f"{name}.sql").read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    return string.Template("\n".join(lines).rstrip())


def _sql_dir() -> Path:
    """Find the templates in an installed wheel (``publisher/sql``) or a source checkout."""
    here = Path(__file__).parent.parent
    candidates = (here / "sql", here.parent / "sql")
    for path in candidates:
        if path.is_dir():
            return path
    raise FileNotFoundError(f"SQL templates not found in {', '.join(map(str, candidates))}")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _all(conditions: Iterable[str]) -> str:
    parts = [c for c in conditions if c != _TRUE]
    if _FALSE in parts:
        return _FALSE
    if len(parts) <= 1:
        return parts[0] if parts else _TRUE
    return " AND ".join(f"({c})" for c in parts)


def _any(conditions: Iterable[str]) -> str:
    parts = [c for c in conditions if c != _FALSE]
    if _TRUE in parts:
        return _TRUE
    return " OR ".join(parts) or _FALSE


def _indent(text: str, spaces: int) -> str:
    return textwrap.indent(text, " " * spaces)


class _Dialect(abc.ABC):
    """What both dialects share: identifiers, the event log DDL and the events each change logs."""

    name: str

    def __init__(self, config: Config, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.schema = table_schema(config, engine)
        self.preparer = engine.dialect.identifier_preparer

    def quote(self, name: str) -> str:
        return self.preparer.quote(name)

    def qualify(self, name: str) -> str:
        """A schema object's name as SQL; SQLite trigger bodies must not name a schema."""
        if self.schema is None:
            return self.quote(name)
        return f"{self.quote(self.schema)}.{self.quote(name)}"

    def render(self, template: str, **values: str) -> str:
        return _template(self.name, template).substitute(values)

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
    def check(self, table: _Table) -> None:
        """Raise CaptureError if the table cannot carry this dialect's triggers."""

    @abc.abstractmethod
    def trigger_sql(self, table: _Table, style: Style) -> list[str]:
        ...

    def ref(self, row: str, column: _Column) -> str:
        """A column of a row: OLD or NEW in a row trigger, a transition table's alias otherwise."""
        return f"{row}.{self.quote(column.name)}"

    def as_text(self, ref: str, column: _Column) -> str:
        """A value as the event log stores it: the text query-back reads it as, too."""
        return value_text_sql(self.name, ref, column.value_type)

    def logs_value(self, column: _Column) -> bool:
        """Whether a trigger can write the column's value, or must log a field query-back."""
        return True

    @abc.abstractmethod
    def changed(self, column: _Column, old: str, new: str) -> str:
        """Whether the column's published text differs between the rows `old` and `new`."""

    def null(self) -> str:
        return "NULL"

    def insert_events(self, table: _Table, style: Style, new: str = "NEW") -> list[_Event]:
        """The events of a new row (an insert, or an update that gave a row a new key): the
        logged values first, so that they make one `<add>`, then the field query-backs."""
        if table.multi_valued:
            return self.value_events(table, style, "new", new)
        if style == "row" or not table.values:
            return [_Event(EventType.INSERT_ROW_QUERY_BACK, "new", None, None, None, _TRUE)]
        logged, read_back = [], []
        for column in table.values:
            value = self.ref(new, column)
            if self.logs_value(column):
                logged.append(_Event(EventType.INSERT_FIELD, "new", column.name, None, self.as_text(value, column),
                                     f"{value} IS NOT NULL"))
            else:
                read_back.append(_Event(EventType.INSERT_FIELD_QUERY_BACK, "new", column.name, None, None,
                                        f"{value} IS NOT NULL"))
        all_null = _all(f"{self.ref(new, c)} IS NULL" for c in table.values)
        first = table.values[0].name
        logged.append(_Event(EventType.INSERT_FIELD, "new", first, None, None, all_null))
        return logged + read_back

    def update_events(self, table: _Table, style: Style, old: str = "OLD", new: str = "NEW") -> list[_Event]:
        """The events of an update that kept the key; none for a child row that kept its links
        and value, as its other columns are not published."""
        if table.multi_valued:
            return []
        if style == "row":
            changed = _any(self.changed(c, old, new) for c in table.values)
            if changed == _FALSE:
                return []
            return [_Event(EventType.UPDATE_ROW_QUERY_BACK, "new", None, None, None, changed)]
        events = []
        for column in table.values:
            if self.logs_value(column):
                event_type = EventType.UPDATE_FIELD
                old_text = self.as_text(self.ref(old, column), column)
                new_text = self.as_text(self.ref(new, column), column)
            else:
                event_type, old_text, new_text = EventType.UPDATE_FIELD_QUERY_BACK, None, None
            events.append(_Event(event_type, "new", column.name, old_text, new_text, self.changed(column, old, new)))
        return events

    def delete_events(self, table: _Table, style: Style, old: str = "OLD") -> list[_Event]:
        """The events of a row gone (a delete, or an update that took a row's key away)."""
        if table.multi_valued:
            return self.value_events(table, style, "old", old)
        return [_Event(EventType.DELETE_ROW, "old", None, None, None, _TRUE)]

    def value_events(self, table: _Table, style: Style, side: Literal["old", "new"], row: str) -> list[_Event]:
        """A child row come or gone, against its parent's key: the attribute's value added or
        removed (type 2 from or to NULL), or in row style or for a value the trigger cannot
        write, a type 8 that has the publisher read the attribute back. A row whose links or
        value are NULL (SQLite allows NULL key columns) is no value of any object."""
        assert table.multi_valued
        attribute, value = table.multi_valued.attribute, table.multi_valued.value
        linked = _all(f"{self.ref(row, c)} IS NOT NULL" for _, c in table.logged_key)
        if not self.logs_multi_value(value, style):
            return [_Event(EventType.UPDATE_FIELD_QUERY_BACK, side, attribute, None, None, linked)]
        ref = self.ref(row, value)
        text_sql = self.as_text(ref, value)
        old, new = (text_sql, None) if side == "old" else (None, text_sql)
        return [_Event(EventType.UPDATE_FIELD, side, attribute, old, new, _all([linked, f"{ref} IS NOT NULL"]))]

    def logs_multi_value(self, value: _Column, style: Style) -> bool:
        """Whether a child's rows log their values; if not, they log query-backs, one per
        parent object an update statement changes."""
        return style == "field" and self.logs_value(value)

    def event_values(self, table: _Table, event: _Event, key_sql: str) -> dict[str, str]:
        return {
            "type_sql": str(int(event.event_type)),
            "table_name_sql": _literal(table.logged_name),
            "key_sql": key_sql,
            "column_sql": self.null() if event.column is None else _literal(event.column),
            "old_sql": event.old or self.null(),
            "new_sql": event.new or self.null(),
        }


class _SQLite(_Dialect):
    """Three triggers per table; every event is one INSERT guarded by its condition.

    SQLite checks a key's uniqueness row by row, so no statement can hand one row's key to
    another and the row triggers' order is the changes' order."""

    name = "sqlite"

    def logs_value(self, column: _Column) -> bool:
        return column.value_type is not ValueType.OCTET

    def changed(self, column: _Column, old: str, new: str) -> str:
        return self._compare_text(column, old, "IS NOT", new)

    def _compare_text(self, column: _Column, old: str, operator: str, new: str) -> str:
        """`IS` on values compares 1 and 1.0 equal, and text by the column's collation (NOCASE,
        RTRIM): the texts are compared, byte for byte."""
        old_text = self.as_text(self.ref(old, column), column)
        new_text = self.as_text(self.ref(new, column), column)
        return f"{old_text} COLLATE BINARY {operator} {new_text} COLLATE BINARY"

    def key_changed(self, table: _Table) -> str:
        return _any(self._compare_text(c, "OLD", "IS NOT", "NEW") for c in table.key)

    def key_kept(self, table: _Table) -> str:
        return _all(self._compare_text(c, "OLD", "IS", "NEW") for c in table.key)

    def check(self, table: _Table) -> None:
        for _, column in table.logged_key:
            if column.value_type is ValueType.OCTET:
                raise CaptureError(
                    f"table {table.name!r}: binary key column {column.name!r} cannot be written "
                    "in a table_key on SQLite, which has no base64 function"
                )

    def key_sql(self, table: _Table, row: Literal["OLD", "NEW"]) -> str:
        parts = []
        for name, column in table.logged_key:
            ref = self.ref(row, column)
            if column.value_type is ValueType.INT:
                value = f"CAST({ref} AS TEXT)"
            else:
                value = self.render("key_value", value=ref)
            parts.append(f"{_literal(name + '=')} || {value}")
        return " || '+' || ".join(parts)

    def moved_events(self, table: _Table, style: Style) -> list[_Event]:
        """The events of an update that changed the key (a child's: its links or value): the old
        row's, then the new row's. A child's query-backs name the parent object, so the new
        row's is logged only for another parent than the old row's."""
        gone, come = self.delete_events(table, style), self.insert_events(table, style)
        if table.multi_valued and not self.logs_multi_value(table.multi_valued.value, style):
            other = _any(self.changed(c, "OLD", "NEW") for _, c in table.logged_key)
            come = [dataclasses.replace(e, condition=_all([other, e.condition])) for e in come]
        return gone + come

    def trigger_sql(self, table: _Table, style: Style) -> list[str]:
        changed = self.key_changed(table)
        kept = self.key_kept(table)
        moved = [
            dataclasses.replace(e, condition=_all([changed, e.condition]))
            for e in self.moved_events(table, style)
        ]
        updates = [
            dataclasses.replace(e, condition=_all([kept, e.condition]))
            for e in self.update_events(table, style)
        ]
        triggers = {
            "INSERT": self.insert_events(table, style),
            "UPDATE": moved + updates,
            "DELETE": self.delete_events(table, style),
        }
        statements = []
        for operation, events in triggers.items():
            suffix = SQLITE_TRIGGER_SUFFIXES[operation]
            trigger = self.quote(sqlite_trigger_name(table.name, suffix))
            body = _indent("\n".join(self.log_event(table, e) for e in events), 4)
            statements.append(self.render("drop_trigger", trigger=trigger))
            statements.append(
                self.render(
                    "create_trigger",
                    trigger=trigger,
                    operation=operation,
                    table=self.quote(table.name),
                    body=body,
                )
            )
        return statements

    def log_event(self, table: _Table, event: _Event) -> str:
        key_sql = self.key_sql(table, "OLD" if event.key == "old" else "NEW")
        return self.render(
            "log_event",
            condition=event.condition,
            **self.event_log_fields(),
            **self.event_values(table, event, key_sql),
        )


class _PostgreSQL(_Dialect):
    """Per table: a row trigger and its plpgsql function for inserts and deletes (field events
    in one INSERT per row), and a statement trigger and its function for updates."""

    name = "postgresql"

    def quote(self, name: str) -> str:
        """Every identifier quoted: PL/pgSQL reads some names SQL leaves bare (`NEW.by`,
        `NEW.loop`, `NEW.strict`) as its own keywords."""
        return '"' + name.replace('"', '""') + '"'

    def event_log_ddl(self) -> list[str]:
        return super().event_log_ddl() + [
            self.render("event_log_transaction", **self.event_log_fields()),
            self.render("key_value_function", function=self.qualify(KEY_VALUE_FUNCTION)),
        ]

    def null(self) -> str:
        return "NULL::text"

    def changed(self, column: _Column, old: str, new: str) -> str:
        return f"{self._published(old, column)} IS DISTINCT FROM {self._published(new, column)}"

    def _published(self, row: str, column: _Column) -> str:
        """What tells two values' published texts apart: the text itself, byte for byte (the
        type's equality calls 1.5 and 1.50, or 'alice' and 'Alice' under a case-insensitive
        collation, equal); a binary value's bytes, which its base64 spells one to one."""
        ref = self.ref(row, column)
        if column.value_type is ValueType.OCTET:
            return ref
        return f'{self.as_text(ref, column)} COLLATE "C"'

    def key_sql(self, table: _Table, row: str) -> str:
        return self._key_text(table.logged_key, row)

    def identity_sql(self, table: _Table, row: str) -> str:
        """What pairs an UPDATE statement's old and new rows: the logged key, or for a child
        row its key, links and value, since its values are a set: a row whose link or value
        changed is a value removed and another added."""
        if table.multi_valued is None:
            return self.key_sql(table, row)
        return self._key_text(tuple((c.name, c) for c in table.key), row)

    def _key_text(self, parts: Sequence[tuple[str, _Column]], row: str) -> str:
        function = self.qualify(KEY_VALUE_FUNCTION)
        texts = []
        for name, column in parts:
            text = self.as_text(self.ref(row, column), column)
            value = text if column.value_type is ValueType.INT else f"{function}({text})"
            texts.append(f"{_literal(name + '=')} || {value}")
        return " || '+' || ".join(texts)

    def check(self, table: _Table) -> None:
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

    def trigger_sql(self, table: _Table, style: Style) -> list[str]:
        table_sql = self.qualify(table.name)
        row_trigger = postgresql_trigger_name(table.name)
        update_trigger = self.quote(postgresql_update_trigger_name(table.name))
        row_function = self.qualify(f"{table.name}_publisher_log")
        update_function = self.qualify(_postgresql_name(table.name, "_publisher_log_upd"))
        settings = function_settings_sql(self.name)
        inserted = self.insert_events(table, style)
        on_row = self.render(
            "trigger_function",
            function=row_function,
            old_key=self.key_sql(table, "OLD"),
            new_key=self.key_sql(table, "NEW"),
            on_insert=_indent(self.log_events(table, inserted), 8),
            on_delete=_indent(self.log_events(table, self.delete_events(table, style)), 8),
            settings=settings,
        )
        on_update = self.render(
            "update_function",
            function=update_function,
            row_trigger=_literal(_postgresql_identifier(row_trigger)),
            on_update=_indent(self.log_update(table, style), 4),
            settings=settings,
        )
        return [
            self.render("drop_trigger", trigger=self.quote(row_trigger), table=table_sql),
            self.render("drop_trigger", trigger=update_trigger, table=table_sql),
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
        ]

    def log_update(self, table: _Table, style: Style) -> str:
        """One INSERT per kind of key an UPDATE statement leaves: removed, kept, added.

        Old and new rows are paired by their table_key's text, byte for byte: a key its type
        calls equal but spells otherwise ('alice' and 'Alice' under a case-insensitive
        collation) names another object for the consumer. A child table's rows are paired by
        their whole identity (`identity_sql`), so none is kept: values are removed, then added."""
        old_rows, new_rows = self.quote(POSTGRESQL_OLD_ROWS), self.quote(POSTGRESQL_NEW_ROWS)
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
                old_only=_all([gone_event.condition, old_only]), new_only=_all([come_event.condition, new_only]),
            )
            kinds = [(parents, _TRUE, "_k.k", [dataclasses.replace(come_event, condition=_TRUE)])]
        else:
            kinds = [
                (f"{old_rows} AS _o", old_only, old_key, gone),
                (f"{old_rows} AS _o JOIN {new_rows} AS _n ON {same}", _TRUE, new_key,
                 self.update_events(table, style, "_o", "_n")),
                (f"{new_rows} AS _n", new_only, new_key, come),
            ]
        return "\n".join(
            self.render(
                "log_rows",
                rows=rows,
                condition=_all(["v.logged", condition]),
                fields=self._values(events),
                table_name_sql=_literal(table.logged_name),
                key_sql=key_sql,
                **self.event_log_fields(),
            )
            for rows, condition, key_sql, events in kinds
            if events
        )

    def _values(self, events: Sequence[_Event]) -> str:
        """The rows (position, event_type, column_name, logged, old_text, new_text) of events."""
        return ",\n".join(
            f"    ({position}, {int(e.event_type)}, "
            f"{self.null() if e.column is None else _literal(e.column)}, {e.condition}, "
            f"{e.old or self.null()}, {e.new or self.null()})"
            for position, e in enumerate(events, 1)
        )

    def log_events(self, table: _Table, events: Sequence[_Event]) -> str:
        return "\n".join(self._statements(table, events))

    def _statements(self, table: _Table, events: Sequence[_Event]) -> Iterator[str]:
        """Consecutive field events of one key share one INSERT; the event order is kept."""
        runs = itertools.groupby(events, lambda e: (e.column is not None, e.key))
        for (is_field, key), group in runs:
            key_sql = "_old_key" if key == "old" else "_new_key"
            if is_field:
                rows = ",\n".join(
                    f"    ({int(e.event_type)}, {_literal(e.column or '')}, {e.condition}, "
                    f"{e.old or self.null()}, {e.new or self.null()})"
                    for e in group
                )
                yield self.render(
                    "log_fields",
                    fields=rows,
                    table_name_sql=_literal(table.logged_name),
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
