"""Stage 4: read the current row of every object a query-back event names, in bulk.

One set-based SELECT per table and chunk of keys (in the executors on the Spark path); never
one query per event. Table and column names come from the reflected catalog, never from the event log text.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Connection, MetaData, RowMapping, Select, Table, bindparam, select, tuple_
from sqlalchemy.exc import DataError
from sqlalchemy.types import NullType

from publisher.catalog import TableInfo
from publisher.errors import root_cause
from publisher.failpoints import reached
from publisher.keys import KeyPart, format_key, key_values
from publisher.precedence import CurrentRow
from publisher.values import BadValueError, ValueType, encode_current, shown

CHUNK = 500


@dataclass(frozen=True)
class QueryBackContext:
    url: str
    schema: str | None
    tables: dict[str, TableInfo]
    """By table name (the class name)."""


def current_rows(ctx: QueryBackContext, wanted: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], CurrentRow]:
    """The current row of each wanted object (class name → canonical keys) that still exists."""
    found: dict[tuple[str, str], CurrentRow] = {}
    for class_name, keys in wanted.items():
        for name, key, row, problems in read_current(ctx, ctx.tables[class_name], keys):
            found[(name, key)] = CurrentRow(row, problems)
    return found


def read_current(
    ctx: QueryBackContext, table: TableInfo, keys: Sequence[str]
) -> Iterable[tuple[str, str, dict[str, str | None], dict[str, str]]]:
    """(class_name, canonical_key, row, problems) for the keys that exist, CHUNK keys per SELECT.

    A key the database refuses to compare (a value its key column's type cannot take, such as
    `id=x` for a uuid) comes back with every column as a problem, so its events get `E`.
    """
    from publisher.workers import engine_for

    sql_table = Table(table.name, MetaData(), *(Column(c.name) for c in table.columns), schema=ctx.schema)
    key_cols = [sql_table.c[name] for name, _ in table.key_columns]
    key_names = [name for name, _ in table.key_columns]

    def query(chunk: Sequence[str]) -> Select[Any]:
        """Keys bind untyped, so the database reads them as its key columns' types (uuid, date, …);
        SQLAlchemy would otherwise cast text to VARCHAR, which such a column cannot compare with."""
        typed = [key_values(k, table.key_columns) for k in chunk]
        compared = key_cols[0] if len(key_cols) == 1 else tuple_(*key_cols)
        values = [v[0] for v in typed] if len(key_cols) == 1 else typed
        return select(*sql_table.c).where(compared.in_(bindparam("keys", values, expanding=True, type_=NullType())))

    engine = engine_for(ctx.url)
    with engine.connect() as conn:
        for start in range(0, len(keys), CHUNK):
            records, refused = _select(conn, query, keys[start : start + CHUNK])
            reached("query_back")
            for key, reason in refused.items():
                problem = f"{table.name}: the database refuses table_key {shown(key)}: {reason}"
                yield table.name, key, {}, {c.name: problem for c in table.columns}
            for record in records:
                key = format_key(KeyPart(n, _key_text(record[n])) for n in key_names)
                row: dict[str, str | None] = {}
                problems: dict[str, str] = {}
                for column in table.value_columns:
                    try:
                        row[column.name] = encode_current(column.value_type, record[column.name])
                    except BadValueError as exc:
                        problems[column.name] = f"{table.name}.{column.name}: {exc}"
                yield table.name, key, row, problems


def scan_table(ctx: QueryBackContext, table: TableInfo) -> Iterator[tuple[str, dict[str, str | None], dict[str, str]]]:
    """Every current row of `table` as query-back would publish it: (canonical_key, row, problems).

    What the consumer mirror compares the published documents with."""
    from publisher.workers import engine_for

    sql_table = Table(table.name, MetaData(), *(Column(c.name) for c in table.columns), schema=ctx.schema)
    key_names = [name for name, _ in table.key_columns]
    with engine_for(ctx.url).connect() as conn:
        streamed = conn.execution_options(stream_results=True, yield_per=CHUNK)
        for record in streamed.execute(select(*sql_table.c)).mappings():
            key = format_key(KeyPart(n, _key_text(record[n])) for n in key_names)
            row: dict[str, str | None] = {}
            problems: dict[str, str] = {}
            for column in table.value_columns:
                try:
                    row[column.name] = encode_current(column.value_type, record[column.name])
                except BadValueError as exc:
                    problems[column.name] = f"{table.name}.{column.name}: {exc}"
            yield key, row, problems


def _select(
    conn: Connection, query: Callable[[Sequence[str]], Select[Any]], keys: Sequence[str]
) -> tuple[list[RowMapping], dict[str, str]]:
    """The rows of `keys`, and the keys whose comparison the database refused, found by halving."""
    try:
        return list(conn.execute(query(keys)).mappings()), {}
    except DataError as exc:
        conn.rollback()
        if len(keys) == 1:
            return [], {keys[0]: root_cause(exc)}
    middle = len(keys) // 2
    first_rows, first_refused = _select(conn, query, keys[:middle])
    rows, refused = _select(conn, query, keys[middle:])
    return first_rows + rows, {**first_refused, **refused}


def _key_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, int) and not isinstance(value, bool) else str(value)


def value_type_map(table: TableInfo) -> dict[str, ValueType]:
    return {c.name: c.value_type for c in table.columns}
