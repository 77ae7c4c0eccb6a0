"""What each table's capture was made for, kept beside the event log, so that a migration of a
published table is seen and its capture made anew before the application's writes suffer long.

Triggers name the columns they log. A column dropped or renamed after `install` makes them fail the
application's writes, or the database refuse the migration (each family's capture says which); a
column added is not captured. `install` records, per captured table, the shape it installed for (a
fingerprint of its columns, their types and its key, with the capture style); every cycle compares
the tables with it first and reinstalls the capture of a table that changed (`follow_shapes`);
`publisher install --check` lists them (`stale_captures`). Where an event trigger may follow a
migration (`Capture.may_follow`), it does better, in the migration's own transaction.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import Column as SqlColumn
from sqlalchemy import (
    DateTime,
    Engine,
    MetaData,
    Row,
    String,
    Text,
    delete,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
)
from sqlalchemy import Table as SqlTable
from sqlalchemy.sql.expression import ClauseElement, ColumnElement

from publisher.capture.tables import CaptureError, Style, Table, captured, resolve
from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects.reflection import reflection
from publisher.model.column_types import type_name

CAPTURE_TABLE_SUFFIX = "_capture"


def capture_table(event_log: str, schema: str | None, metadata: MetaData | None = None) -> SqlTable:
    """A row per table carrying capture: what it was installed for. Without `metadata`, the
    same object each time, so that the statements every cycle makes of it are compiled once."""
    if metadata is None:
        return _capture_table(event_log, schema)
    return _new_capture_table(event_log, schema, metadata)


@functools.lru_cache(maxsize=16)
def _capture_table(event_log: str, schema: str | None) -> SqlTable:
    return _new_capture_table(event_log, schema, MetaData())


def _new_capture_table(event_log: str, schema: str | None, metadata: MetaData) -> SqlTable:
    return SqlTable(
        f"{event_log}{CAPTURE_TABLE_SUFFIX}", metadata,
        SqlColumn("table_name", String(255), primary_key=True),
        SqlColumn("published_as", String(255), nullable=False),
        SqlColumn("style", String(8), nullable=False),
        SqlColumn("fingerprint", String(64), nullable=False),
        SqlColumn("columns", Text, nullable=False),
        SqlColumn("follow_shape", Text),
        SqlColumn("follow_triggers", Text),
        SqlColumn("follow_arguments", Text),
        SqlColumn("followed_at", DateTime(timezone=True)),
        SqlColumn("installed_at", DateTime(timezone=True), nullable=False),
        schema=schema,
        quote=True,  # a database whose DDL commits undoes a failed install by the quoted name (`restore`)
        quote_schema=True,
    )


@dataclasses.dataclass(frozen=True)
class Shape:
    """A table as its capture sees it."""

    table: str
    columns: str
    """Its columns, key first, as a reader would name them: ``idu (key), fname, lname``."""
    fingerprint: str


def shape_of(table: Table, style: Style) -> Shape:
    child = table.multi_valued
    described = {
        "style": style,
        "table": table.name,
        "logged_as": table.logged_name,
        "key": [(c.name, type_name(c.sql_type)) for c in table.key],
        "values": [(c.name, type_name(c.sql_type)) for c in table.values],
        "multi_valued": None if child is None else [child.attribute, child.value.name, child.parent,
                                                    [[name, c.name] for name, c in child.parent_key]],
    }
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()
    named = [f"{c.name} (key)" for c in table.key] + [c.name for c in table.values]
    return Shape(table.name, ", ".join(named), digest)


def record_sql(config: Config, engine: Engine, published_as: str, tables: Sequence[Table], style: Style,
               follow: dict[str, tuple[str, str, str]] | None = None) -> list[str]:
    """Statements that record the capture of `tables`, installed as `published_as`, in place of any
    earlier record of them; `follow`: per table, SQL of its shape as the database tells it, the
    names of its triggers and the arguments of its column-blind capture (`Capture.follow_records`)."""
    target = capture_table(config.event_log.table, table_schema(config, engine))
    names = [t.name for t in tables]
    statements: list[ClauseElement] = [
        delete(target).where(target.c.table_name.in_(names) | (target.c.published_as == published_as))
    ]
    for table in tables:
        shape = shape_of(table, style)
        follow_shape, follow_triggers, follow_arguments = (follow or {}).get(table.name, (None, None, None))
        values: dict[str, ColumnElement[Any]] = {
            "table_name": literal(table.name), "published_as": literal(published_as), "style": literal(style),
            "fingerprint": literal(shape.fingerprint), "columns": literal(shape.columns),
            "follow_shape": null() if follow_shape is None else literal_column(follow_shape),
            "follow_triggers": null() if follow_triggers is None else literal_column(follow_triggers),
            "follow_arguments": null() if follow_arguments is None else literal_column(follow_arguments),
            "installed_at": func.current_timestamp(),
        }
        statements.append(insert(target).from_select(list(values), select(*values.values())))
    return [str(s.compile(engine, compile_kwargs={"literal_binds": True})) for s in statements]


def forget_sql(config: Config, engine: Engine, published_as: str) -> list[str]:
    """The statement that removes the record of a capture installed as `published_as`."""
    target = capture_table(config.event_log.table, table_schema(config, engine))
    statement = delete(target).where(target.c.published_as == published_as)
    return [str(statement.compile(engine, compile_kwargs={"literal_binds": True}))]


@dataclasses.dataclass(frozen=True)
class StaleCapture:
    """A table whose capture no longer matches it, and what to say of it."""

    published_as: str
    style: Style
    installed: str
    """The columns its capture was installed for."""
    now: str
    """Its columns now, or why it cannot be captured any more."""
    followed: bool = False
    """The event trigger put the table on its column-blind capture (`Capture.may_follow`)."""

    def describe(self) -> str:
        followed = "; until then its capture followed the migration" if self.followed else ""
        return (f"table {self.published_as!r}: capture installed for columns {self.installed}; "
                f"now {self.now}{followed}")


def recorded_tables(config: Config, engine: Engine) -> set[str]:
    """The tables whose capture `install` recorded, and those they were installed as."""
    return {name for row in _records(config, engine) for name in (row.table_name, row.published_as)}


def recorded_families(config: Config, engine: Engine) -> dict[str, tuple[str, ...]]:
    """Per capture, by the name it was installed as (in lower case): the tables it is on, a
    class's child tables beside its parent."""
    families: dict[str, tuple[str, ...]] = {}
    for row in _records(config, engine):
        families[row.published_as.lower()] = (*families.get(row.published_as.lower(), ()), row.table_name)
    return families


