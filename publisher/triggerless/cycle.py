"""A triggerless cycle: the published tables read whole, compared with the state the previous
cycle kept, and what changed published (docs: guides/triggerless.md).

read the tables (or take the read an earlier try of this cycle made durable) → compare each
bucket of the state with the same bucket of the read → build the operations (`rules.comparison`)
→ write the documents → the read becomes the state.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine

from publisher import failpoints
from publisher.capture.install import published_tables
from publisher.config import STATUS_MODE, Config, OutputConfig, Reader, StartupOption
from publisher.database import association_schema, table_schema
from publisher.dialects import dialect_of
from publisher.model.catalog import TableInfo, reflect_catalog
from publisher.model.column_types import textless_column
from publisher.model.logical import child_tables
from publisher.model.operation import OperationKind
from publisher.outputs.cycle_files import next_cycle_number
from publisher.outputs.documents import write_documents
from publisher.outputs.formats import CycleFormats, FormatsWritten, PartWritten
from publisher.outputs.outcomes import append_rejects
from publisher.pipeline.queryback import QueryBackContext
from publisher.pipeline.subscribers import tracked
from publisher.subscriptions.filter import tracked_kinds, tracked_tables
from publisher.triggerless.buckets import bucket_jobs, publish_bucket
from publisher.triggerless.read import class_layouts, read_tables
from publisher.triggerless.state import (
    ComparisonState,
    ForeignStateError,
    Generation,
    TableLayout,
)

DRIVER_THREADS = 2
"""Buckets the driver compares at once: two, bounded memory (each holds one bucket's old and new
rows) and most of what two cores give."""
PARALLEL_ROWS = 1_000_000
"""A cycle whose tables hold at least this many rows compares its buckets on Spark's tasks, on a
cluster (`on_spark`)."""
DRIVER_MASTERS = ("local",)
"""Masters whose tasks run on the driver's own cores: there its threads compare the buckets
faster than Spark's tasks do (two cores, 1M rows: 8 s against 20 s; 5M: 40 s against 67 s)."""


@dataclass(frozen=True)
class ComparisonSettings:
    """The part of the configuration a triggerless cycle uses, resolved once per cycle."""

    output: Path
    batch_size: int
    startup: StartupOption
    tables: tuple[TableInfo, ...]
    schema: str | None
    schema_label: str
    url: str
    master: str
    kinds: frozenset[str] = frozenset(kind.value for kind in OperationKind)
    """The operations published (a subscription's); the others only advance the state."""
    lookups: frozenset[str] = frozenset()
    """Tables read only for their keys: classes a subscriber's references name and it does not track."""
    formats: OutputConfig = field(default_factory=OutputConfig)
    """The change tables and messages of the reader's output."""

    @classmethod
    def of(cls, config: Config, engine: Engine, reader: Reader = STATUS_MODE) -> ComparisonSettings:
        schema = table_schema(config, engine)
        catalog = reflect_catalog(engine, schema, published_tables(config, engine), config.classes)
        found = {name.lower() for name in catalog.tables}
        children = child_tables(config.classes)  # published as their parents' values, as in the triggered mode
        missing = [name for name in config.publisher.tables if name.lower() not in found | children]
        if missing:
            raise ForeignStateError(f"publisher.tables: {', '.join(missing)} found in no table or view with a key "
                                    f"(a view's key is its pk_ columns) in {schema or 'the database'}")
        tables = dict(catalog.tables)
        for table in tables.values():
            for column in (*table.columns, *(multi.value for multi in table.multi_valued)):
                problem = textless_column(dialect_of(engine).name, table.name, column.name, column.sql_type)
                if problem is not None:
                    raise ForeignStateError(problem)
        kinds = cls.kinds
        lookups: frozenset[str] = frozenset()
        if reader.subscriber is not None:
            subscription = tracked(config, reader.subscriber, catalog)
            tables = tracked_tables(catalog, subscription)
            kinds = frozenset(kind.value for kind in tracked_kinds(subscription.event_types))
            lookups = frozenset(target for table in tables.values() for _, target in table.references) - tables.keys()
            tables.update({name: keys_only(catalog.tables[name]) for name in lookups})
        return cls(Path(reader.output(config)).resolve(), config.publisher.batch_size,
                   config.publisher.startup_option, tuple(tables[name] for name in sorted(tables, key=str.lower)),
                   schema, association_schema(config, engine), config.database.sqlalchemy_url(), config.spark.master,
                   kinds, lookups, config.output if reader.subscriber is None else
                   config.subscriber(reader.subscriber).output_config())


def keys_only(table: TableInfo) -> TableInfo:
    """A table as a reference's lookup reads it: its key columns alone."""
    return dataclasses.replace(table, columns=tuple(c for c in table.columns if c.is_key), multi_valued=(),
                               references=())


@dataclass
class TableCompared:
    rows: int = 0
    add: int = 0
    modify: int = 0
    delete: int = 0


