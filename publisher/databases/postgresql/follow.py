"""PostgreSQL: capture that follows a migration in the migration's own transaction.

A table's own capture names its columns, so a migration that drops or renames one would make it
fail the application's next INSERT or UPDATE. An event trigger at the end of every ALTER TABLE
(sql/postgresql/follow_event_trigger.sql) moves each captured table whose shape the command
changed onto one column-blind capture function (follow_function.sql), which reads the table's
columns and key from the catalog and logs what the table's own capture would for its shape now,
at the price of a dynamic statement per trigger call. The publisher's next cycle sees the table
marked followed and reinstalls its own capture for the new shape (`shape.stale_captures`), so a
table pays that price from the migration to the next cycle only. The two are held equal by a
test over the statements and types the capture tests use.

Only a superuser may create event triggers; without one `install` says so, and the cycle's
comparison is all there is, as on MariaDB and SQLite.
"""
from __future__ import annotations

import abc
import hashlib
import logging
from collections.abc import Collection, Sequence

from sqlalchemy import text

from publisher.capture.base import Capture, literal
from publisher.capture.shape import CAPTURE_TABLE_SUFFIX
from publisher.capture.shape_history import SHAPES_TABLE_SUFFIX, next_record_id_sql
from publisher.capture.tables import Style, Table
from publisher.databases.postgresql.dialect import function_settings_sql
from publisher.databases.postgresql.names import (
    KEY_VALUE_FUNCTION,
    POSTGRESQL_NAME_BYTES,
    POSTGRESQL_NEW_ROWS,
    POSTGRESQL_OLD_ROWS,
    postgresql_identifier,
    postgresql_trigger_name,
    postgresql_truncate_trigger_name,
    postgresql_update_trigger_name,
)

log = logging.getLogger("publisher")

FOLLOW_FUNCTIONS = ("shape", "key", "events", "capture", "table", "migration")


def may_follow(dialect: Capture) -> bool:
    """Whether the connected user may create event triggers (PostgreSQL: superusers only)."""
    with dialect.engine.connect() as conn:
        return bool(conn.execute(text("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user"))
                    .scalar())


def follow_ddl(dialect: Capture) -> list[str]:
    """The functions of column-blind capture and the event trigger that applies them."""
    name = _names(dialect)
    schema = dialect.schema or _current_schema(dialect)
    return [
        dialect.render("follow_shape_function", function=name["shape"]),
        dialect.render("follow_key_function", function=name["key"],
                       key_value_literal=literal(dialect.qualify(KEY_VALUE_FUNCTION))),
        dialect.render("follow_events_function", function=name["events"]),
        dialect.render(
            "follow_function", function=name["capture"], key_function=name["key"], events_function=name["events"],
            settings=function_settings_sql(), old_rows=dialect.quote(POSTGRESQL_OLD_ROWS),
            new_rows=dialect.quote(POSTGRESQL_NEW_ROWS), **dialect.event_log_fields(),
        ),
        dialect.render(
            "follow_table_function", function=name["table"], follow_function_literal=literal(name["capture"]),
            old_rows_literal=literal(POSTGRESQL_OLD_ROWS), new_rows_literal=literal(POSTGRESQL_NEW_ROWS),
        ),
        dialect.render(
            "follow_event_trigger", function=name["migration"], capture=_capture_table(dialect),
            shape_function=name["shape"], follow_table=name["table"], schema_literal=literal(schema),
            shapes=dialect.qualify(f"{dialect.config.event_log.table}{SHAPES_TABLE_SUFFIX}"),
            next_record_id=next_record_id_sql(dialect.config, dialect.engine, dialect.qualify),
        ),
        dialect.render("drop_event_trigger", trigger=dialect.quote(event_trigger_name(schema, dialect))),
        dialect.render("create_event_trigger", trigger=dialect.quote(event_trigger_name(schema, dialect)),
                       function=name["migration"]),
    ]


def follow_record(dialect: Capture, table: Table, style: Style) -> tuple[str, str, str]:
    """What the event trigger needs of a table, for `shape.record_sql`, each as SQL: its shape
    now, its triggers' names and the arguments of its column-blind capture (lists of literals).
    A child table's links are given by attnum, which a rename keeps."""
    relation = f"{literal(dialect.qualify(table.name))}::regclass"
    triggers = (postgresql_identifier(postgresql_trigger_name(table.name)),
                postgresql_update_trigger_name(table.name), postgresql_truncate_trigger_name(table.name))
    arguments = [literal(triggers[0]), literal(table.logged_name), literal(style)]
    child = table.multi_valued
    arguments.append(literal("" if child is None else child.attribute))
    for name, column in child.parent_key if child else ():
        attnum = (f"(SELECT attnum::text FROM pg_catalog.pg_attribute "
                  f"WHERE attrelid = {relation} AND attname = {literal(column.name)})")
        arguments += [literal(name), attnum]
    listed = ", ".join(f"quote_literal({a})" for a in arguments)
    return (f"{_names(dialect)['shape']}({relation})", literal(", ".join(map(literal, triggers))),
            f"concat_ws(', ', {listed})")


def event_trigger_name(schema: str, dialect: Capture) -> str:
    """Event triggers are the database's, not a schema's: one per event log, named after both."""
    owner = f"{schema}.{dialect.config.event_log.table}"
    digest = hashlib.sha256(owner.encode("utf-8")).hexdigest()[:8]
    prefix = f"publisher_follow_{digest}_"
    room = POSTGRESQL_NAME_BYTES - len(prefix)
    return prefix + dialect.config.event_log.table.encode("utf-8")[:room].decode("utf-8", errors="ignore")


def _names(dialect: Capture) -> dict[str, str]:
    log = dialect.config.event_log.table
    return {role: dialect.qualify(postgresql_identifier(f"{log}_follow_{role}")) for role in FOLLOW_FUNCTIONS}


def _capture_table(dialect: Capture) -> str:
    return dialect.qualify(f"{dialect.config.event_log.table}{CAPTURE_TABLE_SUFFIX}")


def _current_schema(dialect: Capture) -> str:
    with dialect.engine.connect() as conn:
        return str(conn.execute(text("SELECT current_schema()")).scalar_one())


class FollowingCapture(Capture, abc.ABC):
    """A capture that an event trigger keeps working through a migration (`PostgreSQLCapture`),
    where the user may create one."""

    def may_follow(self) -> bool:
        return may_follow(self)

    def follow_ddl(self) -> list[str]:
        if self.may_follow():
            return follow_ddl(self)
        log.warning(
            "the database user may not create event triggers (PostgreSQL: superusers only): a migration "
            "run without `publisher migrate` that drops or renames a published column fails the application's "
            "writes until the table's capture is made anew: by the publisher's next cycle where its user owns "
            "the table, else by `publisher install --table T` as the owner; see the documentation, \"Migrations\""
        )
        return []

    def follow_records(self, tables: Sequence[Table], style: Style,
                       on_native: Collection[str]) -> dict[str, tuple[str, str, str]] | None:
        """The native capture names no column: a migration leaves it working, with nothing to follow."""
        if not self.may_follow():
            return None
        return {t.name: follow_record(self, t, style) for t in tables if t.name not in on_native}
