"""Read the current row of every object a query-back event names, in bulk.

One set-based SELECT per table and chunk of keys (in the executors on the Spark path); never
one query per event. Table and column names come from the reflected catalog, never from the
event log text. Every column is read as the text its trigger logs it as (`valuetext`), so a
value publishes the same text whether it was logged or read back, and a row's key is spelled
as its trigger spells it.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
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
    any_,
    bindparam,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.exc import DataError
from sqlalchemy.types import NullType

from publisher.dialects import dialect_of
from publisher.errors import root_cause
from publisher.failpoints import reached
from publisher.model.canonical import bound_value, canonical_key_column, keys_values
from publisher.model.catalog import ColumnInfo, MultiValued, TableInfo, child_table
from publisher.model.keys import KeyKind, KeyPart, format_key
from publisher.model.values import BadValueError, ValueType, logged_times, logged_unchanged_as, shown
from publisher.model.valuetext import encode_read, read_value_sql, value_text_sql
from publisher.rules.precedence import CurrentRow

CHUNK = 500
"""Keys a query-back SELECT names, each a parameter of its own (SQLite takes 999 at most)."""
ARRAY_CHUNK = 5_000
"""Keys a query-back SELECT names where they go as one array (`RowReading.key_in`): fewer round
trips, at no parameter's cost."""

Published = tuple[str, dict[str, str | None], dict[str, str]]
_ChildValues = tuple[dict[str, tuple[str, ...]], dict[str, str]]
"""An object's values of each multi-valued attribute, and why an attribute cannot be published."""
"""(canonical_key, published text per value column, problems per value column) of one row."""


@dataclass(frozen=True)
class QueryBackContext:
    url: str
    schema: str | None
    tables: dict[str, TableInfo]
    """By table name (the class name)."""


class CurrentRows:
    """Reads current rows for a stream of slices over one connection, opened at the first read
    and closed with the stream; each slice's reads end their transaction, so no lock or
    snapshot is held between slices."""

    def __init__(self, ctx: QueryBackContext) -> None:
        self.ctx = ctx
        self._stack = ExitStack()
        self._conn: Connection | None = None
        self._readings: dict[str, RowReading] = {}

    def __enter__(self) -> CurrentRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def read(self, wanted: Mapping[str, Sequence[str]], children: bool = True) -> dict[tuple[str, str], CurrentRow]:
        """The current row of each wanted object (class name → canonical keys) that still exists,
        with the values of its multi-valued attributes (unless `children` is False: only whether
        it exists matters)."""
        if self._conn is None:
            self._conn = self._stack.enter_context(reading_session(self.ctx, key_lookups=True))
        found: dict[tuple[str, str], CurrentRow] = {}
        try:
            for class_name, keys in wanted.items():
                table = self.ctx.tables[class_name]
                reading = self._reading(table)
                rows = {key: (row, problems) for _, key, row, problems in _read_keys(self._conn, reading, keys)}
                multi = self._children(table, list(rows)) if children else {}
                for key, (row, problems) in rows.items():
                    values, troubles = multi.get(key, ({}, {}))
                    found[(table.name, key)] = CurrentRow(row, {**problems, **troubles}, values)
        finally:
            self._conn.rollback()
        return found

    def _reading(self, table: TableInfo, spelling: TableInfo | None = None) -> RowReading:
        reading = self._readings.get(table.name)
        if reading is None:
            assert self._conn is not None
            reading = self._readings[table.name] = RowReading(table, self.ctx.schema, self._conn.dialect, spelling)
        return reading

    def _children(self, table: TableInfo, keys: Sequence[str]) -> dict[str, _ChildValues]:
        """Per parent key: every value of each multi-valued attribute, and the attributes with
        a value that cannot be published; one SELECT per child table and chunk of keys."""
        out: dict[str, _ChildValues] = {}
        if not keys:
            return out
        for multi in table.multi_valued:
            assert self._conn is not None
            reading = self._reading(child_table(multi), table)
            values: dict[str, list[str]] = defaultdict(list)
            for _, key, row, problems in _read_keys(self._conn, reading, keys):
                name = multi.attribute.name
                entry = out.setdefault(key, ({}, {}))
                if problems:
                    entry[1][name] = next(iter(problems.values()))
                elif row[multi.value.name] is not None:
                    values[key].append(row[multi.value.name])  # type: ignore[arg-type]
            for key, texts in values.items():
                out.setdefault(key, ({}, {}))[0][multi.attribute.name] = tuple(sorted(texts))
        return out


