"""Arrow schemas of the pipeline's row shapes, from the same DDL text Spark reads.

Built without Spark, so a Python worker or the driver alone can make batches that match a
Spark schema exactly (a test holds the two equal).
"""
from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

_TYPES = {
    "long": pa.int64(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


@functools.cache
def arrow_schema_of(ddl: str) -> pa.Schema:
    """`"name type, name type, ..."` (the simple DDL this package writes) as an Arrow schema."""
    fields = []
    for part in ddl.split(","):
        name, kind = part.split()
        try:
            fields.append(pa.field(name, _TYPES[kind.lower()]))
        except KeyError:
            raise ValueError(f"no Arrow type for {kind!r} (column {name!r})") from None
    return pa.schema(fields)


def rows_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """Tuples → one Arrow record batch of `schema`, built column by column (much cheaper than
    from dicts)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=f.type) for values, f in zip(columns, schema, strict=True)], schema=schema
    )
