"""Per-process caches for code that runs in Spark's Python workers (engines are not picklable)."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


@functools.lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One engine per database per worker process; no pool, since workers come and go."""
    connect_args = {"timeout": 30} if url.startswith("sqlite") else {}
    return create_engine(url, poolclass=NullPool, connect_args=connect_args)


def map_rows(
    frame: DataFrame, fn: Callable[[dict[str, Any]], Iterable[dict[str, Any]]], schema: StructType
) -> DataFrame:
    """Apply a plain-Python function row by row in the executors, over Arrow batches.

    The function takes a row as a dict and yields output rows as dicts; this keeps the rules
    themselves free of Spark and testable on their own.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = [out for row in batch.to_pylist() for out in fn(row)]
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)

    return frame.mapInArrow(run, schema)
