"""One bucket of a triggerless cycle's comparison: the state's rows of the bucket and the read's,
joined by key, and what differs published (`rules.comparison`). A bucket is compared whole in
one place (the driver, or one Spark task), so `publish_bucket` is all either path runs.

An operation's event-id is its generation, its bucket among the cycle's and its place in the
bucket: `generation × 2^32 + bucket × 2^20 + place`. A comparison repeated after a crash
compares the same read with the same state, so it gives every operation the same event-id
again, whichever path runs it and however its buckets are spread.
"""
from __future__ import annotations

import collections
import datetime as dt
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.canonical import canonical_key_of
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.keys import KeyPart, format_key
from publisher.model.operation import OperationKind
from publisher.model.values import xml_problem
from publisher.outputs.formats import StartedFormats, write_part
from publisher.pipeline.row_reading import published_column
from publisher.rules.changes import StampedChange
from publisher.triggerless.changes import compared_changes
from publisher.triggerless.children import (
    ChildJob,
    ChildRows,
    Referenced,
    child_rows,
    multi_valued_changes,
    objects_changed,
)
from publisher.triggerless.differences import compare_bucket, lost_columns
from publisher.triggerless.rules import changed, compared_operations
from publisher.triggerless.state import (
    HASH,
    Generation,
    TableLayout,
    keep_held,
    key_name,
    key_names,
    read_bucket,
    schema_of,
    value_name,
)

GENERATION_BITS = 32
BUCKET_BITS = 20
"""An event-id's parts (`publish_bucket`): 2^12 buckets in a cycle, 2^20 operations in a bucket."""
MAX_BUCKETS = 1 << (GENERATION_BITS - BUCKET_BITS)
PART_BYTES = 64 << 20
"""Texts of a bucket's differences published at a time: a `<modify>` holds its old and new
values, escaped, so a part's documents stay well inside the 2 GiB an array of them holds."""


class ComparisonLimitError(ValueError):
    """More buckets, or more differences in one, than an event-id can number."""


@dataclass(frozen=True)
class BucketJob:
    """What comparing a table's buckets needs: picklable, for a Spark task."""

    table: TableInfo
    schema_label: str
    layout: TableLayout
    read: Path
    table_index: int
    old: TableLayout | None
    """The state's layout of the table; None: the state holds none of its rows (a first cycle)."""
    kept: Path | None
    kept_index: int
    generation: int
    first_bucket: int
    """The number of the table's first bucket among the cycle's."""
    children: tuple[ChildJob, ...] = ()
    """A logical class's multi-valued attributes."""
    referenced: tuple[TableInfo, ...] = ()
    """The classes its references name, and where the read holds them."""
    referenced_at: tuple[tuple[str, int], ...] = ()
    kinds: frozenset[str] = frozenset(kind.value for kind in OperationKind)
    """The operations published (a subscription's); the others only advance the state."""
    formats: StartedFormats = ()
    """The change tables and messages that are on, started for the cycle (its changes a part per bucket)."""
    read_at: dt.datetime | None = None
    """When the read was made: the time of the cycle's changes."""

    def references(self) -> Referenced:
        return Referenced({t.name: t for t in self.referenced}, self.schema_label, self.read, dict(self.referenced_at))


@dataclass
class BucketDone:
    table: str
    operations: list[bytes]
    counts: dict[str, int] = field(default_factory=dict)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    formats: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """What the bucket's part of each change format wrote (`formats.PartWritten.counts`)."""


