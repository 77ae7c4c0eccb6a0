"""The end of a soak: let `publisher run` drain what the writers left, then verify every reader.

The drain ends when no row is `N` and no subscriber has an event waiting or a check-out under
way, or when its time is up: what is left then is reported, never waited for without bound.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from publisher.config import Reader
from publisher.config.loading import load_config

if TYPE_CHECKING:
    from publisher.workshop.soak.outcome import Outcome
    from publisher.workshop.soak.process import Publisher
    from publisher.workshop.soak.schema import Site

SAMPLES = 5
DRAIN = ("publisher.query_limit=2000",)
"""A `run` started for the drain: cycles in the driver, which keep up on a small machine."""
SPARK_PATH = "spark.small_cycle_events=0"


def drain(engine: Engine, site: Site, publisher: Publisher, seconds: float) -> dict[str, Any]:
    """Wait for the drain, restarting `run` if it is gone; what is left at the end. A `run` on the
    Spark path, or facing more than 20 of its windows, is stopped (SIGTERM: it finishes its
    cycle) and one in the driver with large windows drains. A reader that `run` gave up on ends the drain: it
    would not come back."""
    from publisher.pipeline.subscribers import subscriber_backlog

    config = load_config(site.config)
    started = time.monotonic()
    stopped = None
    limit = next((int(s.split("=")[1]) for s in publisher.settings if s.startswith("publisher.query_limit=")), 10000)
    backlog = _scalar(engine, f"SELECT count(*) FROM {site.table('event_log')} WHERE status = 'N'")
    if SPARK_PATH in publisher.settings or backlog > 20 * limit:
        stopped = publisher.stop()
    left = waiting = -1
    while time.monotonic() - started < seconds:
        try:
            left = _scalar(engine, f"SELECT count(*) FROM {site.table('event_log')} WHERE status = 'N'")
            backlogs = [subscriber_backlog(config, engine, name) for name in site.subscribers]
        except DBAPIError:
            time.sleep(1)
            continue
        waiting = sum(b.waiting + (1 if b.under_way else 0) for b in backlogs)
        if (left == 0 and waiting == 0) or publisher.stopped_readers(since_start=True):
            break
        if not publisher.alive():
            publisher.start(*DRAIN)
        time.sleep(1)
    return {"rows_left_new": left, "subscriber_waiting": waiting, "stopped_for_drain": stopped,
            "drain_seconds": round(time.monotonic() - started, 1)}


def verify_readers(engine: Engine, site: Site, outcome: Outcome) -> None:
    """`verify` for the status mode and each subscriber, with what each one compared."""
    from publisher.database import connect
    from publisher.service.mirror import check

    log = site.table("event_log")
    rows = sum(_scalar(engine, f"SELECT count(*) FROM {site.table(t)}") for t in ("acct", "team"))
    with engine.connect() as conn:
        found = conn.execute(text(f"SELECT status, count(*) FROM {log} GROUP BY status"))
        statuses = {str(s): int(n) for s, n in found}
    outcome.counts.update(events=sum(statuses.values()), statuses=statuses, source_rows=rows,
                          members=_scalar(engine, f"SELECT count(*) FROM {site.table('team_member')}"))
    config = load_config(site.config)
    publisher_engine = connect(config)
    try:
        for reader in [None, *site.subscribers]:
            try:
                result = check(config, publisher_engine, None, Reader(reader))
            except FileNotFoundError as exc:  # it never published: nothing to replay
                outcome.readers[reader or "status mode"] = {"differences": 0, "objects": 0, "tables": 0,
                                                            "documents": 0, "pending": None, "error": str(exc)}
                continue
            outcome.readers[reader or "status mode"] = {
                "differences": len(result.differences), "objects": result.objects, "tables": result.tables,
                "documents": result.documents, "pending": result.pending,
            }
            outcome.samples += [f"{reader or 'status mode'}: {d}" for d in result.differences[:SAMPLES]]
    finally:
        publisher_engine.dispose()


def _scalar(engine: Engine, query: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(query)).scalar_one())
