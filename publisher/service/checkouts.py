"""A subscriber's check-out from start to end: its windows published one after another, each
acknowledged by advancing the subscriber's state, until the check-out is finished."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from publisher.config import Config, Reader
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.pipeline.cycle import CycleResult, SparkProvider, run_cycle
from publisher.pipeline.event_log import event_log_table
from publisher.subscriptions.checkout import CheckOutState, checked_in


@dataclass(frozen=True)
class CheckOutResult:
    subscriber: str
    windows: list[CycleResult]

    @property
    def idle(self) -> bool:
        return not self.windows

    @property
    def events(self) -> int:
        return sum(w.events for w in self.windows)

    def summary(self) -> dict[str, Any]:
        return check_out_summary(self.subscriber, self.windows)


def check_out(spark: SparkProvider, engine: Engine, config: Config, subscriber: str) -> CheckOutResult:
    """One check-out of `subscriber`, window after window until it is finished."""
    state = CheckOutState(engine, config.event_log.table, table_schema(config, engine), subscriber)
    windows: list[CycleResult] = []
    while True:
        result = run_cycle(spark, engine, config, Reader(subscriber))
        if not result.idle:
            windows.append(result)
        if not state.under_way():
            break
    return CheckOutResult(subscriber, windows)


def check_out_summary(subscriber: str, windows: list[CycleResult]) -> dict[str, Any]:
    """The windows' summaries added up."""
    statuses: dict[str, int] = {}
    for window in windows:
        for status, count in window.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return {
        "subscriber": subscriber,
        "windows": len(windows),
        "events": sum(w.events for w in windows),
        "operations": sum(w.operations for w in windows),
        "documents": sum(w.documents for w in windows),
        "statuses": statuses,
        "rejected": sum(w.rejected for w in windows),
        "bytes": sum(w.bytes_written for w in windows),
        "change_rows": sum(w.change_rows for w in windows),
        "messages": sum(w.messages for w in windows),
        "seconds": round(sum(w.seconds.get(stage, 0.0) for w in windows for stage in w.seconds
                             if "." not in stage), 3),
    }


@contextmanager
def check_in(engine: Engine, config: Config, subscriber: str) -> Iterator[Connection]:
    """`with check_in(engine, config, "vault") as conn:` runs the block's statements in one
    transaction checked in by the subscriber: its events go to every other subscriber, never
    back to this one (seed 002's check-in)."""
    schema = table_schema(config, engine)
    record_id = event_log_table(config, schema).c[config.event_log.columns.record_id]
    with checked_in(engine, config.event_log.table, schema, subscriber, record_id) as conn:
        yield conn


def statements_of(text: str, dialect: str) -> list[str]:
    """A script's statements as the database's driver takes them, a call each
    (`Dialect.script_calls`)."""
    return dialect_of(dialect).script_calls(text)
