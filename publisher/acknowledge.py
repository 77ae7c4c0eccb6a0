"""Stage 7: write the outcome of every event back to the event log, in one transaction.

Set-based: one UPDATE (or DELETE) per status and chunk of record_id ranges, never one per row.
Only exactly the rows the cycle read are touched, and only while they are still `N`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from sqlalchemy import Engine, delete, or_, update

from publisher.config import Config
from publisher.database import table_schema
from publisher.errors import TransientError
from publisher.events import Status
from publisher.failpoints import reached
from publisher.read import event_log_table

RANGES_PER_STATEMENT = 500


class AcknowledgeError(TransientError):
    """The event log did not accept the statuses as expected; nothing was written."""


@dataclass(frozen=True)
class RecordRange:
    status: Status
    first: int
    last: int
    count: int


def status_ranges(outcomes: DataFrame) -> list[RecordRange]:
    """Runs of consecutive record_ids with one status, computed in Spark (record_id, status columns)."""
    by_status = Window.partitionBy("status").orderBy("record_id")
    runs = (
        outcomes.withColumn("_run", F.col("record_id") - F.row_number().over(by_status))
        .groupBy("status", "_run")
        .agg(F.min("record_id").alias("first"), F.max("record_id").alias("last"), F.count("*").alias("count"))
        .orderBy("first")
        .collect()
    )
    return [RecordRange(Status(r["status"]), int(r["first"]), int(r["last"]), int(r["count"])) for r in runs]


def acknowledge(
    engine: Engine,
    config: Config,
    ranges: Sequence[RecordRange],
    run_post_polling: bool,
) -> Mapping[Status, int]:
    """Set each status (or delete S and W rows), then run the post-polling statements; all or nothing."""
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns
    record_id = table.c[names.record_id]
    status = table.c[names.status]
    written: dict[Status, int] = {}
    with engine.begin() as conn:
        for outcome in (Status.SUCCESS, Status.WARNING, Status.ERROR):
            mine = [r for r in ranges if r.status is outcome]
            for start in range(0, len(mine), RANGES_PER_STATEMENT):
                chunk = mine[start : start + RANGES_PER_STATEMENT]
                singles = [r.first for r in chunk if r.first == r.last]
                spans = [record_id.between(r.first, r.last) for r in chunk if r.first != r.last]
                where = [status == Status.NEW.value, or_(*([record_id.in_(singles)] if singles else []), *spans)]
                removable = config.publisher.delete_processed_rows and outcome is not Status.ERROR
                statement = (
                    delete(table).where(*where)
                    if removable
                    else update(table).where(*where).values({names.status: outcome.value})
                )
                expected = sum(r.count for r in chunk)
                changed = conn.execute(statement).rowcount
                reached("acknowledge")
                if changed != expected:
                    raise AcknowledgeError(
                        f"expected to mark {expected} event log rows {outcome.value}, but {changed} were "
                        "still new: another process changed the event log during the cycle"
                    )
                written[outcome] = written.get(outcome, 0) + changed
        if run_post_polling:
            for sql in config.publisher.post_polling_statements:
                conn.exec_driver_sql(sql)
    return written
