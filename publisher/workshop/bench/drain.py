"""The cycles a benchmark times: a drain of the backlog by the status mode, a subscriber's
check-out of it, and small polls for the latency; each summed up as the report shows it."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from sqlalchemy import Engine, func, select

from publisher.config import Config
from publisher.database import table_schema
from publisher.model.events import Status
from publisher.pipeline.cycle import CycleResult, run_cycle
from publisher.pipeline.event_log import event_log_table
from publisher.workshop.bench.sampling import Latency, resident
from publisher.workshop.bench.workload import Workload, change_rows

log = logging.getLogger("publisher")


class BenchError(RuntimeError):
    """The benchmark could not finish: the backlog did not drain."""


@dataclass
class DrainResult:
    cycles: int = 0
    distributed_cycles: int = 0
    """Cycles that ran as Spark jobs; the others ran in the driver alone (spark.small_cycle_events)."""
    events: int = 0
    operations: int = 0
    documents: int = 0
    bytes_written: int = 0
    rejected: int = 0
    change_rows: int = 0
    messages: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    cycle_seconds: list[float] = field(default_factory=list)
    cycle_events: list[int] = field(default_factory=list)
    cycle_memory: list[dict[str, int | None]] = field(default_factory=list)
    """Resident sizes after each cycle (`sampling.resident`): the driver's now and its peak so far,
    the JVM's now."""
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of the publisher's process (its threads included, not the JVM's) over the drain."""

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def add(self, result: CycleResult, seconds: float) -> None:
        self.cycles += 1
        self.cycle_events.append(result.events)
        self.distributed_cycles += result.distributed
        self.events += result.events
        self.operations += result.operations
        self.documents += result.documents
        self.bytes_written += result.bytes_written
        self.rejected += result.rejected
        self.change_rows += result.change_rows
        self.messages += result.messages
        self.cycle_seconds.append(seconds)
        self.cycle_memory.append(resident())
        for status, count in result.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count
        for stage, spent in result.seconds.items():
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + spent

    def summary(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "distributed_cycles": self.distributed_cycles,
            "events": self.events,
            "operations": self.operations,
            "documents": self.documents,
            "bytes": self.bytes_written,
            "rejected": self.rejected,
            "change_rows": self.change_rows,
            "messages": self.messages,
            "statuses": dict(sorted(self.statuses.items())),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "events_per_second": round(self.events_per_second, 1),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "cycle_seconds": [round(s, 3) for s in self.cycle_seconds],
            "cycle_events": list(self.cycle_events),
            "cycle_memory": self.cycle_memory,
        }


def drain(spark: SparkSession, engine: Engine, config: Config, backlog: int, name: str = "drain") -> DrainResult:
    """Poll until no new row is left, as `publisher run` follows a full cycle at once."""
    limit = config.publisher.query_limit
    most = -(-backlog // limit) + 2
    result = DrainResult()
    started, cpu_started = time.perf_counter(), time.process_time()
    while True:
        cycle_started = time.perf_counter()
        cycle = run_cycle(spark, engine, config)
        if cycle.idle:
            break
        result.add(cycle, time.perf_counter() - cycle_started)
        log.info("%s cycle %d: %d events in %.1f s", name, result.cycles, cycle.events, result.cycle_seconds[-1])
        if result.cycles > most:
            raise BenchError(f"the backlog of {backlog} events did not drain in {most} cycles of {limit}")
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    return result


def check_out_backlog(spark: SparkSession, engine: Engine, config: Config, subscriber: str) -> DrainResult:
    """One check-out of the whole backlog by `subscriber`, in windows of query_limit events."""
    from publisher.service.checkouts import check_out

    result = DrainResult()
    started = time.perf_counter()
    checked_out = check_out(spark, engine, config, subscriber)
    result.seconds = time.perf_counter() - started
    for window in checked_out.windows:
        result.add(window, sum(spent for stage, spent in window.seconds.items() if "." not in stage))
    log.info("subscriber %s: %d events in %d windows, %.1f s", subscriber, result.events, result.cycles,
             result.seconds)
    return result


def measure_latency(
    spark: SparkSession, engine: Engine, config: Config, workload: Workload, cycles: int, per_cycle: int
) -> Latency:
    """Commit `per_cycle` changes through the triggers, poll once, and time it; `cycles` times."""
    latency = Latency(per_cycle)
    output = Path(config.output.directory)
    for serial in range(cycles):
        change_rows(engine, workload, per_cycle, serial)
        committed = time.time()
        result = run_cycle(spark, engine, config)
        acknowledged = time.time()
        latency.to_acknowledged.append(acknowledged - committed)
        latency.events_seen.append(result.events)
        for stage, spent in result.seconds.items():
            latency.stage_seconds[stage] = latency.stage_seconds.get(stage, 0.0) + spent
        if result.files:
            written = max(os.stat(output / name).st_mtime for name in result.files)
            latency.to_documents.append(written - committed)
    return latency


def count_new(config: Config, engine: Engine) -> int:
    table = event_log_table(config, table_schema(config, engine))
    status = table.c[config.event_log.columns.status]
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(status == Status.NEW.value)).scalar_one())
