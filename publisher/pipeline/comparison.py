"""A triggerless cycle: the published tables read whole, compared with the state the previous
cycle kept, and what changed published (README, "Triggerless publication").

read the tables (or take the read an earlier try of this cycle made durable) → compare each
bucket of the state with the same bucket of the read → build the operations (`rules.comparison`)
→ write the documents → the read becomes the state.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine, func, select, text

from publisher import failpoints
from publisher.capture.install import published_tables
from publisher.config import Config, StartupOption
from publisher.database import association_schema, table_schema
from publisher.model.catalog import ColumnInfo, TableInfo, reflect_catalog
from publisher.model.operation import OperationKind
from publisher.model.values import ValueType
from publisher.outputs.comparison_state import (
    KEY,
    BucketWriter,
    ComparisonState,
    ForeignStateError,
    Generation,
    TableLayout,
    buckets_for,
    read_bucket,
    value_name,
)
from publisher.outputs.cycle_files import next_cycle_number
from publisher.outputs.documents import write_documents
from publisher.outputs.outcomes import append_rejects
from publisher.pipeline.queryback import QueryBackContext, scan_columns
from publisher.rules.comparison import changed, compared_operations, kinds_of

READ_ROWS = 20_000
"""Rows a table is read and written to its state's buckets at a time."""
PLACE_BITS = 32
"""An operation's event-id: the generation its cycle reads, then its place in the cycle."""


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

    @classmethod
    def of(cls, config: Config, engine: Engine) -> ComparisonSettings:
        schema = table_schema(config, engine)
        catalog = reflect_catalog(engine, schema, published_tables(config, engine))
        found = {name.lower() for name in catalog.tables}
        missing = [name for name in config.publisher.tables if name.lower() not in found]
        if missing:
            raise ForeignStateError(f"publisher.tables: {', '.join(missing)} found in no table or view with a key "
                                    f"(a view's key is its pk_ columns) in {schema or 'the database'}")
        tables = tuple(catalog.tables[name] for name in sorted(catalog.tables, key=str.lower))
        return cls(Path(config.output.directory).resolve(), config.publisher.batch_size,
                   config.publisher.startup_option, tables, schema, association_schema(config, engine),
                   config.database.sqlalchemy_url())


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
    tables: dict[str, TableCompared] = field(default_factory=dict)
    documents: int = 0
    rejected: int = 0
    repeated: bool = False
    """The cycle compared a read an earlier, interrupted try made (and published it again)."""
    recorded_only: bool = False
    """The first cycle under startup_option = "future": the tables recorded, nothing published."""
    seconds: float = 0.0

    @property
    def operations(self) -> int:
        return sum(t.add + t.modify + t.delete for t in self.tables.values())

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
            "documents": self.documents, "rejected": self.rejected, "repeated": self.repeated,
            "recorded_only": self.recorded_only,
            "tables": {name: vars(t) for name, t in self.tables.items()}, "seconds": round(self.seconds, 3),
        }


def run_comparison_cycle(engine: Engine, config: Config) -> ComparisonResult:
    """One triggerless cycle, start to end; the caller holds the state's lock."""
    started = time.monotonic()
    settings = ComparisonSettings.of(config, engine)
    state = ComparisonState(settings.output)
    current = state.current()
    number = 1 if current is None else current.number + 1
    layouts = [layout_of(table) for table in settings.tables]
    if current is not None:
        refuse_foreign(current, layouts, state)
    result = ComparisonResult(number)
    read = state.read_done(number)
    if read is None:
        read = read_tables(engine, settings, state, number, layouts, result)
    else:
        result.repeated = True
        refuse_foreign(read, layouts, state)
    if current is None and settings.startup == StartupOption.FUTURE:
        result.recorded_only = True
        for layout in read.tables:
            result.tables[layout.name] = TableCompared(rows=layout.rows)
    else:
        publish_differences(settings, current, read, result)
    failpoints.reached("triggerless_state")
    state.promote(read)
    result.seconds = time.monotonic() - started
    return result


def layout_of(table: TableInfo) -> TableLayout:
    return TableLayout(table.name, tuple((name, kind.value) for name, kind in table.key_columns),
                       tuple((c.name, c.value_type.value) for c in table.value_columns), 0)


