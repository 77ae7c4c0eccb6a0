"""The capture side: the event log table and the triggers that fill it (docs/concepts/event-log.md,
keys-and-values.md and event-types.md).

SQL lives in each database's folder, ``publisher/databases/<name>/sql/*.sql``, as
``string.Template`` text; each family's capture (`Dialect.capture`, on `dialect` and `rows`) fills
identifiers (quoted by the dialect), literals and expressions in for the published tables `tables`
reflects. This module is the public face: what to install, where, and which tables carry triggers.

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

Each family's capture says how its triggers get there (its module's docstring): an UPDATE
logged per statement, its old and new rows paired by table_key, or row triggers that check keys
row by row; a binary value the triggers cannot spell logged as a field query-back event (type 7
on insert, 8 on update) without values, which the publisher reads back and base64-encodes; and
where no transaction id a trigger can read is reliable, a transaction_id that names the
statement, which the cycle's window keeps together as it keeps a transaction.

Logical classes (`model.logical`): a class's child tables get triggers with its parent's.
A child row is a value of the attribute, logged against the parent's table and key (spelled
as the parent's triggers spell it): a type 2 without an old value when it comes, without a new
value when it goes; its key is its links and value, so changing either is a removal and an
addition (a capture that pairs a statement's rows by that key logs nothing for a swap). Row
style, or a binary value logged as a query-back: a type 8 of the attribute, one per parent an
update changes.
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from publisher.capture.base import capture_of
from publisher.capture.resyncs import owe_resync_sql, resyncs_kept, resyncs_table
from publisher.capture.shape import (
    StaleCapture,
    capture_table,
    forget_sql,
    record_sql,
    recorded_styles,
    recorded_tables,
    stale_captures,
)
from publisher.capture.shape_history import shape_record_sql, shapes_table
from publisher.capture.tables import STYLES, CaptureError, Style, Table, captured
from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects.reflection import reflection
from publisher.model.catalog import PublishedTables
from publisher.model.logical import child_of, child_tables

log = logging.getLogger("publisher")

__all__ = [
    "STYLES",
    "CaptureError",
    "Style",
    "event_log_ddl",
    "install_capture",
    "published_tables",
    "subscription_ddl",
    "trigger_sql",
    "triggered_tables",
]


def triggered_tables(config: Config, engine: Engine) -> tuple[str, ...]:
    """The tables of the configured schema that carry this project's capture triggers.

    They are what is published when ``publisher.tables`` is empty: found by the names this
    module gives the triggers, so installing capture on a table is what puts it on the list.
    A configured child table is not listed: it is no class, its triggers log its parent's.
    """
    children = child_tables(config.classes)
    return tuple(t for t in capture_carriers(config, engine) if t.lower() not in children)


def capture_carriers(config: Config, engine: Engine, any_trigger: bool = False) -> tuple[str, ...]:
    """The tables carrying capture triggers (`Capture.carriers`)."""
    with engine.connect() as conn:
        return capture_of(config, engine).carriers(conn, any_trigger)


def published_tables(config: Config, engine: Engine) -> PublishedTables:
    """The allow-list of a cycle: ``publisher.tables`` when set, else the triggered tables;
    never a configured child table, whose rows are published as their parent's values."""
    if config.publisher.tables:
        children = child_tables(config.classes)
        names = tuple(t for t in config.publisher.tables if t.lower() not in children)
        return PublishedTables(names, configured=True)
    return PublishedTables(triggered_tables(config, engine), configured=False)


def event_log_ddl(config: Config, engine: Engine) -> list[str]:
    """Statements that create the event log (and its helpers) unless it exists already."""
    return capture_of(config, engine).event_log_ddl()