@dataclass
class ComparisonResult:
    """What one triggerless cycle did, as `poll` and `run` report it."""

    generation: int
    """The state's number, the first part of its operations' event-ids."""
    tables: dict[str, TableCompared] = field(default_factory=dict)
    documents: int = 0
    file_cycles: list[int] = field(default_factory=list)
    """The cycle numbers the documents' names begin with: the generation took its own, so
    these are later (one for the driver's documents, one per bucket on Spark)."""
    dangling_references: int = 0
    """References published without association-ref: the object they name does not exist."""
    rejected: int = 0
    formats: FormatsWritten = field(default_factory=FormatsWritten)
    repeated: bool = False
    """The cycle compared a read an earlier, interrupted try made (and published it again)."""
    recorded_only: bool = False
    """The first cycle under startup_option = "future": the tables recorded, nothing published."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Per stage: `read` the tables into the new state, `compare` and write the documents, `state` promote it."""

    @property
    def operations(self) -> int:
        return sum(t.add + t.modify + t.delete for t in self.tables.values())

    @property
    def operation_kinds(self) -> dict[str, int]:
        return {kind.value: sum(getattr(t, kind.value) for t in self.tables.values()) for kind in OperationKind}

    @property
    def statuses(self) -> dict[str, int]:
        """No event log rows are acknowledged: there are none."""
        return {}

    @property
    def elapsed(self) -> float:
        return sum(self.seconds.values())

    @property
    def idle(self) -> bool:
        return self.operations == 0 and not self.rejected

    @property
    def events(self) -> int:
        """Changes found: a triggerless cycle reads everything every time, so none is left over."""
        return 0

    def summary(self) -> dict[str, Any]:
        return {
            "mode": "triggerless", "generation": self.generation, "operations": self.operations,
            "documents": self.documents, "file_cycles": self.file_cycles,
            "dangling_references": self.dangling_references,
            "rejected": self.rejected, "change_rows": self.formats.change_rows,
            "messages": self.formats.messages, "brokered": self.formats.brokered, "repeated": self.repeated,
            "recorded_only": self.recorded_only,
            "tables": {name: vars(t) for name, t in self.tables.items()},
            "seconds": {stage: round(seconds, 3) for stage, seconds in self.seconds.items()},
        }


def run_comparison_cycle(spark: Callable[[], Any] | None, engine: Engine, config: Config,
                         reader: Reader = STATUS_MODE) -> ComparisonResult:
    """One triggerless cycle of `reader` (the status mode's, or a subscriber's, each with a state
    of its own in its output directory), start to end; the caller holds the state's lock. Its
    arguments come in `run_cycle`'s order; `spark` gives a session for large tables, asked for
    when one is first needed (None: every table is compared in the driver)."""
    started = time.monotonic()
    settings = ComparisonSettings.of(config, engine, reader)
    state = ComparisonState(settings.output)
    current = state.current()
    layouts = [member.layout for table in settings.tables for member in class_layouts(table)]
    source = source_of(engine, settings.schema_label)
    if current is not None:
        refuse_foreign(current, layouts, state, source)
    read = state.read_done()
    repeated = read is not None
    if read is None:
        ctx = QueryBackContext(settings.url, settings.schema, {t.name: t for t in settings.tables})
        read = read_tables(engine, ctx, state, next_cycle_number(settings.output), current, source)
    else:
        refuse_foreign(read, layouts, state, source)
    result = ComparisonResult(read.number, repeated=repeated)
    result.seconds["read"] = time.monotonic() - started
    started = time.monotonic()
    if current is None and settings.startup == StartupOption.FUTURE:
        result.recorded_only = True
        for layout in read.tables:
            if not layout.parent and layout.name not in settings.lookups:
                result.tables[layout.name] = TableCompared(rows=layout.rows)
    else:
        publish_differences(settings, current, read, result, spark)
    result.seconds["compare"] = time.monotonic() - started
    started = time.monotonic()
    failpoints.reached("triggerless_state")
    state.promote(read, result.summary())
    result.seconds["state"] = time.monotonic() - started
    return result


def source_of(engine: Engine, schema_label: str) -> str:
    """Where a state's tables are read: the kind of database and the schema (or database) its
    associations name."""
    return f"{engine.dialect.name}:{schema_label}"


