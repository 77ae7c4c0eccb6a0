"""A large triggerless cycle's buckets compared by Spark's tasks at once: each task compares one
bucket (`comparison_buckets.publish_bucket`, what the driver runs for a small cycle) and writes
its documents under a cycle number the driver took for it beforehand, so that no two tasks
write the same name and the names sort in bucket order, the driver path's order. A task run
again (Spark retries a failed one) writes the same documents under the same names.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from publisher.errors import TransientError, root_cause
from publisher.model.arrow import arrow_schema_of
from publisher.outputs.cycle_files import next_cycle_number
from publisher.outputs.documents import write_documents
from publisher.triggerless.buckets import BucketDone, BucketJob, publish_bucket

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

_RESULT = "index int, table string, counts string, rejects string, documents int, dangling long, formats string"


def publish_on_spark(spark: SparkSession, buckets: Sequence[tuple[BucketJob, int]], output: Path,
                     batch_size: int) -> tuple[list[BucketDone], int, int, list[int]]:
    """Every bucket compared and published by a task of its own; what each found, in bucket
    order, the documents written, the dangling references they hold and the cycle numbers
    their files carry."""
    import pyarrow as pa

    cycles = [next_cycle_number(output) for _ in buckets]
    schema = arrow_schema_of(_RESULT)
    target = str(output)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column("id").to_pylist():
                job, bucket = buckets[index]
                done = publish_bucket(job, bucket)
                written = write_documents(done.operations, Path(target), cycles[index], batch_size)
                yield pa.RecordBatch.from_pylist([{
                    "index": index, "table": done.table, "counts": json.dumps(done.counts),
                    "rejects": json.dumps(done.rejects, ensure_ascii=False), "documents": len(written),
                    "dangling": sum(document.dangling for document in written),
                    "formats": json.dumps(done.formats),
                }], schema=schema)

    try:
        rows = spark.range(0, len(buckets), 1, len(buckets)).mapInArrow(run, _RESULT).collect()
    except Exception as exc:
        raise TransientError(f"triggerless comparison on Spark: {root_cause(exc)}") from exc
    rows = sorted(rows, key=lambda row: row["index"])
    done = [BucketDone(row["table"], [], json.loads(row["counts"]), json.loads(row["rejects"]),
                       json.loads(row["formats"])) for row in rows]
    file_cycles = [cycles[row["index"]] for row in rows if row["documents"]]
    return done, sum(row["documents"] for row in rows), sum(row["dangling"] for row in rows), file_cycles