def subscription_ddl(config: Config, engine: Engine) -> list[str]:
    """The subscribers' state tables (`subscriber_tables`), and the indexes a check-out finds its
    events by (`Capture.subscription_indexes`: by their transaction, where it goes by them)."""
    from sqlalchemy import MetaData
    from sqlalchemy.schema import CreateIndex, CreateTable

    from publisher.subscriptions.tables import checkin_table, require_check_outs, subscriber_table

    require_check_outs(engine.dialect.name)
    schema = table_schema(config, engine)
    metadata = MetaData()
    log = config.event_log.table
    tables = [subscriber_table(log, schema, metadata), checkin_table(log, schema, metadata)]
    statements = [str(CreateTable(t, if_not_exists=True).compile(engine)) for t in tables]
    statements += [str(CreateIndex(i, if_not_exists=True).compile(engine)) for t in tables for i in t.indexes]
    return statements + capture_of(config, engine).subscription_indexes()


def trigger_sql(config: Config, engine: Engine, table: str, style: Style, native: bool = False) -> list[str]:
    """Statements that (re)install the capture triggers of one table, replacing any earlier ones:
    for a logical class's parent, those of its child tables too; for a child table, its own as
    a child of its class; and the record of what they were installed for (`shape`). `native`:
    the family's C capture (`has_native_capture`) on every table but a class's child tables."""
    _check_style(style, table)
    dialect = capture_of(config, engine)
    statements = []
    tables = captured(config, engine, dialect.schema, table)
    on_native = set()
    for reflected in tables:
        dialect.check(reflected)
        if native and dialect.has_native_capture and reflected.multi_valued is None:
            statements += dialect.native_trigger_sql(reflected, style)
            on_native.add(reflected.name)
        else:
            statements += dialect.trigger_sql(reflected, style)
    records = record_sql(config, engine, table, tables, style, dialect.follow_records(tables, style, on_native))
    shape = shape_record_sql(config, engine, table, dialect.qualify)
    if not dialect.transactional_ddl:  # its trigger statements commit one by one (`shape_history`)
        return shape + statements + records
    return statements + records + shape


def capture_ddl(config: Config, engine: Engine) -> list[str]:
    """The record of what each table's capture was installed for; where the database and the
    user allow it, the capture that follows migrations (`Capture.follow_ddl`)."""
    from sqlalchemy.schema import CreateTable

    schema = table_schema(config, engine)
    log_name = config.event_log.table
    targets = (capture_table(log_name, schema), shapes_table(log_name, schema), resyncs_table(log_name, schema))
    statements = [str(CreateTable(target, if_not_exists=True).compile(engine)) for target in targets]
    return statements + capture_of(config, engine).follow_ddl()


def reinstall_capture(config: Config, engine: Engine, table: str, style: Style) -> None:
    """Install one table's capture again, for its shape now: native where it was, and switched
    off where it was (as its family's capture switches a table off: `kept_switches`)."""
    _execute(config, engine, reinstall_sql(config, engine, table, style))


def reinstall_sql(config: Config, engine: Engine, table: str, style: Style) -> list[str]:
    """The statements of `reinstall_capture`."""
    natives = installed_native(config, engine)
    moved = moved_captures(config, engine)
    recorded = recorded_styles(config, engine)  # as it is now: an earlier reinstall may have adopted the table
    style = _carried_style(moved, recorded, table) or recorded.get(table.lower(), style)
    statements = _taking_over(config, engine, moved, table, natives)
    statements += trigger_sql(config, engine, table, style, table.lower() in natives)
    return statements + capture_of(config, engine).kept_switches(table)


def on_native_alone(config: Config, engine: Engine, found: StaleCapture, native: set[str]) -> list[Table] | None:
    """The tables of a capture that is native throughout (no class's child tables, which keep
    the capture in SQL), whose shape changed: the native capture reads the new shape already, and only the
    record of it is behind. None for any other capture."""
    if found.published_as.lower() not in native:
        return None
    try:
        tables = captured(config, engine, table_schema(config, engine), found.published_as)
    except CaptureError:
        return None
    return tables if all(t.multi_valued is None for t in tables) else None


def installed_native(config: Config, engine: Engine) -> set[str]:
    """The tables (in lower case) whose capture is the native one (`native`)."""
    return capture_of(config, engine).native_tables()


@dataclass(frozen=True)
class CaptureCheck:
    """What `install --check` finds: each problem said, and the tables `install` puts right."""

    problems: list[str]
    reinstall: list[str]
    """The tables whose capture is to be installed again, by the name they are published as."""


