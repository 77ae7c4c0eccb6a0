"""The benchmark's backlog: tables, capture triggers and events made through real DML.

`usr` carries field-style triggers (one event per changed column), `grp` row-style ones (query-back
events 5 and 6). The triggers of this project never write field query-back events where they spell
every value (7, 8; each family's capture says) nor malformed rows, so those are inserted into the
event log directly; loopback rows are real DML attributed afterwards to the publisher's own user,
as if its account had made them.
Every database writes the rows the way it takes them fastest (its `backlog`: set-based in the
server, or executemany batches), and the events come in rounds, so one object's events spread
over the backlog as they do at a site.
"""
from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from publisher.capture.install import install_capture
from publisher.config import Config, DatabaseConfig, OutputConfig, PublisherSettings, SparkConfig
from publisher.database import connect
from publisher.workshop.bench.mix import (
    DEFAULT_MIX,
    REWRITES,
    USR_COLUMNS,
    Backlog,
    Mix,
    Plan,
    WorkloadError,
    grp_rows,
    plan_events,
)
from publisher.workshop.bench.writers import BATCH, DEFAULT_SCHEMA, EVENT_LOG, Writer
from publisher.workshop.databases import draining, named, names, of_url

PUBLISHER_USER = "idm"
"""The publisher's own user; the DML runs as another one, so only rows attributed to it are loopback."""


ROUNDS = 20
"""Transactions the events are made in, unless the events per transaction are given: each
takes its share of every kind."""


_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass(frozen=True)
class Workload:
    """A generated backlog: where it is and what it holds."""

    dialect: str
    """The database's name (`Workbench.name`)."""
    url: str
    schema: str | None
    rows: int
    plan: Plan
    events: int
    """New rows in the event log, counted after generation."""
    by_type: dict[str, int]
    loopback: int
    load_seconds: float
    """Creating and filling the tables, before the triggers exist."""
    generate_seconds: float
    """Making the events through the triggers."""
    backlog: Backlog = Backlog.MIX
    transactions: int = ROUNDS
    """The transactions the events were made in."""

    def config(self, output: Path, query_limit: int, batch_size: int = 128, master: str = "local[*]") -> Config:
        """The publisher's configuration for this backlog."""
        return bench_config(self.url, self.schema, output, query_limit, batch_size, master)

    def summary(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "rows": self.rows,
            "events": self.events,
            "by_type": self.by_type,
            "loopback": self.loopback,
            "plan": dataclasses.asdict(self.plan),
            "load_seconds": round(self.load_seconds, 3),
            "generate_seconds": round(self.generate_seconds, 3),
            "backlog": self.backlog.value,
            "transactions": self.transactions,
            "events_per_second": round(self.events / self.generate_seconds, 1) if self.generate_seconds else None,
        }


def bench_config(
    url: str, schema: str | None, output: Path, query_limit: int, batch_size: int = 128, master: str = "local[*]"
) -> Config:
    """The publisher as a site would configure it for these tables; it publishes the triggered ones."""
    return Config(
        database=DatabaseConfig(url=url, user=PUBLISHER_USER, schema=schema),
        publisher=PublisherSettings(query_limit=query_limit, batch_size=batch_size),
        output=OutputConfig(directory=str(output)),
        spark=SparkConfig(master=master),
    )


