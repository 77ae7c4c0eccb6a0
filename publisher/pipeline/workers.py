"""Helpers for code that runs in Spark's Python workers: per-process engines (an engine is not
picklable) and Arrow batches."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


@functools.lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One engine per database per worker process; no pool, since workers come and go."""
    connect_args = {"timeout": 30} if url.startswith("sqlite") else {}
    return create_engine(url, poolclass=NullPool, connect_args=connect_args)


def arrow_schema(schema: StructType | str) -> Any:
    """The Arrow schema of Spark rows of `schema`, as mapInArrow and the data source expect
    batches to match it exactly. DDL text needs a SparkContext: on workers pass a StructType."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    assert isinstance(struct, StructType)
    return to_arrow_schema(struct, timezone="UTC")


def arrow_batch(rows: list[tuple[Any, ...]], schema: Any) -> Any:
    """Tuples → one Arrow record batch of `schema`, built column by column (much cheaper than
    from dicts)."""
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=f.type) for values, f in zip(columns, schema, strict=True)], schema=schema
    )