def capture_problems(config: Config, engine: Engine) -> list[str]:
    """What `install --check` reports (`check_capture`), said."""
    return check_capture(config, engine).problems


def check_capture(config: Config, engine: Engine) -> CaptureCheck:
    """Every table whose capture no longer matches it, and every triggered table with no
    record of what its capture was installed for: those `install` puts right."""
    stale = stale_captures(config, engine, lambda: capture_carriers(config, engine, any_trigger=True))
    native = installed_native(config, engine)
    stale = [found for found in stale if on_native_alone(config, engine, found, native) is None]
    problems = [found.describe() for found in stale]
    reinstall = [found.published_as for found in stale]
    dialect = capture_of(config, engine)
    if native and dialect.may_follow():  # a superuser can tell
        try:
            dialect.check_native()
        except CaptureError as exc:
            problems.append(f"table(s) {', '.join(map(repr, sorted(native)))}: every write fails, the server "
                            f"cannot run their native capture: {exc}")
    recorded = recorded_tables(config, engine)
    triggered = triggered_tables(config, engine)
    for table in triggered:
        if table not in recorded:
            problems.append(f"table {table!r}: its capture was installed with no record of the table's shape "
                            f"(by an earlier publisher): install it again")
            reinstall.append(table)
    for installed_on, carrier in moved_captures(config, engine).items():
        child = child_of(config.classes, installed_on)
        where = f"table {installed_on!r}: its capture triggers are on table {carrier!r} (renamed?), where they"
        if child is None:
            problems.append(f"{where} log its changes under the old name, whose events are rejected: "
                            f"`publisher install --table {carrier}` moves them")
        else:
            attribute = next(iter(child.cls.multi_valued))
            problems.append(f"{where} still log its rows as values of {child.class_name}.{attribute}: name "
                            f"{carrier!r} in classes.{child.class_name}.multi_valued.{attribute}, then "
                            f"`publisher install --table {child.class_name}`")
    return CaptureCheck(problems, list(dict.fromkeys(reinstall)))


def moved_captures(config: Config, engine: Engine) -> dict[str, str]:
    """The tables whose capture triggers another table carries now (`Capture.moved`): the table
    carrying them, by the name they were installed on."""
    recorded = recorded_tables(config, engine)
    if not recorded:
        return {}
    with engine.connect() as conn:
        return capture_of(config, engine).moved(conn, sorted(recorded))


def _taking_over(config: Config, engine: Engine, moved: dict[str, str], table: str, natives: set[str]) -> list[str]:
    """Statements that come before `table`'s capture is installed: the capture it carries for a
    name it had before is dropped (`_moved_to`), then a table renamed away from its name gets a
    capture of its own (`_adopted`). In that order, so that names swapped between two tables
    leave no trigger named for the one on the other."""
    return _moved_to(config, engine, moved, table) + _adopted(config, engine, moved, table, natives)


def _carried_style(moved: dict[str, str], recorded: dict[str, Style], table: str) -> Style | None:
    """The style of the capture `table` carries for a name it had before, if it carries one."""
    return next((recorded.get(name.lower()) for name, carrier in moved.items() if carrier.lower() == table.lower()),
                None)


def _moved_to(config: Config, engine: Engine, moved: dict[str, str], table: str) -> list[str]:
    """Statements that drop from `table` the capture it carries for the names it had before,
    and forget what it was installed for under a name no table has now."""
    dialect = capture_of(config, engine)
    statements = []
    schema = table_schema(config, engine)
    existing = {name.lower() for name in reflection(engine, schema).get_table_names(schema=schema)}
    for installed_on, carrier in moved.items():
        if carrier.lower() == table.lower():
            log.info("table %r carries the capture installed on %r (renamed?): replaced by its own",
                     carrier, installed_on)
            shared = installed_on.lower() in {t.lower() for t in capture_carriers(config, engine, any_trigger=True)}
            statements += dialect.drop_capture_sql(carrier, installed_on, shared)
            if installed_on.lower() not in existing:
                statements += forget_sql(config, engine, installed_on)
    return statements


