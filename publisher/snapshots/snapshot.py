"""Snapshots: every current row of the published tables, published as its row query-back.

A snapshot publishes nothing itself. It logs each current row in the event log as a row
query-back (type 5), a chunk of rows in key order per transaction, and the cycles publish them
as they publish the triggers' events: each is read back when it is published, as the row is
then, in record_id order with the changes around it. That is why a snapshot is consistent with
the writers that change the tables while it runs (docs: guides/snapshots.md): whatever a row's events
before or after its snapshot event, the consumer ends where the table is, as it does for any
query-back. A snapshot for a subscriber is logged with a perpetrator that names it
(`rules.classify.snapshot_perpetrator`): the other readers pass its events over.

Each chunk's events and how far the snapshot has come are committed together in
`<event_log>_snapshot`, so a snapshot started again after a crash continues after its last
chunk: no row is logged twice, none is left out.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, or_, select, text
from sqlalchemy.exc import DBAPIError

from publisher.capture.install import published_tables
from publisher.config import STATUS_MODE, Config, Reader
from publisher.database import table_schema
from publisher.errors import root_cause
from publisher.model.catalog import Catalog, TableInfo, reflect_catalog
from publisher.model.events import EventType
from publisher.pipeline.row_reading import RowReading
from publisher.rules.classify import snapshot_perpetrator
from publisher.rules.where import condition_problem
from publisher.snapshots.chunks import ROWS, ChunkEvents
from publisher.snapshots.direct import MAX_CHUNK_ROWS, DirectOutput
from publisher.snapshots.ranges import PARALLEL_ROWS
from publisher.snapshots.state import PROGRESS_EVERY, begin_parts, range_table, rows_of_total, snapshot_table
from publisher.snapshots.taking import Progress, TableSnapshot, Taking, take_part

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHUNK_ROWS = 1_000
"""Rows logged per transaction: small enough that a window of `query_limit` rows ends near a
chunk's end (a window keeps a transaction's events together), large enough that the statements
cost little per row."""


class SnapshotError(ValueError):
    """A snapshot asked for what cannot be: an unknown table, a condition the database refuses."""


@dataclass
class SnapshotResult:
    reader: Reader
    dry_run: bool
    tables: dict[str, TableSnapshot] = field(default_factory=dict)
    direct: bool = False
    """The rows were written as operations where they could be (`snapshot_direct`)."""
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        if self.dry_run:
            return {"snapshot": self.reader.subscriber or "status mode", "dry_run": True,
                    "rows": {name: t.total for name, t in self.tables.items()}}
        summary: dict[str, Any] = {
            "snapshot": self.reader.subscriber or "status mode",
            "events": sum(t.rows - t.published for t in self.tables.values()),
            "tables": {name: {"rows": t.rows, "total": t.total, "resumed_after": t.resumed_after,
                              **({"rows_before": t.before} if t.resumed_after is not None else {}),
                              **({"ranges": t.ranges} if t.ranges is not None else {}),
                              **({"null_keys": t.null_keys} if t.null_keys else {})}
                       for name, t in self.tables.items()},
            "seconds": round(self.seconds, 3),
        }
        if self.direct:
            summary["published"] = sum(t.published for t in self.tables.values())
            for name, t in self.tables.items():
                summary["tables"][name]["published"] = t.published
        return summary


def snapshot(
    config: Config, engine: Engine, tables: Sequence[str] = (), where: str | None = None,
    reader: Reader = STATUS_MODE, dry_run: bool = False, chunk_rows: int = CHUNK_ROWS,
    progress: Progress | None = None, direct: DirectOutput | None = None,
    spark: Callable[[], SparkSession] | None = None, parallel_rows: int = PARALLEL_ROWS,
    events: ChunkEvents = ROWS, anew: bool = False,
) -> SnapshotResult:
    """Log every current row of `tables` (default: every published table; a subscriber's:
    every table its subscription tracks) that `where` selects, for `reader`; with `dry_run`,
    only count them. With `direct` (the status mode's, its lock held), write the rows as
    operations where they can be (`snapshot_direct`), a table with `parallel_rows` rows or more
    in key ranges on the Spark session `spark` gives (`snapshot_ranges`). `events`: what each
    row logs (`ChunkEvents`; a migration's resync may remove retired columns' values too).
    `anew`: begin again where an unfinished snapshot for the reader left a table."""
    started = time.perf_counter()
    if direct is not None and events.removed:
        raise SnapshotError("the direct path publishes rows only")
    chosen = _chosen_tables(config, engine, tables, reader, events)
    condition = (where or "").strip()
    problem = condition_problem(condition)
    if problem is not None:
        raise SnapshotError(f"--where {condition!r}: {problem}")
    result = SnapshotResult(reader, dry_run, direct=direct is not None)
    if direct is not None and chunk_rows > MAX_CHUNK_ROWS:
        raise SnapshotError(f"--chunk-rows {chunk_rows}: the direct path takes at most {MAX_CHUNK_ROWS:,} rows a chunk")
    counts = {name: _count(engine, config, table, condition) for name, table in chosen.items()}
    if dry_run:
        result.tables = {name: TableSnapshot(total=count) for name, count in counts.items()}
        return result
    schema = table_schema(config, engine)
    state = snapshot_table(config.event_log.table, schema)
    state.create(engine, checkfirst=True)
    range_table(config.event_log.table, schema).create(engine, checkfirst=True)
    taking = Taking(config, engine, schema, snapshot_perpetrator(reader), condition, reader.key, chunk_rows,
                     progress, direct, spark, parallel_rows, events)
    begun = begin_parts(engine, state, reader.key, condition, counts, anew)
    for name, table in chosen.items():
        result.tables[name] = take_part(taking, table, counts[name], begun[name])
        result.tables[name].null_keys = _count(engine, config, table, condition, null_keys=True)
    result.seconds = time.perf_counter() - started
    return result


DIRECT_CHUNK_ROWS = 10_000
"""Rows read per transaction by `snapshot --direct`: its chunks are documents, not events a
window must keep together, and a larger one costs less per row (a chunk's share locks are held
while its documents are written, tens of milliseconds)."""


def snapshot_directly(
    config: Config, engine: Engine, tables: Sequence[str] = (), where: str | None = None,
    reader: Reader = STATUS_MODE, chunk_rows: int | None = None, progress: Progress | None = None,
    spark: Callable[[], SparkSession] | None = None, parallel_rows: int = PARALLEL_ROWS,
) -> SnapshotResult:
    """`snapshot --direct`: the status mode's snapshot with its rows written as operations where
    they can be (`snapshot_direct`), holding the status mode's lock throughout, as a cycle does,
    so that no cycle writes documents between a chunk's read and its commit; a large table in
    key ranges on the Spark session `spark` gives, when it gives one."""
    from publisher.locking.lock import PublisherLock

    if reader.subscriber is not None:
        raise SnapshotError(f"--direct with --subscriber {reader.subscriber}: a subscriber's documents are written "
                            "by its check-outs; snapshot it without --direct")
    if config.output.publishes_changes:
        raise SnapshotError("--direct: change tables or messages are on, and the direct path writes only XDS "
                            "documents; snapshot without --direct")
    schema = table_schema(config, engine)
    catalog = reflect_catalog(engine, schema, published_tables(config, engine), config.classes)
    with PublisherLock(config) as lock:
        direct = DirectOutput.of(config, engine, catalog.tables, lambda: lock.lost)
        return snapshot(config, engine, tables, where, reader, chunk_rows=chunk_rows or DIRECT_CHUNK_ROWS,
                        progress=progress, direct=direct, spark=spark, parallel_rows=parallel_rows)


def _chosen_tables(
    config: Config, engine: Engine, names: Sequence[str], reader: Reader, events: ChunkEvents = ROWS,
) -> dict[str, TableInfo]:
    schema = table_schema(config, engine)
    catalog = reflect_catalog(engine, schema, published_tables(config, engine), config.classes)
    available = catalog.tables
    subscriber = reader.subscriber
    if subscriber is not None:
        from publisher.pipeline.subscribers import tracked
        from publisher.subscriptions.filter import tracked_tables
        from publisher.subscriptions.tables import require_check_outs

        config.subscriber(subscriber)
        require_check_outs(engine.dialect.name)
        subscription = tracked(config, subscriber, catalog)
        if EventType.INSERT_ROW_QUERY_BACK in events.event_types - subscription.event_types:
            raise SnapshotError(f"--subscriber {subscriber}: its subscription does not track inserts, and a snapshot "
                                "logs each row as the row query-back of an insert (type 5), which it would pass over")
        missing = events.event_types - subscription.event_types
        if missing:
            raise SnapshotError(f"subscriber {subscriber}: its subscription does not track event type(s) "
                                f"{', '.join(str(int(t)) for t in sorted(missing))}, which it would pass over")
        available = tracked_tables(catalog, subscription)
    if not names:
        return dict(sorted(available.items()))
    chosen = {}
    for name in names:
        table = _named(catalog, available, name, reader)
        chosen[table.name] = table
    return chosen


def _named(catalog: Catalog, available: dict[str, TableInfo], name: str, reader: Reader) -> TableInfo:
    table = catalog.lookup(name)
    if table is None:
        raise SnapshotError(f"--table {name}: {catalog.refusal(name)}")
    if table.name not in available:
        raise SnapshotError(f"--table {name}: {reader}'s subscription does not track it")
    return available[table.name]


def _count(engine: Engine, config: Config, table: TableInfo, condition: str, null_keys: bool = False) -> int:
    """The rows `condition` selects (with `null_keys`, those of them with a NULL key column,
    which no chunk reads); a condition the database refuses is a SnapshotError with its reason,
    before anything is logged."""
    reading = RowReading(table, table_schema(config, engine), engine.dialect)
    query = select(func.count()).select_from(reading.sql_table)
    if condition:
        query = query.where(text(f"({condition})"))
    if null_keys:
        query = query.where(or_(*(reading.sql_table.c[c.name].is_(None) for c in reading.keys)))
    try:
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
    except DBAPIError as exc:
        if not condition or exc.connection_invalidated:
            raise
        raise SnapshotError(f"--where {condition!r} on table {table.name}: {root_cause(exc)}") from None


class ProgressLines:
    """Progress lines (on stderr unless `emit` says otherwise), one at most every PROGRESS_EVERY
    seconds and one when a table is done: table, rows logged of the total, rate, time left."""

    def __init__(self, emit: Callable[[str], None] | None = None) -> None:
        self.last = 0.0
        self.said: tuple[str, int] | None = None
        self.emit = emit or (lambda line: print(line, file=sys.stderr))

    def __call__(self, table: str, rows: int, total: int, seconds: float) -> None:
        now = time.monotonic()
        if (rows < total and now - self.last < PROGRESS_EVERY) or self.said == (table, rows):
            return
        self.last, self.said = now, (table, rows)
        rate = rows / seconds if seconds > 0 else 0.0
        left = f", about {int((total - rows) / rate)} s left" if rate > 0 and rows < total else ""
        self.emit(f"snapshot {table}: {rows_of_total(rows, total)}, {rate:,.0f} rows/s{left}")


def initial_snapshot(config: Config, engine: Engine, output: Path, reader: Reader = STATUS_MODE,
                     progress: Progress | None = None, lock_lost: Callable[[], bool] | None = None,
                     spark: Callable[[], SparkSession] | None = None) -> SnapshotResult | None:
    """`publisher.initial_snapshot`: the snapshot a reader gets before its first cycle when its
    output holds no document and no snapshot of it is recorded; one a stop interrupted is
    continued, table by table. None when none is due. Given `lock_lost` (the caller holds the
    status mode's lock), the status mode's is written directly where it can be, as `snapshot
    --direct` does, its large tables in key ranges on `spark`."""
    from publisher.outputs.cycle_files import document_paths

    state = snapshot_table(config.event_log.table, table_schema(config, engine))
    state.create(engine, checkfirst=True)
    with engine.connect() as conn:
        recorded = {row.table_name: row.finished_at is not None for row in conn.execute(
            select(state.c.table_name, state.c.finished_at).where(state.c.reader == reader.key))}
    if not recorded and output.is_dir() and document_paths(output):
        return None
    waiting = [name for name in _chosen_tables(config, engine, (), reader) if not recorded.get(name)]
    if not waiting:
        return None
    if lock_lost is None or reader.subscriber is not None or config.output.publishes_changes:
        return snapshot(config, engine, waiting, reader=reader, progress=progress)
    catalog = reflect_catalog(engine, table_schema(config, engine), published_tables(config, engine), config.classes)
    direct = DirectOutput.of(config, engine, catalog.tables, lock_lost)
    return snapshot(config, engine, waiting, reader=reader, chunk_rows=DIRECT_CHUNK_ROWS, progress=progress,
                    direct=direct, spark=spark)
