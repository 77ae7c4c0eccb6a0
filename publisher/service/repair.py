"""`verify --repair`: bring the consumer back to the tables, for exactly the objects that differ.

What `verify` finds is turned into events in the event log, as a snapshot's are, so that the
cycles publish them in order with whatever the writers change meanwhile: an object the tables
hold and the consumer lacks, a row query-back of an insert (type 5: an `<add>` or `<modify>` of
the row as it is then, as `insert_row_operation` says); one both hold with other values, a row
query-back of an update (type 6: a `<modify>` that replaces every attribute); one only the
consumer holds, a delete (type 4).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from publisher.config import STATUS_MODE, Config, Reader
from publisher.model.events import EventType
from publisher.rules.classify import snapshot_perpetrator
from publisher.service.mirror import (
    ABSENT,
    CANNOT_PUBLISH,
    NO_ONE_OBJECT,
    PRESENT,
    REFUSED_ADD,
    Difference,
    Verification,
    check,
)
from publisher.snapshots.chunks import EventLogger


@dataclass
class Repair:
    """What a repair logged, per table and event type."""

    events: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(sum(kinds.values()) for kinds in self.events.values())

    def summary(self) -> dict[str, Any]:
        return {"repair": self.events, "events": self.total}


_NAMES = {  # the summary's names of what a repair logs (not the operation each publishes, which
    # `rules.operations.operation_kind` says: an insert's is a modify unless insert_row_operation = "add")
    EventType.INSERT_ROW_QUERY_BACK: "add",
    EventType.UPDATE_ROW_QUERY_BACK: "replace",
    EventType.DELETE_ROW: "delete",
}


def repairs(differences: Iterable[Difference]) -> dict[tuple[str, str], EventType]:
    """Per differing object (table, canonical key): the event that makes the consumer equal.
    Left out: a value that cannot be published, an operation the consumer refused (an anomaly
    of the documents' history), and a key rows share: publishing the row again changes none."""
    wanted: dict[tuple[str, str], EventType] = {}
    for difference in differences:
        if difference.expected.startswith((CANNOT_PUBLISH, NO_ONE_OBJECT)) or difference.expected == REFUSED_ADD:
            continue
        obj = (difference.table, difference.association.rsplit(",table=", 1)[0])
        if difference.attribute is None and difference.expected == ABSENT:
            wanted[obj] = EventType.DELETE_ROW
        elif difference.attribute is None and difference.expected == PRESENT and difference.published == ABSENT:
            wanted.setdefault(obj, EventType.INSERT_ROW_QUERY_BACK)
        else:
            wanted[obj] = EventType.UPDATE_ROW_QUERY_BACK
    return wanted


def repair(config: Config, engine: Engine, differences: Iterable[Difference], reader: Reader = STATUS_MODE) -> Repair:
    """Log, in one transaction, the events that make `reader`'s consumer equal to the tables again."""
    by_kind: dict[tuple[str, EventType], list[str]] = defaultdict(list)
    for (table, key), event_type in sorted(repairs(differences).items()):
        by_kind[(table, event_type)].append(key)
    logger = EventLogger(config, engine, snapshot_perpetrator(reader))
    done = Repair()
    with engine.begin() as conn:
        for (table, event_type), keys in by_kind.items():
            logger.log(conn, table, keys, event_type)
            done.events.setdefault(table, {})[_NAMES[event_type]] = len(keys)
    return done


DRAIN_CYCLES = 10_000
"""A bound on the cycles a repair runs to publish what it logged, against a loop that never ends."""


def publish_now(config: Config, engine: Engine, reader: Reader = STATUS_MODE) -> bool:
    """Publish what the event log holds for `reader`, if no other publisher holds its lock:
    False when one does (it publishes them itself)."""
    import dataclasses

    from publisher.locking.lock import LockHeldError, PublisherLock
    from publisher.pipeline.cycle import run_cycle
    from publisher.pipeline.spark import get_spark
    from publisher.service.checkouts import check_out

    settings = dataclasses.replace(config.publisher, when_locked="exit")
    config = dataclasses.replace(config, publisher=settings)
    spark = lambda: get_spark(config.spark)  # noqa: E731
    try:
        with PublisherLock(config, reader=reader):
            if reader.subscriber is not None:
                check_out(spark, engine, config, reader.subscriber)
                return True
            for _ in range(DRAIN_CYCLES):
                if run_cycle(spark, engine, config).idle:
                    return True
    except LockHeldError:
        return False
    raise RuntimeError(f"the event log did not drain in {DRAIN_CYCLES} cycles")


@dataclass
class RepairOutcome:
    """What `verify --repair` did: the events it logged (None: nothing differed once the waiting
    events were published), whether it published them itself, and the last verification."""

    logged: Repair | None
    published: bool
    final: Verification


def repair_consumer(
    config: Config, engine: Engine, directory: Path, reader: Reader = STATUS_MODE,
    report: Callable[[Verification], None] = lambda found: None,
) -> RepairOutcome:
    """Verify; publish what waits in the event log, if this process may, and verify again, so
    that only what the log will never bring is repaired; log the repair, publish it, verify
    once more. `report` is told each verification before the repair; the last is returned."""
    found = check(config, engine, directory, reader)
    report(found)
    if found.differences and found.pending and publish_now(config, engine, reader):
        found = check(config, engine, directory, reader)
        report(found)
    if not found.differences:
        return RepairOutcome(None, False, found)
    logged = repair(config, engine, found.differences, reader)
    if not publish_now(config, engine, reader):
        return RepairOutcome(logged, False, found)
    return RepairOutcome(logged, True, check(config, engine, directory, reader))