def refuse_foreign(kept: Generation, layouts: Sequence[TableLayout], state: ComparisonState) -> None:
    """A state kept for other tables or other keys is never compared with (it would publish
    every row as changed, or objects under other names): say what differs and what to do."""
    def named(layouts: Sequence[TableLayout]) -> dict[str, TableLayout]:
        return {layout.name.lower(): layout for layout in layouts}

    kept_tables, tables = named(kept.tables), named(layouts)
    remedy = (f"to publish these tables from a new start, move {state.root} away (the next cycle then "
              "follows publisher.startup_option), or point output.directory at a new directory")
    if kept_tables.keys() != tables.keys():
        raise ForeignStateError(
            f"the triggerless state in {state.root} was kept for the tables {sorted(kept_tables)}, and "
            f"publisher.tables now names {sorted(tables)}: {remedy}")
    for name, layout in tables.items():
        if [c.lower() for c, _ in kept_tables[name].key] != [c.lower() for c, _ in layout.key]:
            raise ForeignStateError(
                f"the triggerless state in {state.root} keys table {layout.name} by "
                f"{[c for c, _ in kept_tables[name].key]}, and its key is now {[c for c, _ in layout.key]}: {remedy}")


def read_tables(engine: Engine, settings: ComparisonSettings, state: ComparisonState, number: int,
                layouts: Sequence[TableLayout], result: ComparisonResult) -> Generation:
    """Every published table read whole into generation `number`'s buckets, made durable."""
    directory = state.reading(number)
    ctx = QueryBackContext(settings.url, settings.schema, {t.name: t for t in settings.tables})
    read = []
    rejects: list[dict[str, Any]] = []
    for index, (table, layout) in enumerate(zip(settings.tables, layouts, strict=True)):
        layout = TableLayout(layout.name, layout.key, layout.columns, buckets_for(count_rows(engine, settings, table)))
        writer = BucketWriter(directory, index, layout)
        try:
            for chunk in scan_columns(ctx, table, READ_ROWS):
                keys, texts = published_values(table, chunk.keys, chunk.texts, chunk.problems, rejects)
                writer.write(keys, texts)
        finally:
            writer.close()
        read.append(TableLayout(layout.name, layout.key, layout.columns, layout.buckets, writer.rows))
    if rejects:
        append_rejects(settings.output, rejects)
        result.rejected = len(rejects)
    return state.finish_read(number, directory, read)


def count_rows(engine: Engine, settings: ComparisonSettings, table: TableInfo) -> int:
    """About how many rows the table holds, to cut its state into buckets."""
    quoted = engine.dialect.identifier_preparer.quote
    name = quoted(table.name) if settings.schema is None else f"{quoted(settings.schema)}.{quoted(table.name)}"
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(text(name))).scalar_one())


def published_values(
    table: TableInfo, keys: list[str], texts: list[list[Any]], problems: list[dict[str, str]],
    rejects: list[dict[str, Any]],
) -> tuple[list[str], list[list[Any]]]:
    """The rows as the state keeps them: a value that cannot be published kept as none (the
    consumer cannot hold it), a row whose key cannot be published left out; each said in
    rejects.jsonl, with its table, key, column and why."""
    keep = []
    positions = {c.name: i for i, c in enumerate(table.value_columns)}
    for row, troubles in enumerate(problems):
        if len(troubles) == len(table.columns):
            reason = next(iter(troubles.values()))
            rejects.append({"table_name": table.name, "table_key": keys[row], "column_name": None, "reason": reason})
            continue
        for column, reason in troubles.items():
            rejects.append({"table_name": table.name, "table_key": keys[row], "column_name": column, "reason": reason})
            texts[positions[column]][row] = None
        keep.append(row)
    if len(keep) == len(keys):
        return keys, texts
    return [keys[r] for r in keep], [[column[r] for r in keep] for column in texts]


