"""The published tables as capture sees them: reflected columns and keys, logical classes' child
tables, and the events a trigger may log."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

from sqlalchemy import Engine
from sqlalchemy import types as sqltypes

from publisher.config import ClassConfig, Config
from publisher.dialects.reflection import reflection
from publisher.model.catalog import check_link, column_info
from publisher.model.events import EventType
from publisher.model.keys import writable_key_column
from publisher.model.logical import LogicalClassError, child_links, child_of, class_config
from publisher.model.values import ValueType, value_type_of

Style = Literal["field", "row"]
STYLES: tuple[Style, ...] = ("field", "row")
_TABLE_KEY_SPECIALS = ",;'+\"=\\<>"


class CaptureError(ValueError):
    """Capture cannot be installed as asked: a missing table, no primary key, an unknown style."""


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    sql_type: sqltypes.TypeEngine
    value_type: ValueType


@dataclasses.dataclass(frozen=True)
class MultiValued:
    """What a child table's rows are: values of an attribute of their parent's object."""

    attribute: str
    value: Column
    parent: str
    parent_key: tuple[tuple[str, Column], ...]
    """(the parent's key column, the child's column holding it), in the parent's key order."""


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    key: tuple[Column, ...]
    """Key columns in primary-key order: what tells the table's rows apart."""
    values: tuple[Column, ...]
    multi_valued: MultiValued | None = None
    """Set for a child table of a logical class, whose rows are logged against the parent."""

    @property
    def logged_name(self) -> str:
        """The table_name of the table's events: the parent's for a child table."""
        return self.multi_valued.parent if self.multi_valued else self.name

    @property
    def logged_key(self) -> tuple[tuple[str, Column], ...]:
        """(name, column) of each part of the events' table_key, in order: a child's links, as
        the parent's key columns."""
        if self.multi_valued:
            return self.multi_valued.parent_key
        return tuple((c.name, c) for c in self.key)


@dataclasses.dataclass(frozen=True)
class Event:
    """One event a trigger may log; SQL expressions refer to OLD/NEW, ``key`` names whose key."""

    event_type: EventType
    key: Literal["old", "new"]
    column: str | None
    old: str | None
    new: str | None
    condition: str


def captured(config: Config, engine: Engine, schema: str | None, table: str) -> list[Table]:
    """The tables whose triggers capture the named one: itself, and a class's child tables."""
    child = child_of(config.classes, table)
    parent = reflect(engine, schema, child.class_name if child else table)
    cls = child.cls if child else class_config(config.classes, parent.name)
    children = class_children(engine, schema, parent, cls) if cls else []
    return children if child else [parent, *children]


def class_children(engine: Engine, schema: str | None, parent: Table, cls: ClassConfig) -> list[Table]:
    """The class's child tables, each logging its rows as values of its attribute."""
    dialect = engine.dialect.name
    children = []
    try:
        for link in child_links(reflection(engine, schema), schema, parent.name, [c.name for c in parent.key], cls):
            child = reflect(engine, schema, link.table, named_in_key=False)
            columns = {c.name: c for c in (*child.key, *child.values)}
            parent_key = tuple((k.name, columns[c]) for k, c in zip(parent.key, link.links, strict=True))
            for (name, column), key in zip(parent_key, parent.key, strict=True):
                check_link(link, column_info(name, key.sql_type, dialect), column_info(column.name, column.sql_type,
                                                                                       dialect))
            multi_valued = MultiValued(link.attribute, columns[link.value], parent.name, parent_key)
            children.append(dataclasses.replace(child, multi_valued=multi_valued))
    except LogicalClassError as exc:
        raise CaptureError(str(exc)) from None
    return children


def reflect(engine: Engine, schema: str | None, table: str, named_in_key: bool = True) -> Table:
    """The table's columns and key; ``named_in_key``: its key columns' names are written in
    table_keys (a child table's are not: it logs its parent's)."""
    inspector = reflection(engine, schema)
    where = f"schema {schema}" if schema else "the database"
    tables = inspector.get_table_names(schema=schema)
    views = inspector.get_view_names(schema=schema)
    name = resolve(table, tables)
    if name is None:
        if resolve(table, views) is not None:
            raise CaptureError(
                f"{table!r} is a view in {where}; capture triggers go on its base tables"
            )
        raise CaptureError(f"table {table!r} does not exist in {where}")
    columns = {
        c["name"]: Column(c["name"], c["type"], value_type_of(c["type"]))
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
    return Table(
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


def resolve(name: str, names: Iterable[str]) -> str | None:
    """The exact name if present, else the one name that matches it ignoring case."""
    names = list(names)
    if name in names:
        return name
    matches = [n for n in names if n.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def dollar_tag(texts: Iterable[str]) -> str:
    """A tag for a dollar-quoted body (`$tag$ ... $tag$`) that none of the texts put in it
    holds: a table or column may be named `a$$b`, which would end a body quoted by `$$`."""
    held = list(texts)
    tag, more = "publisher", 0
    while any(f"${tag}$" in text for text in held):
        more += 1
        tag = f"publisher_{more}"
    return tag