def generate(
    dialect: str, url: str, rows: int, events: int, schema: str = DEFAULT_SCHEMA, mix: Mix = DEFAULT_MIX,
    backlog: Backlog = Backlog.MIX, transaction_events: int | None = None,
) -> Workload:
    """Make the tables afresh (a schema dropped and recreated, or a file replaced), then `events`
    events, rewritten in place as `backlog` says; in ROUNDS transactions, or in transactions of
    about `transaction_events` events each (`rounds_of`)."""
    plan = plan_events(events, rows, mix)
    rounds = rounds_of(events, transaction_events)
    _check_url(dialect, url)
    writer = writer_for(dialect, schema)
    if writer.schema is not None and not _IDENTIFIER.fullmatch(schema):
        raise WorkloadError(f"schema: expected a lower-case SQL identifier, got {schema!r}")
    _clear(writer, url)
    config = bench_config(url, writer.schema, Path("."), query_limit=1)
    engine = connect(config)
    try:
        started = time.perf_counter()
        with engine.begin() as conn:
            writer.create(conn, rows, events)
            writer.insert_usr(conn, 1, rows)
            writer.insert_grp(conn, 1, grp_rows(rows))
        install_capture(config, engine, ["usr"], "field")
        install_capture(config, engine, ["grp"], "row")
        load_seconds = time.perf_counter() - started
        started = time.perf_counter()
        _make_events(engine, writer, plan, rows, rounds)
        generate_seconds = time.perf_counter() - started
        with engine.begin() as conn:
            if backlog is not Backlog.MIX:
                conn.execute(text(f"UPDATE {writer.table(EVENT_LOG)} SET {REWRITES[backlog]} WHERE status = 'N'"))
            writer.analyze(conn)
            by_type = {
                str(t): int(n)
                for t, n in conn.execute(text(
                    f"SELECT event_type, COUNT(*) FROM {writer.table(EVENT_LOG)} "
                    "WHERE status = 'N' GROUP BY event_type ORDER BY event_type"
                ))
            }
            loopback = conn.execute(
                text(f"SELECT COUNT(*) FROM {writer.table(EVENT_LOG)} WHERE status = 'N' AND perpetrator = :user"),
                {"user": PUBLISHER_USER},
            ).scalar_one()
    finally:
        engine.dispose()
    return Workload(
        dialect=dialect,
        url=url,
        schema=writer.schema,
        rows=rows,
        plan=plan,
        events=sum(by_type.values()),
        by_type=by_type,
        loopback=int(loopback),
        load_seconds=load_seconds,
        generate_seconds=generate_seconds,
        backlog=backlog,
        transactions=rounds,
    )