def recorded_styles(config: Config, engine: Engine) -> dict[str, Style]:
    """The style each installed table's capture was installed with, by its name in lower case."""
    return {row.published_as.lower(): row.style for row in _records(config, engine)}


def _records(config: Config, engine: Engine) -> list[Row[Any]]:
    schema = table_schema(config, engine)
    target = capture_table(config.event_log.table, schema)
    if not reflection(engine, schema).has_table(target.name, schema=schema):
        return []
    with engine.connect() as conn:
        return list(conn.execute(select(target).order_by(target.c.published_as, target.c.table_name)).all())


def stale_captures(config: Config, engine: Engine, carriers: Callable[[], Iterable[str]],
                   only: Collection[str] | None = None) -> list[StaleCapture]:
    """Every installed table whose capture no longer matches its columns and key, or whose
    capture triggers are all gone (`carriers`: the tables that carry any of them, asked for
    only when a table was installed), as when a
    migration rebuilds a table (create a new one, copy, drop the old, rename). A table gone
    since is left out: nothing of it can be captured, nor break. `only`: of the captures
    installed as these tables (in lower case)."""
    schema = table_schema(config, engine)
    by_table: dict[str, list[Row[Any]]] = {}
    for row in _records(config, engine):
        if only is None or row.published_as.lower() in only:
            by_table.setdefault(row.published_as, []).append(row)
    if not by_table:
        return []
    carrying = {name.lower() for name in carriers()}
    stale = []
    for published_as, records in by_table.items():
        found = _stale(config, engine, schema, published_as, records)
        if found is None and any(r.table_name.lower() not in carrying for r in records):
            found = _uncaptured(config, engine, schema, published_as, records)
        if found is not None:
            stale.append(found)
    return stale


def _uncaptured(config: Config, engine: Engine, schema: str | None, published_as: str,
                records: Sequence[Row[Any]]) -> StaleCapture | None:
    """A table whose record matches it but whose triggers are gone: rebuilt, if it exists."""
    existing = {name.lower() for name in reflection(engine, schema).get_table_names(schema=schema)}
    if not any(r.table_name.lower() in existing for r in records):
        return None
    installed = "; ".join(r.columns for r in records)
    return StaleCapture(published_as, records[0].style, installed,
                        "its capture triggers are gone (was it dropped and created again?)")


def _stale(config: Config, engine: Engine, schema: str | None, published_as: str,
           records: Sequence[Row[Any]]) -> StaleCapture | None:
    style: Style = records[0].style
    installed = "; ".join(r.columns if len(records) == 1 else f"{r.table_name}: {r.columns}" for r in records)
    followed = any(r.followed_at is not None for r in records)
    if resolve(published_as, reflection(engine, schema).get_table_names(schema=schema)) is None:
        return None
    try:
        shapes = [shape_of(t, style) for t in captured(config, engine, schema, published_as)]
    except CaptureError as exc:
        return StaleCapture(published_as, style, installed, f"it cannot be captured: {exc}", followed)
    if {(s.table, s.fingerprint) for s in shapes} == {(r.table_name, r.fingerprint) for r in records} \
            and not followed:
        return None
    now = "; ".join(s.columns if len(shapes) == 1 else f"{s.table}: {s.columns}" for s in shapes)
    return StaleCapture(published_as, style, installed, now, followed)