def refuse_foreign(kept: Generation, layouts: Sequence[TableLayout], state: ComparisonState, source: str) -> None:
    """A state kept for other tables, other keys or another database or schema is never compared
    with (it would publish every row as changed, or objects under other names): say what
    differs and what to do."""
    def named(layouts: Sequence[TableLayout]) -> dict[str, TableLayout]:
        return {layout.name: layout for layout in layouts}

    kept_tables = named([layout for layout in kept.tables if not layout.parent])
    tables = named([layout for layout in layouts if not layout.parent])
    remedy = (f"to publish these tables from a new start, move {state.root} away (the next cycle then "
              "follows publisher.startup_option), or point output.directory at a new directory")
    if not kept.canonical_keys:
        raise ForeignStateError(
            f"the triggerless state in {state.root} was kept by an earlier version, which spelled keys as the "
            f"database wrote them (now canonically, as table_keys): {remedy}")
    if kept.source != source:
        raise ForeignStateError(
            f"the triggerless state in {state.root} was kept for the tables of {kept.source}, and this "
            f"configuration reads those of {source}: {remedy}")
    if kept_tables.keys() != tables.keys():
        raise ForeignStateError(
            f"the triggerless state in {state.root} was kept for the tables {sorted(kept_tables)}, and "
            f"publisher.tables now names {sorted(tables)}: {remedy}")
    for name, layout in tables.items():
        if [c for c, _ in kept_tables[name].key] != [c for c, _ in layout.key]:
            raise ForeignStateError(
                f"the triggerless state in {state.root} keys table {layout.name} by "
                f"{[c for c, _ in kept_tables[name].key]}, and its key is now {[c for c, _ in layout.key]}: {remedy}")


def publish_differences(settings: ComparisonSettings, current: Generation | None, read: Generation,
                        result: ComparisonResult, spark: Callable[[], Any] | None = None) -> None:
    """Each table's differences, bucket by bucket, written as documents (and changes, where a
    change format is on): in the driver, under one cycle number, or (a large read, Spark at hand)
    by Spark's tasks, a cycle number each."""
    formats = None
    if settings.formats.publishes_changes:
        published = {t.name: t for t in settings.tables if t.name not in settings.lookups}
        formats = CycleFormats(settings.output, read.number, published, settings.schema_label, settings.formats)
    jobs = bucket_jobs(settings.tables, settings.schema_label, current, read, settings.kinds, settings.lookups,
                       formats.started if formats is not None else ())
    buckets = [(job, bucket) for job in jobs for bucket in range(job.layout.buckets)]
    if spark is not None and on_spark(settings.master, sum(job.layout.rows for job in jobs), len(buckets)):
        from publisher.triggerless.spark import publish_on_spark

        done, result.documents, result.dangling_references, result.file_cycles = publish_on_spark(
            spark(), buckets, settings.output, settings.batch_size)
    else:
        documents = Documents(settings.output, settings.batch_size)
        done = []
        for published_bucket in in_threads(publish_bucket, buckets):
            documents.add(published_bucket.operations)
            done.append(published_bucket)
        result.documents = documents.finish()
        result.dangling_references = documents.dangling
        result.file_cycles = [] if documents.cycle is None else [documents.cycle]
    if formats is not None:
        result.formats = formats.finish([PartWritten(job.first_bucket + bucket, bucket_done.formats)
                                         for (job, bucket), bucket_done in zip(buckets, done, strict=True)])
    rejects: list[dict[str, Any]] = []
    for job in jobs:
        result.tables[job.layout.name] = TableCompared(rows=job.layout.rows)
    for bucket_done in done:
        counts = result.tables[bucket_done.table]
        for kind, count in bucket_done.counts.items():
            setattr(counts, kind, getattr(counts, kind) + count)
        rejects += bucket_done.rejects
    if rejects:
        append_rejects(settings.output, rejects)
        result.rejected = len(rejects)


def on_spark(master: str, rows: int, buckets: int) -> bool:
    """Whether a cycle compares its buckets on Spark's tasks: a large one, on a cluster."""
    return rows >= PARALLEL_ROWS and buckets > 1 and not master.startswith(DRIVER_MASTERS)


Done = TypeVar("Done")


def in_threads(work: Callable[..., Done], jobs: Sequence[tuple[Any, ...]]) -> Iterator[Done]:
    """`work(*job)` of each job, DRIVER_THREADS at a time (pyarrow's joins and reads let go of
    the GIL), handed over in the jobs' order; at most DRIVER_THREADS results wait at once."""
    with ThreadPoolExecutor(max_workers=DRIVER_THREADS) as pool:
        running: collections.deque[Future[Done]] = collections.deque()
        for job in jobs:
            running.append(pool.submit(work, *job))
            if len(running) >= DRIVER_THREADS:
                yield running.popleft().result()
        while running:
            yield running.popleft().result()


class Documents:
    """A cycle's operations cut into documents of `batch_size` as they come, under one cycle
    number taken when the first is written."""

    def __init__(self, output: Path, batch_size: int) -> None:
        self.output = output
        self.batch_size = batch_size
        self.pending: list[bytes] = []
        self.cycle: int | None = None
        self.written = 0
        self.dangling = 0

    def add(self, operations: list[bytes]) -> None:
        self.pending += operations
        whole = len(self.pending) - len(self.pending) % self.batch_size
        if whole:
            self._write(self.pending[:whole])
            self.pending = self.pending[whole:]

    def finish(self) -> int:
        if self.pending:
            self._write(self.pending)
            self.pending = []
        return self.written

    def _write(self, operations: list[bytes]) -> None:
        if self.cycle is None:
            self.cycle = next_cycle_number(self.output)
        written = write_documents(operations, self.output, self.cycle, self.batch_size, self.written)
        self.written += len(written)
        self.dangling += sum(document.dangling for document in written)