def current_rows(ctx: QueryBackContext, wanted: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], CurrentRow]:
    """The current row of each wanted object (class name → canonical keys) that still exists."""
    with CurrentRows(ctx) as reader:
        return reader.read(wanted)


def _read_keys(
    conn: Connection, reading: RowReading, keys: Sequence[str]
) -> Iterable[tuple[str, str, dict[str, str | None], dict[str, str]]]:
    """(class_name, canonical_key, row, problems) for the keys that exist, CHUNK keys per SELECT.

    A key the database refuses to compare (a value its key column's type cannot take, such as
    `id=x` for a uuid) comes back with every column as a problem, so its events get `E`.
    """
    table = reading.table

    def read(chunk: Sequence[str]) -> ReadColumns:
        return reading.read(conn, reading.select().where(
            reading.key_in(keys_values(chunk, reading.spelling))))

    size = ARRAY_CHUNK if reading.arrays else CHUNK
    for start in range(0, len(keys), size):
        reads, refused = _select(conn, read, keys[start : start + size])
        reached("query_back")
        for key, reason in refused.items():
            problem = f"{table.name}: the database refuses table_key {shown(key)}: {reason}"
            yield table.name, key, {}, {c.name: problem for c in table.columns}
        for found in reads:
            for key, row, problems in reading.published_columns(found):
                yield table.name, key, row, problems


def scan_table(ctx: QueryBackContext, table: TableInfo) -> Iterator[Published]:
    """Every current row of `table` as query-back would publish it; what the consumer mirror
    compares the published documents with. A row with a NULL key column (SQLite, a view) names
    no object, so none is read."""
    with reading_session(ctx) as conn:
        reading = RowReading(table, ctx.schema, conn.dialect)
        query = reading.select().where(*(reading.sql_table.c[c.name].is_not(None) for c in reading.keys))
        streamed = conn.execution_options(stream_results=True, yield_per=CHUNK)
        for records in streamed.execute(query).partitions():
            yield from reading.published(records)


def scan_children(ctx: QueryBackContext, table: TableInfo,
                  linked: bool = False) -> Iterator[tuple[str, str, str | None, str | None]]:
    """Every row of a logical class's child tables as (parent key, attribute, value text,
    why it cannot be published); what the mirror's objects hold besides their rows. `linked`:
    each row under its parent's key as the database links them (`LinkedReading`, as a
    triggerless cycle reads them), else under its link columns' own texts (as capture logs it)."""
    with reading_session(ctx) as conn:
        for multi in table.multi_valued:
            reading = (LinkedReading(multi, table, ctx.schema, conn.dialect) if linked
                       else RowReading(child_table(multi), ctx.schema, conn.dialect, table))
            value = reading.table.value_columns[0].name
            streamed = conn.execution_options(stream_results=True, yield_per=CHUNK)
            for records in streamed.execute(reading.select()).partitions():
                for key, row, problems in reading.published(records):
                    problem = next(iter(problems.values()), None)
                    yield key, multi.attribute.name, row.get(value), problem