def bucket_jobs(tables: Sequence[TableInfo], schema_label: str, current: Generation | None, read: Generation,
                kinds: frozenset[str] = BucketJob.kinds, lookups: frozenset[str] = frozenset(),
                formats: StartedFormats = ()) -> list[BucketJob]:
    """A job per published table of the read; a class's child tables go with their parent, and
    tables read only for the keys references name (`lookups`) publish nothing."""
    kept = {layout.identity: (index, layout) for index, layout in enumerate(current.tables)} if current else {}
    at = {layout.name: index for index, layout in enumerate(read.tables) if not layout.parent}
    named = {t.name: t for t in tables}
    jobs = []
    first = 0
    for index, layout in enumerate(read.tables):
        if layout.parent or layout.name in lookups:
            continue
        table = named[layout.name]
        kept_index, old = kept.get(layout.identity, (0, None))
        targets = sorted({target for _, target in table.references})
        jobs.append(BucketJob(table, schema_label, layout, read.directory, index, old,
                              current.directory if current is not None else None, kept_index, read.number, first,
                              child_jobs(table, read, kept), tuple(named[t] for t in targets),
                              tuple((t, at[t]) for t in targets), kinds, formats, read.read_at))
        first += layout.buckets
    if first > MAX_BUCKETS:
        raise ComparisonLimitError(f"the published tables hold {first} buckets of about "
                                   f"{read.tables[0].rows // max(1, read.tables[0].buckets)} rows, and an event-id "
                                   f"numbers at most {MAX_BUCKETS}: publish fewer tables per configuration")
    return jobs


def child_jobs(table: TableInfo, read: Generation,
               kept: dict[tuple[str, str], tuple[int, TableLayout]]) -> tuple[ChildJob, ...]:
    """The class's attributes the read holds child rows of (a read made before an attribute was
    configured holds none: the next cycle's publishes its values)."""
    multi = {m.attribute.name: m for m in table.multi_valued}
    jobs = []
    for index, layout in enumerate(read.tables):
        if layout.parent == table.name and layout.attribute in multi:
            kept_index, old = kept.get(layout.identity, (0, None))
            jobs.append(ChildJob(multi[layout.attribute], layout, index, old, kept_index))
    return tuple(jobs)


def publish_bucket(job: BucketJob, bucket: int) -> BucketDone:
    """The bucket's differences as operations, in key order, with their counts by kind and the
    values that cannot be published (rejects.jsonl's lines). They are published in parts of at
    most `PART_BYTES` of texts (`parts_of`), numbered on from one part to the next."""
    layout, table = job.layout, job.table
    new_rows = read_bucket(job.read, job.table_index, layout, bucket, layout.buckets)
    old_rows = None if job.old is None or job.kept is None else read_bucket(
        job.kept, job.kept_index, job.old, bucket, layout.buckets, held=True)
    children = [child_rows(child, job.read, job.kept, bucket, layout.buckets) for child in job.children]
    differences, unkeyed = compare_bucket(layout, old_rows, job.old, new_rows, objects_changed(children,
                                                                                              key_names(layout)))
    done = BucketDone(table.name, [], {kind.value: 0 for kind in OperationKind})
    done.rejects += unkeyed_rejects(table, unkeyed)
    if len(unkeyed) and old_rows is not None:
        keep_shared_as_held(job, bucket, old_rows, unkeyed)
    if not len(differences):
        return done
    first = (job.generation << GENERATION_BITS) + ((job.first_bucket + bucket) << BUCKET_BITS)
    changes = (publish_part(job, part, children, first, done) for part in parts_of(differences))
    if job.formats and job.read_at is not None:
        done.formats = write_part(itertools.chain.from_iterable(changes), job.formats, job.first_bucket + bucket).counts
    else:
        collections.deque(changes, maxlen=0)  # the parts published, their changes unused
    return done