def rounds_of(events: int, transaction_events: int | None) -> int:
    """The transactions `events` events are made in: ROUNDS, or as many as keep each to about
    `transaction_events` (never fewer than ROUNDS). A window that `query_limit` cuts is extended to
    the end of the transaction it cut into, so transactions much smaller than `query_limit` make
    every cycle of a drain about `query_limit` events."""
    if transaction_events is None:
        return ROUNDS
    if transaction_events < 1:
        raise WorkloadError(f"transaction events: expected at least 1, got {transaction_events}")
    return max(ROUNDS, -(-events // transaction_events))


def writer_for(dialect: str, schema: str | None) -> Writer:
    """The workload's writer on the database named `dialect`, which must make the backlog."""
    try:
        backlog = named(dialect).backlog(schema or DEFAULT_SCHEMA)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None
    if backlog is None:
        raise WorkloadError(f"the workload is made on {' and '.join(names(draining()))} only, not {dialect}")
    return Writer(backlog)


def _check_url(dialect: str, url: str) -> None:
    try:
        backend = make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        raise WorkloadError(f"url: {url!r} is not a SQLAlchemy URL") from None
    try:
        found = of_url(url).name
    except ValueError:
        found = None
    if found != dialect:
        raise WorkloadError(f"url: a {dialect} URL is needed, got a {backend} one")


def _clear(writer: Writer, url: str) -> None:
    """Remove an earlier benchmark's database where it is a file; refuse one that holds anything else."""
    try:
        writer.backlog.clear(url)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None


class _Cursor:
    """Walks the ids lo..hi round and round, handing out contiguous ranges."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi, self.next = lo, hi, lo

    def take(self, count: int, most: int) -> Iterator[tuple[int, int]]:
        while count > 0:
            n = min(count, most, self.hi - self.next + 1)
            yield self.next, self.next + n - 1
            count -= n
            self.next = self.next + n if self.next + n <= self.hi else self.lo


def _split(total: int, parts: int) -> list[int]:
    share, extra = divmod(total, parts)
    return [share + (1 if i < extra else 0) for i in range(parts)]


def _make_events(engine: Engine, writer: Writer, plan: Plan, rows: int, count: int = ROUNDS) -> None:
    """Interleave the kinds in rounds, one transaction each; updates only touch rows no round deletes."""
    usr_alive = rows - plan.usr_deletes
    grp_total = grp_rows(rows)
    grp_alive = grp_total - plan.grp_deletes
    usr_updated, grp_updated = _Cursor(1, usr_alive), _Cursor(1, grp_alive)
    queried_back = _Cursor(1, rows)
    usr_chunk, grp_chunk = max(1, usr_alive // 4), max(1, grp_alive // 4)
    next_usr, next_grp = rows + 1, grp_total + 1
    next_usr_deleted, next_grp_deleted = usr_alive + 1, grp_alive + 1
    rounds = {f.name: _split(getattr(plan, f.name), count) for f in dataclasses.fields(plan)}
    generation = 0
    malformed = 0
    for r in range(count):
        with engine.begin() as conn:
            for lo, hi in usr_updated.take(rounds["usr_updates"][r], usr_chunk):
                generation += 1
                writer.update_usr(conn, USR_COLUMNS[generation % len(USR_COLUMNS)], lo, hi, generation)
            if n := rounds["usr_insert_rows"][r]:
                writer.insert_usr(conn, next_usr, next_usr + n - 1)
                next_usr += n
            for lo, hi in queried_back.take(rounds["field_query_backs"][r], BATCH):
                writer.log_field_query_backs(conn, lo, hi, rows)
            for lo, hi in grp_updated.take(rounds["grp_updates"][r], grp_chunk):
                writer.update_grp(conn, lo, hi)
            if n := rounds["grp_inserts"][r]:
                writer.insert_grp(conn, next_grp, next_grp + n - 1)
                next_grp += n
            if rounds["loopback"][r]:
                last = writer.last_record_id(conn)
                for lo, hi in usr_updated.take(rounds["loopback"][r], usr_chunk):
                    generation += 1
                    writer.update_usr(conn, USR_COLUMNS[generation % len(USR_COLUMNS)], lo, hi, generation)
                writer.attribute(conn, last, PUBLISHER_USER)
            if n := rounds["usr_deletes"][r]:
                writer.delete(conn, "usr", "idu", next_usr_deleted, next_usr_deleted + n - 1)
                next_usr_deleted += n
            if n := rounds["grp_deletes"][r]:
                writer.delete(conn, "grp", "gid", next_grp_deleted, next_grp_deleted + n - 1)
                next_grp_deleted += n
            if n := rounds["malformed"][r]:
                writer.log_malformed(conn, malformed, n, rows)
                malformed += n


def load_usr(engine: Engine, database: Any, schema: str, rows: int) -> None:
    """`schema` afresh with `usr` alone, rows 1..`rows` as the workload inserts them, a
    transaction per BATCH * 10 rows, no trigger: a table that holds rows and no event."""
    if not _IDENTIFIER.fullmatch(schema):
        raise WorkloadError(f"schema: expected a lower-case SQL identifier, got {schema!r}")
    writer = Writer(database.backlog(schema))
    with engine.begin() as conn:
        writer.create_usr(conn)
    for lo, hi in _Cursor(1, rows).take(rows, BATCH * 10):
        with engine.begin() as conn:
            writer.insert_usr(conn, lo, hi)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(database.vacuum_sql(writer.table("usr")))


def change_rows(engine: Engine, workload: Workload, count: int, serial: int) -> None:
    """Update `fname` of `count` rows through the triggers in one transaction: `count` new events.

    `serial` makes the values new, so that every update changes its row and logs an event.
    """
    writer = writer_for(workload.dialect, workload.schema)
    rows = _Cursor(1, workload.rows - workload.plan.usr_deletes)
    with engine.begin() as conn:
        for part, (lo, hi) in enumerate(rows.take(count, count)):
            conn.execute(
                text(f"UPDATE {writer.table('usr')} SET fname = 'first' || idu || '.latency{serial}.{part}' "
                     "WHERE idu BETWEEN :lo AND :hi"),
                {"lo": lo, "hi": hi},
            )


def discard(workload: Workload) -> None:
    """Remove a workload's tables: its schema, or its file."""
    writer = writer_for(workload.dialect, workload.schema)
    _clear(writer, workload.url)
    if writer.backlog.drop_sql is None:
        return
    config = bench_config(workload.url, workload.schema, Path("."), query_limit=1)
    engine = connect(config)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(writer.backlog.drop_sql)
    finally:
        engine.dispose()
