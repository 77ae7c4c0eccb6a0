"""The rules that run both in Python (the driver path) and in Spark SQL (the Spark path) give
the same answers on generated operations: the publication order, each change's place in its
transaction, and the time part of a change sequence; and processing order (`rules.order`) sorts
alike in Python and in Arrow."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.pipeline.distributed import placed_changes, time_prefix_of
from publisher.pipeline.driver import publication_order
from publisher.rules.changes import Change, TransactionPlace, time_prefix, transaction_places
from publisher.rules.order import arrow_sort_keys, position

UTC = dt.UTC
TIMES = st.none() | st.sampled_from([
    dt.datetime(2026, 11, 23, 7, 0, tzinfo=UTC), dt.datetime(2026, 11, 23, 7, 0, 0, 9999, tzinfo=UTC),
]) | st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(2100, 1, 1)).map(lambda t: t.replace(tzinfo=UTC))
SCHEMA = "op_time timestamp, event_id long, change binary, transaction_id string, change_time timestamp, records int"


def operations() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Operations as resolving gives them: first-event time (ties likely), unique event ids,
    a transaction from a small pool or none, inserts and updates (an update's before-image is a
    change-table row of its own)."""
    one = st.tuples(TIMES, TIMES, st.none() | st.sampled_from(["7", "8", "x"]), st.booleans())
    return st.lists(one, max_size=25).flatmap(lambda ops: st.lists(
        st.integers(1, 10**6), min_size=len(ops), max_size=len(ops), unique=True
    ).map(lambda ids: [_operation(event_id, *op) for event_id, op in zip(ids, ops, strict=True)]))


def _operation(event_id: int, op_time: Any, change_time: Any, transaction: str | None, update: bool) -> dict[str, Any]:
    change = Change("usr", "UPDATE" if update else "INSERT", event_id, change_time, transaction, {"idu": "1"},
                    {"idu": "1"} if update else None, (), False)
    return {"op_time": op_time, "event_id": event_id, "change": change.to_bytes(), "transaction_id": transaction,
            "change_time": change_time, "records": change.records}


@settings(max_examples=budget(8))
@given(operations(), st.integers(1, 3))
def test_spark_places_and_orders_changes_as_the_driver_does(spark, ops: list[dict[str, Any]], partitions: int):
    table = pa.Table.from_pylist(ops, schema=pa.schema([("op_time", pa.timestamp("us", tz="UTC")),
                                                         ("event_id", pa.int64()), ("change", pa.binary())]))
    ordered = [Change.from_bytes(change) for change in publication_order(table)["change"].to_pylist()]
    expected = list(zip((c.record_id for c in ordered), transaction_places(ordered), strict=True))

    frame = spark.createDataFrame([tuple(op[name] for name in SCHEMA_NAMES) for op in ops], SCHEMA)
    rows = placed_changes(frame, partitions).collect()
    placed = [(Change.from_bytes(r["change"]).record_id,
               TransactionPlace(r["t_index"], r["t_total"], r["t_row_index"], r["t_rows"])) for r in rows]
    assert placed == expected
    assert [r["part"] for r in rows] == sorted(r["part"] for r in rows)

    prefixes = frame.select("event_id", time_prefix_of("change_time").alias("prefix")).collect()
    by_id = {op["event_id"]: op["change_time"] for op in ops}
    assert {r["event_id"]: r["prefix"] for r in prefixes} == {
        event_id: None if time is None else time_prefix(time) for event_id, time in by_id.items()
    }


SCHEMA_NAMES = tuple(part.split()[0] for part in SCHEMA.split(", "))


@settings(max_examples=budget(200))
@given(st.lists(TIMES, max_size=30).flatmap(lambda times: st.permutations(list(enumerate(times)))))
def test_processing_order_sorts_alike_in_python_and_arrow(events: list[tuple[int, Any]]):
    """Shared and missing times, ids in any order: one order, whichever spells it."""
    rows = [{"position_time": time, "record_id": record_id} for record_id, time in events]
    table = pa.Table.from_pylist(rows, schema=pa.schema([("position_time", pa.timestamp("us", tz="UTC")),
                                                         ("record_id", pa.int64())]))
    by_arrow = table.take(pc.sort_indices(table, sort_keys=arrow_sort_keys()))["record_id"].to_pylist()
    assert by_arrow == [row["record_id"] for row in sorted(rows, key=position)]