def publish_part(job: BucketJob, differences: pa.Table, children: Sequence[ChildRows], first: int,
                 done: BucketDone) -> Iterator[StampedChange]:
    """Some of a bucket's differences published: their operations, counts and rejects added to
    `done`, numbered from `first` on after the operations it holds; their changes, for the
    change formats."""
    table = job.table
    keys, kinds, found = published_keys(table, differences, done.rejects)
    tracked = pc.is_in(kinds, value_set=pa.array(sorted(job.kinds), pa.string()))
    if not pc.all(tracked).as_py():  # a subscription's untracked kinds of change: the state advances alone
        keys = [key for key, kept in zip(keys, tracked.to_pylist(), strict=True) if kept]
        kinds, found = kinds.filter(tracked), found.filter(tracked)
    columns = [*table.value_columns, *lost_columns(job.layout, job.old)]
    old_texts = [published(table, c, found.column(f"o{i}"), keys, None) for i, c in enumerate(columns)]
    new_texts = [published(table, c, found.column(f"n{i}"), keys, done.rejects) for i, c in enumerate(columns)]
    as_read = (list(old_texts), list(new_texts))  # for the change formats: a reference as its column holds it
    referenced = job.references()
    refs = publish_references(table, referenced, columns, old_texts, new_texts)
    more = [multi_valued_changes(table, child, rows, found, keys, kinds, done.rejects, referenced)
            for child, rows in zip(job.children, children, strict=True)]
    says = pc.not_equal(kinds, OperationKind.MODIFY.value)
    for before, after in zip(old_texts, new_texts, strict=True):
        says = pc.or_(says, changed(before, after))
    for fragment in more:
        says = pc.or_(says, pc.not_equal(fragment, ""))
    if not pc.all(says).as_py():  # texts that differ and publish alike (one value no document carries, another)
        keys = [key for key, kept in zip(keys, says.to_pylist(), strict=True) if kept]
        kinds, found = kinds.filter(says), found.filter(says)
        old_texts, new_texts, more = ([a.filter(says) for a in arrays] for arrays in (old_texts, new_texts, more))
        as_read = ([a.filter(says) for a in as_read[0]], [a.filter(says) for a in as_read[1]])
        refs = [tuple(None if r is None else r.filter(says) for r in pair) for pair in refs]  # type: ignore[misc]
    if len(done.operations) + len(keys) > 1 << BUCKET_BITS:
        raise ComparisonLimitError(f"{table.name}: more than {1 << BUCKET_BITS} differences in one bucket, more "
                                   f"than an event-id numbers; the table grew while it was read")
    for kind in OperationKind:
        done.counts[kind.value] += pc.sum(pc.equal(kinds, kind.value)).as_py() or 0
    first += len(done.operations)
    event_ids = pa.array(range(first, first + len(keys)), pa.int64())
    associations = pc.binary_join_element_wise(
        pa.array(keys, pa.string()), f",table={table.name},schema={job.schema_label}", "")
    done.operations += compared_operations(table.name, columns, associations, kinds, old_texts, new_texts,
                                           event_ids, refs, more).to_pylist()
    if not job.formats or job.read_at is None:
        return iter(())
    key_texts = [published(table, c, found.column(key_name(i)), keys, None) for i, c in enumerate(
        c for c in table.columns if c.is_key)]
    return compared_changes(table, columns, kinds, key_texts, *as_read, event_ids, job.read_at)


def parts_of(differences: pa.Table) -> Iterator[pa.Table]:
    """`differences` cut, in order, into parts whose texts total at most `PART_BYTES` (or one
    row, where one row's are more), each with its texts as `string` again: a bucket's may be
    `large_string`, more than one array of `string` holds (`differences.compare_bucket`)."""
    sizes = np.zeros(len(differences), np.int64)
    for column in differences.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            sizes += pc.fill_null(pc.binary_length(column), 0).combine_chunks().to_numpy()
    ends = np.cumsum(sizes)
    start = 0
    while start < len(differences):
        end = max(start + 1, int(np.searchsorted(ends, ends[start] - sizes[start] + PART_BYTES, side="right")))
        part = differences.slice(start, end - start)
        if any(pa.types.is_large_string(t) for t in part.schema.types):  # its texts copied out, then narrowed
            part = part.take(pa.array(np.arange(len(part)))).cast(pa.schema(
                [pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type) else f for f in part.schema]))
        yield part
        start = end


def publish_references(table: TableInfo, referenced: Referenced, columns: Sequence[ColumnInfo],
                       old_texts: list[pa.Array],
                       new_texts: list[pa.Array]) -> list[tuple[pa.Array | None, pa.Array | None]]:
    """The reference columns' texts replaced by the associations they publish; the old and new
    association-refs of each column (None for another column)."""
    refs: list[tuple[pa.Array | None, pa.Array | None]] = []
    for index, column in enumerate(columns):
        target = table.reference(column.name)
        if target is None:
            refs.append((None, None))
            continue
        old_texts[index], old_refs = referenced.published(target, old_texts[index])
        new_texts[index], new_refs = referenced.published(target, new_texts[index])
        refs.append((old_refs, new_refs))
    return refs