def publish_differences(settings: ComparisonSettings, current: Generation | None, read: Generation,
                        result: ComparisonResult) -> None:
    """Each table's differences, bucket by bucket, written as documents in one cycle's files."""
    documents = Documents(settings.output, settings.batch_size)
    place = 0
    kept = {layout.name.lower(): (index, layout) for index, layout in enumerate(current.tables)} if current else {}
    for index, layout in enumerate(read.tables):
        table = next(t for t in settings.tables if t.name.lower() == layout.name.lower())
        counts = result.tables[layout.name] = TableCompared(rows=layout.rows)
        old = kept.get(layout.name.lower())
        for bucket in range(layout.buckets):
            new_rows = read_bucket(read.directory, index, layout, bucket, layout.buckets)
            old_rows = (read_bucket(current.directory, old[0], old[1], bucket, layout.buckets)
                        if current is not None and old is not None else None)
            differences = compare_bucket(table, layout, old_rows, old[1] if old else None, new_rows)
            if not len(differences):
                continue
            kinds = differences.column("kind")
            for kind in OperationKind:
                count = pc.sum(pc.equal(kinds, kind.value)).as_py() or 0
                setattr(counts, kind.value, getattr(counts, kind.value) + count)
            event_ids = pa.array(range((read.number << PLACE_BITS) + place,
                                       (read.number << PLACE_BITS) + place + len(differences)), pa.int64())
            place += len(differences)
            associations = pc.binary_join_element_wise(
                differences.column(KEY), f",table={table.name},schema={settings.schema_label}", "")
            columns = [*table.value_columns, *lost_columns(layout, old[1] if old else None)]
            old_texts = [differences.column(f"o{i}").combine_chunks() for i in range(len(columns))]
            new_texts = [differences.column(f"n{i}").combine_chunks() for i in range(len(columns))]
            documents.add(compared_operations(table.name, columns, associations.combine_chunks(),
                                              kinds.combine_chunks(), old_texts, new_texts, event_ids).to_pylist())
    result.documents = documents.finish()


def lost_columns(layout: TableLayout, old_layout: TableLayout | None) -> list[ColumnInfo]:
    """Value columns the state kept and the table no longer has (a migration dropped them): the
    consumer's values of them are removed, as if they had become NULL."""
    if old_layout is None:
        return []
    now = {name.lower() for name, _ in layout.columns}
    return [ColumnInfo(name, ValueType(kind), False) for name, kind in old_layout.columns if name.lower() not in now]


def compare_bucket(table: TableInfo, layout: TableLayout, old: pa.Table | None, old_layout: TableLayout | None,
                   new: pa.Table) -> pa.Table:
    """The bucket's objects that differ, in key order: `key`, `kind` and each value column's old
    (`o<i>`) and new (`n<i>`) text. The old state's columns are matched by name: a column the
    table gained has no old values, one it lost is no longer published."""
    lost = lost_columns(layout, old_layout)
    count = len(layout.columns) + len(lost)
    new_columns = [new.column(KEY), *(new.column(value_name(i)) for i in range(len(layout.columns))),
                   *(pa.nulls(len(new), pa.string()) for _ in lost)]
    renamed_new = pa.table(new_columns, names=[KEY, *(f"n{i}" for i in range(count))]).append_column(
        "in_new", pa.array([True] * len(new), pa.bool_()))
    if old is None or old_layout is None:
        old = pa.table({KEY: pa.array([], pa.string())})
        old_layout = TableLayout(layout.name, layout.key, (), layout.buckets)
    positions = {name.lower(): i for i, (name, _) in enumerate(old_layout.columns)}
    old_columns = [old.column(KEY)]
    for name in [*(name for name, _ in layout.columns), *(c.name for c in lost)]:
        at = positions.get(name.lower())
        old_columns.append(old.column(value_name(at)) if at is not None else pa.nulls(len(old), pa.string()))
    renamed_old = pa.table(old_columns, names=[KEY, *(f"o{i}" for i in range(count))]).append_column(
        "in_old", pa.array([True] * len(old), pa.bool_()))
    joined = renamed_old.join(renamed_new, KEY, join_type="full outer")
    in_old = pc.fill_null(joined.column("in_old"), False)
    in_new = pc.fill_null(joined.column("in_new"), False)
    differs = pc.not_equal(in_old, in_new)
    for i in range(count):
        differs = pc.or_(differs, pc.and_(in_new, changed(joined.column(f"o{i}"), joined.column(f"n{i}"))))
    found = joined.filter(differs)
    kinds = kinds_of(pc.fill_null(found.column("in_old"), False), pc.fill_null(found.column("in_new"), False))
    found = found.append_column("kind", kinds).drop_columns(["in_old", "in_new"])
    return found.sort_by(KEY)


class Documents:
    """A cycle's operations cut into documents of `batch_size` as they come, under one cycle
    number taken when the first is written."""

    def __init__(self, output: Path, batch_size: int) -> None:
        self.output = output
        self.batch_size = batch_size
        self.pending: list[bytes] = []
        self.cycle: int | None = None
        self.written = 0

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
        self.written += len(write_documents(operations, self.output, self.cycle, self.batch_size, self.written))
