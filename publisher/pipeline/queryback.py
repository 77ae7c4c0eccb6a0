"""Read the current row of every object a query-back event names, in bulk.

One set-based SELECT per table and chunk of keys (in the executors on the Spark path); never
one query per event. Table and column names come from the reflected catalog, never from the
event log text. Every column is read as the text its trigger logs it as (`valuetext`), so a
value publishes the same text whether it was logged or read back, and a row's key is spelled
as its trigger spells it.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from sqlalchemy import (
    Connection,
)
from sqlalchemy.exc import DataError

from publisher.dialects import dialect_of
from publisher.errors import root_cause
from publisher.failpoints import reached
from publisher.model.canonical import keys_values
from publisher.model.catalog import TableInfo, child_table
from publisher.model.values import shown
from publisher.pipeline.row_reading import LinkedReading, Published, ReadColumns, RowReading
from publisher.rules.precedence import CurrentRow

CHUNK = 500
"""Keys a query-back SELECT names, each a parameter of its own (under the fewest parameters a
supported database takes: see its dialect), unless the key is of plain types, whose chunk the
database sizes as it names them (`ValueLists.keys_per_select`)."""

_ChildValues = tuple[dict[str, tuple[str, ...]], dict[str, str]]
"""An object's values of each multi-valued attribute, and why an attribute cannot be published."""


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

    size = reading.lists.keys_per_select if reading.plain else CHUNK
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
    compares the published documents with. A row with a NULL key column (where a key allows it, or a
    view) names no object, so none is read."""
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