def published(table: TableInfo, column: ColumnInfo, texts: pa.ChunkedArray, keys: list[str],
              rejects: list[dict[str, Any]] | None) -> pa.Array:
    """A column of the differing objects' values as published. One that cannot be is published
    as none (no document can carry it): said in rejects.jsonl (`rejects`) with its table, key,
    column and why, where it is the table's value now; the state's old value was said before."""
    values, problems = published_column(table, column, texts.combine_chunks())
    if rejects is not None:
        rejects += [{"table_name": table.name, "table_key": keys[row], "column_name": column.name, "reason": reason}
                    for row, reason in problems.items()]
    return values


def published_keys(table: TableInfo, differences: pa.Table,
                   rejects: list[dict[str, Any]]) -> tuple[list[str], pa.Array, pa.Table]:
    """The differing objects' canonical keys, their operations' kinds and their rows; a row
    whose key cannot be published is left out, said in rejects.jsonl (`rejects`)."""
    spelling = table.key_columns
    texts = [differences.column(key_name(i)).to_pylist() for i in range(len(spelling))]
    keys, kept = [], []
    for row, key_texts in enumerate(zip(*texts, strict=True)):
        try:
            key = canonical_key_of([str(t) for t in key_texts], spelling)
            problem = xml_problem(key)
            if problem is not None:
                raise ValueError(problem)
        except ValueError as exc:
            shown = format_key(KeyPart(name, str(t)) for (name, _), t in zip(spelling, key_texts, strict=True))
            rejects.append({"table_name": table.name, "table_key": shown, "column_name": None,
                            "reason": f"{table.name}: the row's key cannot be published: {exc}"})
            continue
        keys.append(key)
        kept.append(row)
    found = differences if len(kept) == len(differences) else differences.take(pa.array(kept, pa.int64()))
    return keys, found.column("kind").combine_chunks(), found


def unkeyed_rejects(table: TableInfo, unkeyed: pa.Table) -> list[dict[str, Any]]:
    spelling = table.key_columns
    texts = [unkeyed.column(key_name(i)).to_pylist() for i in range(len(spelling))]
    rejects = []
    for key_texts, count in zip(zip(*texts, strict=True), unkeyed.column("count_all").to_pylist(), strict=True):
        shown = format_key(KeyPart(name, str(t)) for (name, _), t in zip(spelling, key_texts, strict=True))
        reason = (f"{table.name}: a key column is NULL" if None in key_texts else
                  f"{table.name}: {count} rows share this key (as the table's key columns read)")
        rejects.append({"table_name": table.name, "table_key": shown, "column_name": None,
                        "reason": f"{reason}; no object can be told apart by it, none of them is published"})
    return rejects


def keep_shared_as_held(job: BucketJob, bucket: int, old_rows: pa.Table, unkeyed: pa.Table) -> None:
    """What the consumer holds of the keys the read found shared (the state's rows, and its
    class's child rows), kept in the read's generation for the next cycle to compare with."""
    if job.old is None or job.kept is None:
        return
    keep_held(job.read, job.table_index, bucket, held_rows(job.layout, job.old, old_rows, unkeyed))
    for child in job.children:
        if child.old is not None:
            kept = read_bucket(job.kept, child.kept_index, child.old, bucket, job.layout.buckets, held=True)
            keep_held(job.read, child.table_index, bucket, held_rows(child.layout, child.old, kept, unkeyed))


def held_rows(layout: TableLayout, old_layout: TableLayout, old: pa.Table, unkeyed: pa.Table) -> pa.Table:
    """The state's rows of the keys the read found shared by rows: what the consumer holds of
    them (where the state held a key in several rows too, the consumer holds nothing of it, and
    the rows kept say so again). In the read's layout: a column the table gained since has no
    value there, as the consumer has none."""
    keys = key_names(layout)
    held = old.join(unkeyed.select(keys), keys, join_type="left semi")
    positions = {name: i for i, (name, _) in enumerate(old_layout.columns)}
    values = [held.column(value_name(positions[name])) if name in positions else pa.nulls(len(held), pa.string())
              for name, _ in layout.columns]
    return pa.Table.from_arrays([*(held.column(k) for k in keys), held.column(HASH), *values],
                                schema=schema_of(layout))
