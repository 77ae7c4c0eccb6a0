"""A triggerless cycle's read: every published table (and a class's child tables) read whole, by
one statement each, into the buckets of a new generation of the state, made durable before
anything is compared (`triggerless.cycle`)."""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, func, select, text

from publisher.model.catalog import MultiValued, TableInfo
from publisher.pipeline.queryback import QueryBackContext
from publisher.triggerless.state import BucketWriter, ComparisonState, Generation, TableLayout, buckets_for
from publisher.triggerless.table_scan import ScannedRows, scan_table_columns

READ_ROWS = 20_000
"""Rows a table is read and written to its state's buckets at a time."""


def layout_of(table: TableInfo) -> TableLayout:
    return TableLayout(table.name, tuple((name, kind.value) for name, kind in table.key_columns),
                       tuple((c.name, c.value_type.value) for c in table.value_columns), 0)


@dataclass(frozen=True)
class Member:
    """A table read for a published table: the table itself, or (a logical class) a child table
    read with its parent's key (`linked`)."""

    table: TableInfo
    layout: TableLayout
    linked: tuple[MultiValued, TableInfo] | None = None


def class_layouts(table: TableInfo) -> list[Member]:
    """The tables read for a published table, as read and as kept: the table, then (a logical
    class) each child table, keyed by its parent's key, with the attribute's one value column."""
    members = [Member(table, layout_of(table))]
    keys = tuple(c for c in table.columns if c.is_key)
    for multi in table.multi_valued:
        child = TableInfo(multi.table, (*keys, multi.value))
        members.append(Member(child, dataclasses.replace(
            layout_of(child), columns=((multi.value.name, multi.attribute.value_type.value),),
            parent=table.name, attribute=multi.attribute.name), (multi, table)))
    return members


def read_tables(engine: Engine, ctx: QueryBackContext, state: ComparisonState, number: int,
                current: Generation | None, source: str) -> Generation:
    """Every published table (and child table) read whole into generation `number`'s buckets,
    made durable. A class's tables share its buckets, cut for the most rows, or bytes of them,
    one of them held when the last cycle read it (rows counted only the first time), so that an
    object's child rows are compared in its bucket. `source` names where they were read (`source_of`)."""
    read_before = {layout.identity: layout for layout in current.tables} if current is not None else {}
    read_at = dt.datetime.now(dt.UTC)
    directory = state.reading(number)
    read: list[TableLayout] = []
    for table in ctx.tables.values():
        members = class_layouts(table)
        held = [read_before.get(member.layout.identity) for member in members]
        buckets = max(buckets_for(count_rows(engine, ctx.schema, member.table)) if last is None
                      else buckets_for(last.rows, last.bytes) for member, last in zip(members, held, strict=True))
        for member in members:
            read.append(read_table(ctx, directory, len(read), dataclasses.replace(
                member, layout=dataclasses.replace(member.layout, buckets=buckets))))
    return state.finish_read(number, directory, read, read_at, source)


def read_table(ctx: QueryBackContext, directory: Path, index: int, member: Member) -> TableLayout:
    """One table read whole into its buckets."""
    writer = BucketWriter(directory, index, member.layout)
    try:
        write_while_reading(writer, scan_table_columns(ctx, member.table, READ_ROWS, member.linked))
    finally:
        writer.close()
    return dataclasses.replace(member.layout, rows=writer.rows, bytes=writer.bytes)


def write_while_reading(writer: BucketWriter, scanned: Iterator[ScannedRows]) -> None:
    """Each batch of rows written to the buckets by a thread of its own while the next is read."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        writing: Future[None] | None = None
        for rows in scanned:
            if writing is not None:
                writing.result()
            writing = pool.submit(writer.write, rows.keys, rows.values)
        if writing is not None:
            writing.result()


def count_rows(engine: Engine, schema: str | None, table: TableInfo) -> int:
    """About how many rows the table holds, to cut its state into buckets."""
    quoted = engine.dialect.identifier_preparer.quote
    name = quoted(table.name) if schema is None else f"{quoted(schema)}.{quoted(table.name)}"
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(text(name))).scalar_one())
