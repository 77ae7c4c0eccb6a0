"""Processing order, stated once: an event's place is its time (`position_time`, set with
future-event processing; an event without a readable time comes first), then its record_id.

Python (`position`), Arrow (`arrow_sort_keys`) and Spark SQL (`spark_order`, given
`pyspark.sql.functions`, so that the rules import no Spark) all spell it from PROCESSING_ORDER;
`tests/rules/test_rules_twice.py` holds the three equal on generated events.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROCESSING_ORDER: tuple[tuple[str, bool], ...] = (("position_time", True), ("record_id", False))
"""(field of a publishable event, whether its nulls come first), most significant first."""
FIELDS = tuple(name for name, _ in PROCESSING_ORDER)


def position(event: Mapping[str, Any]) -> tuple[Any, ...]:
    """An event's place in processing order, as a key Python sorts by."""
    key: list[Any] = []
    for name, nulls_first in PROCESSING_ORDER:
        value = event[name]
        key += [(0 if nulls_first else 2) if value is None else 1, value]
    return tuple(key)


def arrow_sort_keys(*names: str) -> list[tuple[str, str, str]]:
    """`pyarrow.compute.sort_indices` keys of processing order over the columns `names` (one per
    field of PROCESSING_ORDER; default: the fields' own names)."""
    return [(name, "ascending", "at_start" if nulls_first else "at_end")
            for name, (_, nulls_first) in zip(names or FIELDS, PROCESSING_ORDER, strict=True)]


def spark_order(functions: Any, *names: str) -> list[Any]:
    """Spark SQL columns of processing order over the columns `names` (default: the fields'
    own names); `functions` is `pyspark.sql.functions`."""
    return [functions.col(name).asc_nulls_first() if nulls_first else functions.col(name).asc_nulls_last()
            for name, (_, nulls_first) in zip(names or FIELDS, PROCESSING_ORDER, strict=True)]
