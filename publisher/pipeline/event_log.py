"""The event log table as the cycle reads it: its columns by role, the transaction column the
triggers write where there is one, and the exact comparison its text columns must have."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    MetaData,
    Table,
)

from publisher.config import EVENT_LOG_COLUMNS, Config, ConfigError, EventLogColumns
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.dialects.reflection import reflection


@dataclass(frozen=True)
class EventLogSource:
    """The event log as a cycle finds it, resolved once per cycle: where it is, the columns of
    its roles, and the column of transaction ids where the triggers write one."""

    url: str
    name: str
    schema: str | None
    columns: EventLogColumns
    transaction_column: str | None

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.columns.in_order()

    @functools.cached_property
    def table(self) -> Table:
        """The ten columns of its roles (one Table, so that statements built of it name one table)."""
        return event_log_table_of(self.name, self.column_names, self.schema)

    @functools.cached_property
    def with_transaction(self) -> Table:
        """Its columns and the transaction column, where it has one."""
        extra = () if self.transaction_column is None else (self.transaction_column,)
        return event_log_table_of(self.name, self.column_names + extra, self.schema)


def event_log_source(config: Config, engine: Engine) -> EventLogSource:
    """The configured event log as the database holds it; refused where its text columns do not
    compare byte for byte (`require_exact_comparison`)."""
    schema = table_schema(config, engine)
    require_exact_comparison(engine, config, schema)
    return EventLogSource(config.database.sqlalchemy_url(), config.event_log.table, schema, config.event_log.columns,
                          logged_transaction_column(engine, config, schema))


def event_log_table(config: Config, schema: str | None) -> Table:
    """The event log as SQLAlchemy sees it: configured names, no assumptions about types."""
    return event_log_table_of(config.event_log.table, config.event_log.columns.in_order(), schema)


def event_log_table_of(name: str, columns: tuple[str, ...], schema: str | None) -> Table:
    return Table(name, MetaData(), *(Column(n) for n in columns), schema=schema)


def role_columns(table: Table, columns: tuple[str, ...]) -> dict[str, Column[Any]]:
    return {role: table.c[name] for role, name in zip(EVENT_LOG_COLUMNS, columns, strict=True)}


def require_exact_comparison(engine: Engine, config: Config, schema: str | None) -> None:
    """Where text compares by a collation (`Dialect.inexact_text_columns`): the event log's status
    and table_name compare byte for byte. `install` makes them so; an event log a site made itself
    may have the server's default collation, case-insensitive, under which `status = 'N'` also
    reads a site's own 'n' rows and writes them S, and requeue's `--table usr` also takes 'USR'."""
    names = config.event_log.columns
    found = dialect_of(engine).inexact_text_columns(engine, schema, config.event_log.table,
                                                    (names.status, names.table_name))
    for column, column_type, collation in found[:1]:
        raise ConfigError(
                f"event log {config.event_log.table}: column {column} has the collation {collation}, which calls "
                "'N' and 'n' (or 'usr' and 'USR') equal; the publisher compares them byte for byte: "
                f"ALTER TABLE {config.event_log.table} MODIFY {column} {column_type} COLLATE utf8mb4_bin "
                "(keeping its NOT NULL and default), as `publisher install` creates it"
            )


def logged_transaction_column(engine: Engine, config: Config, schema: str | None) -> str | None:
    """The configured transaction_id column's actual name, or None where the event log has none
    (an event log made before the column existed, or by a site's own DDL)."""
    wanted = config.event_log.columns.transaction_id
    names = [c["name"] for c in reflection(engine, schema).get_columns(config.event_log.table, schema=schema)]
    if wanted in names:
        return wanted
    return next((n for n in names if n.lower() == wanted.lower()), None)
