"""The resyncs a migration owes each reader, kept in `<event_log>_resyncs`: a row per reader
(the status mode '', each subscriber) and table, written in the transaction that makes the
table's capture anew for its new shape, and deleted once that reader's snapshot of the table
has finished. A process killed between the two (a cycle that reinstalled the capture, a
`migrate` between its commit and its resync) leaves the row, so the next cycle of the reader
publishes the rows again: the consumer settles whatever moment the kill came.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Column, DateTime, Engine, Identity, Integer, MetaData, String, Table, delete, func, select
from sqlalchemy.exc import SQLAlchemyError

from publisher.config import STATUS_MODE, Config, Reader
from publisher.database import table_schema
from publisher.dialects.reflection import reflection

RESYNCS_TABLE_SUFFIX = "_resyncs"
log = logging.getLogger("publisher")


def resyncs_table(event_log: str, schema: str | None, metadata: MetaData | None = None) -> Table:
    return Table(
        f"{event_log}{RESYNCS_TABLE_SUFFIX}", metadata or MetaData(),
        Column("owed", Integer, Identity(), primary_key=True),  # an identity needs no grant of its sequence
        Column("reader", String(255), nullable=False),
        Column("table_name", String(255), nullable=False),
        Column("owed_since", DateTime(timezone=True), nullable=False),
        schema=schema,
        quote=True,
        quote_schema=True,
    )


def readers_of(config: Config) -> list[Reader]:
    """Every reader a migration's resync publishes for: the status mode where it is on, and
    each subscriber."""
    return ([STATUS_MODE] if config.publisher.status_mode else []) + [Reader(name) for name in config.subscribers]


def owe_resync_sql(config: Config, published_as: str, qualify: Callable[[str], str],
                   literal: Callable[[str], str]) -> list[str]:
    """Statements that owe every reader a resync of `published_as`; run with the statements that
    make its capture anew, so that both commit together."""
    target = qualify(f"{config.event_log.table}{RESYNCS_TABLE_SUFFIX}")
    return [f"INSERT INTO {target} (reader, table_name, owed_since) "
            f"VALUES ({literal(reader.key)}, {literal(published_as)}, CURRENT_TIMESTAMP)"
            for reader in readers_of(config)]


def ensure_resyncs_table(config: Config, engine: Engine) -> None:
    """Create `<event_log>_resyncs` where an event log installed before it lacks it."""
    schema = table_schema(config, engine)
    target = resyncs_table(config.event_log.table, schema)
    if not reflection(engine, schema).has_table(target.name, schema=schema):
        target.create(engine, checkfirst=True)


def resyncs_kept(config: Config, engine: Engine) -> bool:
    """Whether the resyncs a migration owes can be kept: `<event_log>_resyncs` is there, or could
    be created (an event log from before it, and a user allowed to)."""
    try:
        ensure_resyncs_table(config, engine)
    except SQLAlchemyError as exc:
        log.error("cannot create %s%s (%s): the rows of the tables a migration changed are not published again; "
                  "run `publisher install --table T` as the tables' owner, which creates it, then `publisher snapshot "
                  "--table T`", config.event_log.table, RESYNCS_TABLE_SUFFIX, config.database.redact(str(exc)))
        return False
    return True


def owed_resyncs(config: Config, engine: Engine, reader: Reader) -> dict[str, int]:
    """The tables whose resync is owed to `reader`, each with the last of its rows read now
    (`resync_done` deletes that one and those before it, not one owed later)."""
    schema = table_schema(config, engine)
    target = resyncs_table(config.event_log.table, schema)
    if not _exists(engine, schema, target.name):
        return {}
    with engine.connect() as conn:
        rows = conn.execute(select(target.c.table_name, func.max(target.c.owed))
                            .where(target.c.reader == reader.key).group_by(target.c.table_name)).all()
    return {str(name): int(last) for name, last in rows}


def resync_done(config: Config, engine: Engine, reader: Reader, table: str, last: int) -> None:
    """`reader`'s resync of `table`, owed up to row `last`, has finished."""
    target = resyncs_table(config.event_log.table, table_schema(config, engine))
    with engine.begin() as conn:
        conn.execute(delete(target).where(target.c.reader == reader.key, target.c.table_name == table,
                                          target.c.owed <= last))


_SEEN: set[tuple[str, str | None, str]] = set()
"""The resync tables known to exist, so that a cycle asks the catalog only until one does."""


def _exists(engine: Engine, schema: str | None, name: str) -> bool:
    key = (str(engine.url), schema, name)
    if key in _SEEN:
        return True
    if not reflection(engine, schema).has_table(name, schema=schema):
        return False
    _SEEN.add(key)
    return True
