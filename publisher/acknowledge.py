"""Stage 7: write the outcome of every event back to the event log, in one transaction.

Set-based: W and E rows by chunks of ids, S rows by chunks of record_id ranges, never one
statement per row.
Only exactly the rows the cycle read are touched, and only while they are still `N`.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, delete, or_, update

from publisher.config import Config
from publisher.database import table_schema
from publisher.errors import TransientError
from publisher.events import Status
from publisher.failpoints import reached
from publisher.read import event_log_table

RANGES_PER_STATEMENT = 500
ANALYZE_AFTER = 10_000
"""Acknowledged rows from which a cycle refreshes the event log's planner statistics."""
IDS_PER_STATEMENT = 1000


class AcknowledgeError(TransientError):
    """The event log did not accept the statuses as expected; nothing was written."""


@dataclass(frozen=True)
class IdRun:
    """record_ids first..last, every one of them read by the cycle."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def id_runs(record_ids: Iterable[int]) -> list[IdRun]:
    """The read record_ids as runs of consecutive numbers: a gap (an id not read) ends a run."""
    runs: list[IdRun] = []
    first = last = None
    for rid in sorted(record_ids):
        if last is not None and rid == last + 1:
            last = rid
            continue
        if first is not None and last is not None:
            runs.append(IdRun(first, last))
        first = last = rid
    if first is not None and last is not None:
        runs.append(IdRun(first, last))
    return runs


def acknowledge(
    engine: Engine,
    config: Config,
    read: Sequence[IdRun],
    exceptions: Mapping[int, Status],
    run_post_polling: bool,
) -> Mapping[Status, int]:
    """Give every read event its status (or delete S and W rows), then run the post-polling
    statements; all or nothing.

    `exceptions` holds the events whose status is not S; every other read event gets S. The
    W and E rows are set by id, then the S rows by ranges of read ids, so no statement carries
    more than IDS_PER_STATEMENT ids or RANGES_PER_STATEMENT ranges whatever the cycle's size.
    """
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns
    record_id = table.c[names.record_id]
    status = table.c[names.status]
    written: dict[Status, int] = {}

    def apply(conn: Connection, outcome: Status, where: Any, expected: int) -> None:
        removable = config.publisher.delete_processed_rows and outcome is not Status.ERROR
        still_new = (status == Status.NEW.value, where)
        statement = (
            delete(table).where(*still_new)
            if removable
            else update(table).where(*still_new).values({names.status: outcome.value})
        )
        changed = conn.execute(statement).rowcount
        reached("acknowledge")
        if changed != expected:
            raise AcknowledgeError(
                f"expected to mark {expected} event log rows {outcome.value}, but {changed} were "
                "still new: another process changed the event log during the cycle"
            )
        written[outcome] = written.get(outcome, 0) + changed

    noted = sorted(exceptions)
    with engine.begin() as conn:
        for outcome in (Status.WARNING, Status.ERROR):
            ids = [rid for rid in noted if exceptions[rid] is outcome]
            for start in range(0, len(ids), IDS_PER_STATEMENT):
                some = ids[start : start + IDS_PER_STATEMENT]
                apply(conn, outcome, record_id.in_(some), len(some))
        for start in range(0, len(read), RANGES_PER_STATEMENT):
            runs = read[start : start + RANGES_PER_STATEMENT]
            singles = [r.first for r in runs if r.first == r.last]
            spans = [record_id.between(r.first, r.last) for r in runs if r.first != r.last]
            expected = sum(r.count - _noted_within(noted, r) for r in runs)
            apply(conn, Status.SUCCESS, or_(*([record_id.in_(singles)] if singles else []), *spans), expected)
        if run_post_polling:
            for sql in config.publisher.post_polling_statements:
                conn.exec_driver_sql(sql)
    return written


def refresh_statistics(engine: Engine, config: Config) -> None:
    """ANALYZE the event log after a large acknowledgement. The planner otherwise keeps the
    picture of a table full of N rows for a while and finds the next cycle's few N rows by
    walking every processed one (0.7 s instead of 1 ms after a million-event drain)."""
    table = event_log_table(config, table_schema(config, engine))
    name = engine.dialect.identifier_preparer.format_table(table)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"ANALYZE {name}")


def _noted_within(noted: Sequence[int], run: IdRun) -> int:
    return bisect.bisect_right(noted, run.last) - bisect.bisect_left(noted, run.first)