def _adopted(config: Config, engine: Engine, moved: dict[str, str], table: str, natives: set[str]) -> list[str]:
    """Where `table` was renamed and another table took its name, the renamed one still carries
    its capture: installing the other would take that capture away from it (trigger names are
    the schema's) or change the functions its triggers run. Statements that first give the
    renamed table a capture of its own, in the style it carries, native where it was."""
    carrier = next((c for name, c in moved.items() if name.lower() == table.lower()), None)
    if carrier is None:
        return []
    log.warning("table %r carries the capture installed on %r, which names another table now (renamed, and a new "
                "table took its name?): %r gets a capture of its own", carrier, table, carrier)
    style = _carried_style(moved, recorded_styles(config, engine), carrier) or "field"
    statements = _moved_to(config, engine, moved, carrier) + trigger_sql(
        config, engine, carrier, style, carrier.lower() in natives)
    return statements + capture_of(config, engine).kept_switches(carrier, table)  # switched off, it stays off


def install_capture(
    config: Config,
    engine: Engine,
    tables: Sequence[str],
    style: Style | None = "field",
    dry_run: bool = False,
    native: bool | None = False,
) -> list[str]:
    """Create the event log and every named table's triggers in one transaction.

    Every table is reflected before anything runs, so one bad name installs nothing. With
    ``dry_run`` nothing runs; either way the statements are returned, for printing. ``native``
    (`has_native_capture`): the C capture, or None for what each table has now (the capture in SQL for a new
    one).
    """
    if style is not None:
        _check_style(style)
    recorded = recorded_styles(config, engine)
    statements = event_log_ddl(config, engine) + capture_ddl(config, engine)
    natives = installed_native(config, engine)
    was_native = natives if native is None else set()
    if native:
        statements += capture_of(config, engine).native_install_sql()
    if config.subscriptions or config.subscribers:
        statements += subscription_ddl(config, engine)
    named = {t.lower() for t in tables}
    statements += owed_by_reinstall(config, engine, named)
    moved = moved_captures(config, engine)
    for table in tables:
        child = child_of(config.classes, table)
        if child is None or child.class_name.lower() not in named:  # else installed with its class
            on_native = bool(native) or table.lower() in was_native
            kept = _carried_style(moved, recorded, table) or recorded.get(table.lower(), "field")
            statements += _taking_over(config, engine, moved, table, natives)
            statements += trigger_sql(config, engine, table, style or kept, on_native)
    if not dry_run:
        _execute(config, engine, statements)
    return statements


def owed_by_reinstall(config: Config, engine: Engine, named: Collection[str]) -> list[str]:
    """Where `install` makes anew the capture of a table whose shape changed since (a migration
    not run by `migrate`, whose capture the cycles could not make anew): every reader's resync of
    it owed with it, so that the consumer gets the rows the new shape has. Not for a table whose
    triggers are gone (dropped and created again): its rows are a new table's, for a snapshot."""
    carriers = {name.lower() for name in capture_carriers(config, engine, any_trigger=True)}
    stale = [found for found in stale_captures(config, engine, lambda: carriers, named)
             if found.published_as.lower() in carriers]
    if not stale or not resyncs_kept(config, engine):
        return []
    capture = capture_of(config, engine)
    return [sql for found in stale for sql in owe_resync_sql(config, found.published_as, capture.qualify,
                                                             capture.literal)]


def _execute(config: Config, engine: Engine, statements: Sequence[str]) -> None:
    capture_of(config, engine).execute(statements)


def _check_style(style: str, table: str | None = None) -> None:
    if style not in STYLES:
        where = f" for table {table!r}" if table else ""
        expected = ", ".join(STYLES)
        raise CaptureError(f"unknown capture style {style!r}{where}, expected one of {expected}")


def logged_transaction_sql(config: Config, engine: Engine) -> str | None:
    """The SQL expression the triggers log in transaction_id (see `Capture.transaction_sql`)."""
    return capture_of(config, engine).transaction_sql()

