"""Stage 4: read the current row of every object a query-back event names, in bulk.

One set-based SELECT per table and chunk of keys, run in the executors; never one query per
event. Table and column names come from the reflected catalog, never from the event log text.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from sqlalchemy import Column, MetaData, Table, select, tuple_

from publisher.catalog import TableInfo
from publisher.keys import KeyPart, format_key, key_values
from publisher.values import BadValueError, ValueType, encode_current

CURRENT_SCHEMA = "class_name string, canonical_key string, row map<string,string>, problems map<string,string>"
CHUNK = 500


@dataclass(frozen=True)
class QueryBackContext:
    url: str
    schema: str | None
    tables: dict[str, TableInfo]
    """By table name (the class name)."""


def query_back(objects: DataFrame, ctx: QueryBackContext, partitions: int) -> DataFrame:
    """One row per object that still exists: its publishable values and any that cannot be published."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        wanted: dict[str, list[str]] = defaultdict(list)
        for batch in batches:
            for class_name, key in zip(batch["class_name"], batch["canonical_key"], strict=True):
                wanted[class_name].append(key)
        for class_name, keys in wanted.items():
            rows = list(read_current(ctx, ctx.tables[class_name], keys))
            if rows:
                yield pd.DataFrame(rows, columns=["class_name", "canonical_key", "row", "problems"])

    return objects.repartition(partitions, "class_name", "canonical_key").mapInPandas(run, CURRENT_SCHEMA)


def read_current(
    ctx: QueryBackContext, table: TableInfo, keys: Sequence[str]
) -> Iterable[tuple[str, str, dict[str, str | None], dict[str, str]]]:
    """(class_name, canonical_key, row, problems) for the keys that exist, CHUNK keys per SELECT."""
    from publisher.workers import engine_for

    sql_table = Table(table.name, MetaData(), *(Column(c.name) for c in table.columns), schema=ctx.schema)
    key_cols = [sql_table.c[name] for name, _ in table.key_columns]
    key_names = [name for name, _ in table.key_columns]
    engine = engine_for(ctx.url)
    with engine.connect() as conn:
        for start in range(0, len(keys), CHUNK):
            typed = [key_values(k, table.key_columns) for k in keys[start : start + CHUNK]]
            if len(key_cols) == 1:
                condition = key_cols[0].in_([v[0] for v in typed])
            else:
                condition = tuple_(*key_cols).in_(typed)
            for record in conn.execute(select(*sql_table.c).where(condition)).mappings():
                key = format_key(KeyPart(n, _key_text(record[n])) for n in key_names)
                row: dict[str, str | None] = {}
                problems: dict[str, str] = {}
                for column in table.value_columns:
                    try:
                        row[column.name] = encode_current(column.value_type, record[column.name])
                    except BadValueError as exc:
                        problems[column.name] = f"{table.name}.{column.name}: {exc}"
                yield table.name, key, row, problems


def _key_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, int) and not isinstance(value, bool) else str(value)


def value_type_map(table: TableInfo) -> dict[str, ValueType]:
    return {c.name: c.value_type for c in table.columns}
