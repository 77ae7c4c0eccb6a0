"""Where in the event log each published table's shape begins (`model.shapes`), kept beside it
in `<event_log>_shapes`: a row per install, per reinstall after a migration, and where an event
trigger follows migrations (`Capture.may_follow`) per migration, in the migration's own transaction.

The row's record_id divides the table's events exactly where the capture changes under a lock
that keeps the application's writes of the table out: where DDL is transactional, in the
install's transaction after its trigger statements, or in the migration's, past the last value of
the event log's sequence; or by one writer at a time. Where trigger statements commit one by one,
the row is taken before them: a write that comes between counts with the new shape, whose columns
carry all it logs. Each family's capture says which is its own.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import BigInteger, DateTime, Engine, MetaData, String, Text, select
from sqlalchemy import Column as SqlColumn
from sqlalchemy import Table as SqlTable

from publisher.capture.base import literal
from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.dialects.reflection import reflection
from publisher.model.catalog import PublishedTables, reflect_catalog
from publisher.model.shapes import ShapeRecord, columns_from_json, columns_json

SHAPES_TABLE_SUFFIX = "_shapes"


def shapes_table(event_log: str, schema: str | None, metadata: MetaData | None = None) -> SqlTable:
    return SqlTable(
        f"{event_log}{SHAPES_TABLE_SUFFIX}", metadata or MetaData(),
        SqlColumn("table_name", String(255), primary_key=True),
        SqlColumn("from_record_id", BigInteger, primary_key=True, autoincrement=False),
        SqlColumn("columns", Text),
        SqlColumn("recorded_at", DateTime(timezone=True), nullable=False),
        schema=schema,
        quote=True,
        quote_schema=True,
    )


def next_record_id_sql(config: Config, engine: Engine, qualify: Any) -> str:
    """SQL of a record_id above every event logged so far and at most that of the next
    (`Dialect.next_record_id_sql`). Taken where the table's writers are held off (its capture
    replaced, or altered), every event of the table after it gets a higher record_id."""
    name = config.event_log.columns.record_id
    return dialect_of(engine).next_record_id_sql(qualify(config.event_log.table),
                                                 engine.dialect.identifier_preparer.quote(name), name)


def shape_record_sql(config: Config, engine: Engine, published_as: str, qualify: Any) -> list[str]:
    """Statements that record `published_as`'s shape now, from the next event on, in place of
    any record that no event follows yet; none for what the catalog does not publish (a child
    table of a logical class)."""
    schema = table_schema(config, engine)
    # A class's own columns are its table's: its child tables and references are not its shape.
    catalog = reflect_catalog(engine, schema, PublishedTables((published_as,), configured=True))
    table = catalog.tables.get(published_as) or next(
        (t for name, t in catalog.tables.items() if name.lower() == published_as.lower()), None)
    if table is None:
        return []
    target = qualify(f"{config.event_log.table}{SHAPES_TABLE_SUFFIX}")
    record_id = engine.dialect.identifier_preparer.quote(config.event_log.columns.record_id)
    name = literal(table.name)
    return [
        f"DELETE FROM {target} WHERE table_name = {name} AND from_record_id > "
        f"(SELECT COALESCE(MAX({record_id}), 0) FROM {qualify(config.event_log.table)})",
        f"INSERT INTO {target} (table_name, from_record_id, columns, recorded_at) "
        f"SELECT {name}, {next_record_id_sql(config, engine, qualify)}, {literal(columns_json(table))}, "
        f"CURRENT_TIMESTAMP",
    ]


def recorded_shapes(config: Config, engine: Engine) -> Mapping[str, list[ShapeRecord]]:
    """Every table's shape records, oldest first; none before the first install that keeps them.
    A record that cannot be read counts as one that could not tell the columns."""
    schema = table_schema(config, engine)
    target = shapes_table(config.event_log.table, schema)
    if not reflection(engine, schema).has_table(target.name, schema=schema):
        return {}
    with engine.connect() as conn:
        rows = conn.execute(select(target.c.table_name, target.c.from_record_id, target.c.columns)
                            .order_by(target.c.table_name, target.c.from_record_id)).all()
    records: dict[str, list[ShapeRecord]] = {}
    for table_name, from_record_id, columns in rows:
        records.setdefault(table_name, []).append(ShapeRecord(int(from_record_id), _columns(columns)))
    return records


def _columns(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return columns_from_json(text)
    except ValueError:
        return None
