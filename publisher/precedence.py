"""Stage 3: which events survive, which are redundant, which lost their object (SPEC §3).

Pure DataFrame functions; one place for the precedence rules.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from publisher.events import EventType


class Outcome:
    """What precedence decides for a publishable event."""

    SURVIVES = "survives"
    """Published in its own right (non-query-back event nothing beat)."""
    WINS = "wins"
    """The first winning query-back event of its object or field: one read, one publication."""
    REDUNDANT = "redundant"
    """Beaten by a query-back event whose operation carries its effect: status S."""
    VANISHED = "vanished"
    """A query-back event whose object no longer exists: publishes nothing, status W."""
    UNREADABLE = "unreadable"
    """A query-back event whose current value cannot be published: status E."""


OBJECT = ("class_name", "canonical_key")
ROW_QUERY_BACK = (int(EventType.INSERT_ROW_QUERY_BACK), int(EventType.UPDATE_ROW_QUERY_BACK))
FIELD_QUERY_BACK = (int(EventType.INSERT_FIELD_QUERY_BACK), int(EventType.UPDATE_FIELD_QUERY_BACK))
LOGGED_FIELD = (
    int(EventType.INSERT_FIELD),
    int(EventType.UPDATE_FIELD),
    int(EventType.UPDATE_FIELD_REMOVE_ALL),
)


def with_position(events: DataFrame, future_events: bool) -> DataFrame:
    """Processing order: record_id, or (event_time, record_id) with future-event processing."""
    time = F.col("event_time") if future_events else F.lit(None).cast("timestamp")
    return events.withColumn("position", F.struct(time.alias("time"), F.col("record_id").alias("record_id")))


def objects_to_query_back(events: DataFrame) -> DataFrame:
    """The objects whose current row must be read: those with any query-back event."""
    return (
        events.where(F.col("event_type_code").isin(*ROW_QUERY_BACK, *FIELD_QUERY_BACK))
        .select(*OBJECT)
        .distinct()
    )


def resolve(events: DataFrame, current: DataFrame) -> DataFrame:
    """Add `outcome` and `effective_type` to each publishable event.

    `current` holds one row per object that still exists: OBJECT columns, `row` (column →
    published text) and `problems` (column → why its value cannot be published).
    """
    obj = Window.partitionBy(*OBJECT)
    field = Window.partitionBy(*OBJECT, "attr_name")
    t = F.col("event_type_code")
    is_row_qb = t.isin(*ROW_QUERY_BACK)
    is_field_qb = t.isin(*FIELD_QUERY_BACK)
    exists = F.col("_exists")
    row_readable = exists & (F.size(F.col("problems")) == 0)
    field_readable = exists & F.try_element_at(F.col("problems"), F.col("attr_name")).isNull()

    joined = events.join(
        current.select(*OBJECT, F.lit(True).alias("_exists"), "problems"), on=list(OBJECT), how="left"
    ).withColumn("_exists", F.coalesce(exists, F.lit(False)))

    row_wins = _any(is_row_qb & row_readable).over(obj)
    field_wins = _any(is_field_qb & field_readable).over(field)
    first_row_qb = F.min(F.when(is_row_qb, F.col("position"))).over(obj)
    first_field_qb = F.min(F.when(is_field_qb, F.col("position"))).over(field)
    field_type = F.max(F.when(is_field_qb, t)).over(field)

    outcome = (
        F.when(is_row_qb & ~exists, Outcome.VANISHED)
        .when(is_row_qb & ~row_readable, Outcome.UNREADABLE)
        .when(is_row_qb, F.when(F.col("position") == first_row_qb, Outcome.WINS).otherwise(Outcome.REDUNDANT))
        .when(is_field_qb & ~exists, Outcome.VANISHED)
        .when(is_field_qb & ~field_readable, Outcome.UNREADABLE)
        .when(row_wins, Outcome.REDUNDANT)
        .when(is_field_qb, F.when(F.col("position") == first_field_qb, Outcome.WINS).otherwise(Outcome.REDUNDANT))
        .when(t.isin(*LOGGED_FIELD) & field_wins, Outcome.REDUNDANT)
        .otherwise(Outcome.SURVIVES)
    )
    effective_type = F.when(is_field_qb, field_type).otherwise(t)
    reason = (
        F.when(F.col("outcome") == Outcome.VANISHED, F.lit("object no longer exists; query-back published nothing"))
        .when(
            F.col("outcome") == Outcome.UNREADABLE,
            F.concat(
                F.lit("current value cannot be published: "),
                F.when(is_field_qb, F.try_element_at(F.col("problems"), F.col("attr_name"))).otherwise(
                    F.array_join(F.array_distinct(F.map_values(F.col("problems"))), "; ")
                ),
            ),
        )
        .otherwise(F.col("reason"))
    )
    return (
        joined.withColumn("outcome", outcome)
        .withColumn("effective_type", effective_type)
        .withColumn("reason", reason)
        .drop("_exists", "problems")
    )


def _any(condition: Column) -> Column:
    return F.max(F.when(condition, F.lit(True)).otherwise(F.lit(False)))