@contextmanager
def reading_session(ctx: QueryBackContext, key_lookups: bool = False) -> Iterator[Connection]:
    """A connection on the text settings the capture functions use (a session of its own:
    the engines of `workers.engine_for` do not pool), with `key_lookups` one that prefers
    looking rows up by key (`Dialect.key_lookups_sql`; not for the mirror's full-table reads).
    They are committed: a SET made in a transaction that is rolled back is undone, and each
    slice's reads end in a rollback."""
    from publisher.pipeline.workers import engine_for

    engine = engine_for(ctx.url)
    dialect = dialect_of(engine)
    with engine.connect() as conn:
        dialect.prepare_reading(conn.connection.driver_connection)
        for statement in [*dialect.settings_sql(local=False), *(dialect.key_lookups_sql() if key_lookups else ())]:
            conn.exec_driver_sql(statement)
        conn.commit()
        yield conn


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
        self.arrays = dialect_of(dialect.name).id_arrays and all(c.in_arrays for c in self.keys)
        names = [c.name for c in table.columns]
        self.values = [(names.index(c.name), c) for c in table.value_columns]
        self.key_indices = [names.index(name) for name, _ in table.key_columns]

    def select(self) -> Select[Any]:
        columns = (text.label(f"c{i}") for i, text in enumerate(self.selected))
        return select(*columns).select_from(self.sql_table)

    def key_in(self, keys: Sequence[tuple[int | str, ...]]) -> ColumnElement[bool]:
        """Keys bind untyped, so the database reads them as its key columns' types (uuid, date, …);
        SQLAlchemy would otherwise cast text to VARCHAR, which such a column cannot compare with.
        On PostgreSQL a one-column key goes as one array (`= ANY(…)`): one parameter instead of
        one per key, which a million-key query-back would spend most of its time binding."""
        compared = [self.texts[c.name] if c.matched_as_text else self.sql_table.c[c.name] for c in self.keys]
        plain = all(c.key_kind is not KeyKind.BINARY for c in self.keys)
        bound = keys if plain else [tuple(bound_value(c.key_kind, v) for c, v in zip(self.keys, key, strict=True))
                                    for key in keys]
        if len(compared) == 1:
            if self.arrays:
                return compared[0] == any_(bindparam("keys", self._array([b[0] for b in bound]), type_=NullType()))
            return compared[0].in_(bindparam("keys", [b[0] for b in bound], expanding=True, type_=NullType()))
        return tuple_(*compared).in_(bindparam("keys", bound, expanding=True, type_=NullType()))

    def _array(self, values: list[int | str | bytes]) -> list[int] | str:
        """One key column's values as one PostgreSQL array parameter: integers as a list (the
        driver picks an integer array type that holds them all, which any integer column
        compares with by its index), others as an array literal of unknown type, which the
        database reads as the column's own array type, as it reads each untyped value. (Only
        plain types come here, `in_arrays`: their keys are integers or text. An integer key is
        64-bit: a longer one is rejected when it is classified.)"""
        integers = [v for v in values if type(v) is int]
        if len(integers) == len(values):
            return integers
        return "{" + ",".join(_array_element(str(v)) for v in values) + "}"

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
        from publisher.pipeline.copy_read import can_copy, copy_texts

        columns = copy_texts(conn, query, len(query.selected_columns)) if can_copy(conn) else None
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


def _array_element(text: str) -> str:
    """A value in a PostgreSQL array literal: quoted, so that no text (empty, NULL, with commas
    or braces) reads as anything but itself."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def published_column(
    table: TableInfo, column: ColumnInfo, values: list[Any] | pa.Array,
) -> tuple[pa.Array, dict[int, str]]:
    """A column's values as read, published: the texts a column check vouches for as they are
    (`logged_unchanged`, and date-times in their plain forms, `logged_times`), the others
    encoded one by one; with the rows whose value cannot be published, and why."""
    texts = values if isinstance(values, pa.Array) else as_texts(values)
    count = len(values)
    if texts is None:  # not all text: SQLite's BLOB as bytes, INTEGER as int, encoded from what they are
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


def _select(
    conn: Connection, read: Callable[[Sequence[str]], ReadColumns], keys: Sequence[str]
) -> tuple[list[ReadColumns], dict[str, str]]:
    """The rows of `keys`, and the keys whose comparison the database refused, found by halving."""
    try:
        return [read(keys)], {}
    except DataError as exc:
        conn.rollback()
        if len(keys) == 1:
            return [], {keys[0]: root_cause(exc)}
    middle = len(keys) // 2
    first_rows, first_refused = _select(conn, read, keys[:middle])
    rows, refused = _select(conn, read, keys[middle:])
    return first_rows + rows, {**first_refused, **refused}
