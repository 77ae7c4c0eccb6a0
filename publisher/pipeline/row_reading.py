"""How a table's rows are read and published: every column selected as the text its trigger
logs it as, keys compared as typed values, and the values read turned into what is published,
a column at a time, with the rows whose value cannot be published and why. Query-back, the
snapshots and the triggerless scans all read rows this way.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Dialect,
    MetaData,
    Select,
    Table,
    and_,
    bindparam,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.types import NullType

from publisher.dialects import dialect_of
from publisher.model.canonical import bound_value, canonical_key_column
from publisher.model.catalog import ColumnInfo, MultiValued, TableInfo
from publisher.model.keys import KeyKind, KeyPart, format_key
from publisher.model.plain_times import logged_times
from publisher.model.values import BadValueError, ValueType, logged_unchanged_as
from publisher.model.valuetext import encode_read, read_value_sql, value_text_sql

Published = tuple[str, dict[str, str | None], dict[str, str]]
"""(canonical_key, published text per value column, problems per value column) of one row."""


class RowReading:
    """How one table's rows are read: every column as its logged text, keys compared as typed
    values (or as that text, where a column's text is not exact: see `matched_as_text`)."""

    def __init__(
        self, table: TableInfo, schema: str | None, dialect: Dialect, spelling: TableInfo | None = None
    ) -> None:
        self.table = table
        self.spelling = (spelling or table).key_columns
        """How the rows' keys are spelled: a child table's, as its parent's key (`spelling`)."""
        self.sql_table = Table(table.name, MetaData(), *(Column(c.name) for c in table.columns), schema=schema)
        quote = dialect.identifier_preparer.quote
        self.texts: dict[str, ColumnElement[Any]] = {
            c.name: literal_column(value_text_sql(dialect.name, quote(c.name), c.value_type, c.sql_type))
            for c in table.columns
        }
        """Each column's text as logged: what a key is compared by (`key_in`)."""
        self.selected: list[ColumnElement[Any]] = [
            self.texts[c.name] if c.is_key else literal_column(read_value_sql(dialect.name, quote(c.name), c.value_type,
                                                                              c.sql_type))
            for c in table.columns]
        """What is selected of each column: a value column's as `read_value_sql` reads it."""
        self.keys = [c for c in table.columns if c.is_key]
        self.lists = dialect_of(dialect.name).value_lists()
        self.plain = all(c.in_arrays for c in self.keys)
        """The key's columns are of plain types, whose values the dialect names as it names a
        list (`ValueLists.key_among`, `keys_per_select`)."""
        names = [c.name for c in table.columns]
        self.values = [(names.index(c.name), c) for c in table.value_columns]
        self.key_indices = [names.index(name) for name, _ in table.key_columns]

    def select(self) -> Select[Any]:
        columns = (text.label(f"c{i}") for i, text in enumerate(self.selected))
        return select(*columns).select_from(self.sql_table)

    def key_in(self, keys: Sequence[tuple[int | str, ...]]) -> ColumnElement[bool]:
        """Keys bind untyped, so the database reads them as its key columns' types (uuid, date, …);
        SQLAlchemy would otherwise cast text to VARCHAR, which such a column cannot compare with.
        A one-column key of a plain type goes as the database names a list (`ValueLists.key_among`:
        as one array where it can, one parameter instead of one per key)."""
        compared = [self.texts[c.name] if c.matched_as_text else self.sql_table.c[c.name] for c in self.keys]
        plain = all(c.key_kind is not KeyKind.BINARY for c in self.keys)
        bound = keys if plain else [tuple(bound_value(c.key_kind, v) for c, v in zip(self.keys, key, strict=True))
                                    for key in keys]
        if len(compared) == 1:
            if self.plain:
                return self.lists.key_among(compared[0], [b[0] for b in bound])
            return compared[0].in_(bindparam("keys", [b[0] for b in bound], expanding=True, type_=NullType()))
        return tuple_(*compared).in_(bindparam("keys", bound, expanding=True, type_=NullType()))

    def published(self, records: Sequence[Sequence[Any]]) -> list[Published]:
        """Each record as published (`columns`, a row at a time)."""
        return self.published_columns(self.columns(records))

    def published_columns(self, read: ReadColumns) -> list[Published]:
        """Each row read as columns, as published."""
        names = [column.name for _, column in self.values]
        rows = zip(*(t.to_pylist() for t in read.texts), strict=True) if read.texts else iter([()] * len(read.keys))
        out: list[Published] = []
        for row, (key, values) in enumerate(zip(read.keys.to_pylist(), rows, strict=True)):
            published: dict[str, str | None] = dict(zip(names, values, strict=True))
            troubles = read.problems.get(row, {})
            for name in troubles:
                published.pop(name, None)
            out.append((key, published, troubles))
        return out

    def read(self, conn: Connection, query: Select[Any]) -> ReadColumns:
        """The rows `query` (of `select`'s columns) reads: through COPY where the database can,
        so no Python runs per row, else by a cursor."""
        copy = dialect_of(conn).copy_reading()
        columns = None
        if copy is not None and copy.can_copy(conn):
            columns = copy.copy_texts(conn, query, len(query.selected_columns))
        if columns is None:
            return self.columns(conn.execute(query).fetchall())
        return self.read_columns(columns) if len(columns[0]) else self.columns([])

    def columns(self, records: Sequence[Sequence[Any]]) -> ReadColumns:
        """`read_columns` of records read a row at a time."""
        if not records:
            return ReadColumns(pa.array([], pa.string()), [pa.array([], pa.string()) for _ in self.values], {})
        return self.read_columns([list(column) for column in zip(*records, strict=True)])

    def read_columns(self, columns: Sequence[list[Any] | pa.Array]) -> ReadColumns:
        """Rows read as columns (`select`'s, in its order: values as read, or as COPY's texts):
        their canonical keys, published texts per value column, and problems per row. A column's
        values that a column check (`logged_unchanged`) vouches for are taken as read; the others
        are encoded one by one, and say why when they cannot be. A row whose key cannot be
        published has every column as a problem, its key spelled as read."""
        table = self.table
        problems: dict[int, dict[str, str]] = {}
        texts: list[pa.Array] = []
        for index, column in self.values:
            published, troubles = published_column(table, column, columns[index])
            for row, reason in troubles.items():
                problems.setdefault(row, {})[column.name] = reason
            texts.append(published)
        key_texts = [_key_texts(columns[i]) for i in self.key_indices]
        keys, failures = canonical_key_column(key_texts, self.spelling)
        if failures:
            spelled = []
            for row, reason in failures.items():
                parts = zip(self.spelling, (texts[row].as_py() for texts in key_texts), strict=True)
                spelled.append(format_key(KeyPart(name, text) for (name, _), text in parts))
                problem = f"{table.name}: the row's key cannot be published: {reason}"
                problems[row] = {c.name: problem for c in table.columns}
            mask = np.zeros(len(keys), np.bool_)
            mask[list(failures)] = True
            keys = pc.replace_with_mask(keys, pa.array(mask), pa.array(spelled, pa.string()))
        return ReadColumns(keys, texts, problems)


def _key_texts(values: list[Any] | pa.Array) -> pa.Array:
    """A key column's values as the texts a row's key is spelled from: `str` of what was read
    (a NULL, in a view's key, as `None`)."""
    if isinstance(values, pa.Array):
        return pc.fill_null(values, "None")
    return pa.array([str(value) for value in values], pa.string())


class LinkedReading(RowReading):
    """A child table's rows with the key of their parent as the parent holds it: the child joined
    to its parent on the link columns, so that rows link as the database compares them (a
    collation that ignores case or trailing spaces, a number of another scale), under the key
    texts the parent's own read has. A child row whose parent does not exist is not read."""

    def __init__(self, multi: MultiValued, parent: TableInfo, schema: str | None, dialect: Dialect) -> None:
        keys = tuple(c for c in parent.columns if c.is_key)
        value = multi.value
        if value.name in {c.name for c in keys}:  # the row's columns are told apart by name
            value = dataclasses.replace(value, name=f"{value.name} ({multi.table})")
        super().__init__(TableInfo(multi.table, (*keys, value)), schema, dialect)
        quote = dialect.identifier_preparer.quote
        child = Table(multi.table, MetaData(), *(Column(c.name) for c in (*multi.links, multi.value)),
                      schema=schema).alias("c")
        owner = Table(parent.name, MetaData(), *(Column(c.name) for c in keys), schema=schema).alias("p")
        self.joined = child.join(owner, and_(*(child.c[link.name] == owner.c[key.name]
                                               for link, key in zip(multi.links, keys, strict=True))))
        self.selected: list[ColumnElement[Any]] = [
            literal_column(value_text_sql(dialect.name, f"p.{quote(c.name)}", c.value_type, c.sql_type))
            for c in keys]
        self.selected.append(literal_column(read_value_sql(dialect.name, f"c.{quote(multi.value.name)}",
                                                           multi.value.value_type, multi.value.sql_type)))

    def select(self) -> Select[Any]:
        return select(*(text.label(f"c{i}") for i, text in enumerate(self.selected))).select_from(self.joined)


@dataclass(frozen=True)
class ReadColumns:
    """Rows as `RowReading.read_columns` reads them."""

    keys: pa.Array
    """Each row's canonical key."""
    texts: list[pa.Array]
    """Per value column (the table's order), each row's published text (null: NULL)."""
    problems: dict[int, dict[str, str]]
    """By row, the columns whose value cannot be published, with why."""

    def __len__(self) -> int:
        return len(self.keys)


def published_column(
    table: TableInfo, column: ColumnInfo, values: list[Any] | pa.Array,
) -> tuple[pa.Array, dict[int, str]]:
    """A column's values as read, published: the texts a column check vouches for as they are
    (`logged_unchanged`, and date-times in their plain forms, `logged_times`), the others
    encoded one by one; with the rows whose value cannot be published, and why."""
    texts = values if isinstance(values, pa.Array) else as_texts(values)
    count = len(values)
    if texts is None:  # not all text (columns that store what they are given): bytes, ints, encoded from what they are
        encoded: list[str | None] = [None] * count
        problems = {}
        for row, value in enumerate(values):
            try:
                encoded[row] = encode_read(column.value_type, value)
            except BadValueError as exc:
                problems[row] = f"{table.name}.{column.name}: {exc}"
        return pa.array(encoded, pa.string()), problems
    vouched = logged_unchanged_as(column.value_type, texts)
    if column.value_type == ValueType.TIME:
        fast = logged_times(texts)
        texts = pc.if_else(vouched, texts, fast)
        vouched = pc.or_(vouched, pc.is_valid(fast))
    unvouched = np.flatnonzero(~np.asarray(vouched)).tolist()
    if not unvouched:
        return texts, {}
    published = texts.to_pylist()
    raw = values if isinstance(values, list) else values.to_pylist()
    problems = {}
    for row in unvouched:
        try:
            published[row] = encode_read(column.value_type, raw[row])
        except BadValueError as exc:
            published[row] = None
            problems[row] = f"{table.name}.{column.name}: {exc}"
    return pa.array(published, pa.string()), problems


def as_texts(values: list[Any]) -> pa.Array | None:
    """The values as a string column, if every one is text or NULL; else None."""
    try:
        texts = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if pa.types.is_null(texts.type):
        return pa.nulls(len(values), pa.string())
    return texts if pa.types.is_string(texts.type) else None
