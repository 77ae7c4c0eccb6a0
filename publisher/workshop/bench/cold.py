"""The drain a user sees: a `publisher poll` process started cold on the whole backlog, from
its start to its exit (interpreter, imports, Spark's start, planning, the cycle), beside the
warm session's drain.

The cold poll runs first, on the backlog as generated, with `query_limit` the whole backlog
(one cycle, as a scheduled poll takes it); the statuses it wrote are then set back to `N` and the
event log vacuumed, so the warm drain that follows finds the same backlog.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from publisher.config import Config
from publisher.model.events import Status
from publisher.workshop.bench.floor import event_log_names, vacuum

COLD_TIMEOUT = 3600
"""Seconds a cold poll may take before the benchmark gives up on it."""


@dataclass(frozen=True)
class ColdPoll:
    seconds: float
    """From the process's start to its exit."""
    cycle: dict[str, Any]
    """The poll's own summary line: events, statuses, stage seconds."""

    @property
    def stage_seconds(self) -> dict[str, float]:
        return {stage: float(spent) for stage, spent in self.cycle.get("seconds", {}).items()}

    @property
    def before_cycle(self) -> float:
        """What the process spent outside the cycle's stages: interpreter, imports, the checks
        before the cycle, its exit (the wait for Spark's session is the stage `start`)."""
        return max(0.0, self.seconds - sum(s for stage, s in self.stage_seconds.items() if "." not in stage))

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "before_cycle": round(self.before_cycle, 3),
            "events": self.cycle.get("events"),
            "statuses": self.cycle.get("statuses"),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
        }


class ColdPollError(RuntimeError):
    """The cold poll process failed or did not take the whole backlog."""


def cold_poll(config: Config, workdir: Path, events: int) -> ColdPoll:
    """One `publisher poll` process on the backlog, in a new output directory."""
    path = workdir / "cold.toml"
    path.write_text(config_toml(config, workdir / "cold", events), encoding="utf-8")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "publisher.cli", "poll", "-c", str(path)], capture_output=True,
                          text=True, timeout=COLD_TIMEOUT, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise ColdPollError(f"the cold poll exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    cycle = json.loads(done.stdout.strip().splitlines()[-1])
    if cycle.get("events") != events:
        raise ColdPollError(f"the cold poll took {cycle.get('events')} events of the backlog's {events}")
    return ColdPoll(seconds, cycle)


def config_toml(config: Config, output: Path, query_limit: int) -> str:
    """The bench's configuration as a site's file: what `bench_config` and the formats set."""
    database, settings, formats = config.database, config.publisher, config.output
    lines = ["[database]", f"url = {json.dumps(database.url)}", f"user = {json.dumps(database.user)}"]
    if database.schema:
        lines.append(f"schema = {json.dumps(database.schema)}")
    lines += ["[publisher]", f"query_limit = {query_limit}", f"batch_size = {settings.batch_size}",
              "[output]", f"directory = {json.dumps(str(output))}",
              "[spark]", f"master = {json.dumps(config.spark.master)}"]
    if config.spark.small_cycle_events is not None:
        lines.append(f"small_cycle_events = {config.spark.small_cycle_events}")
    if formats.change_tables.enabled:
        lines += ["[output.change_tables]", "enabled = true",
                  f"trail_header = {str(formats.change_tables.trail_header).lower()}"]
    if formats.messages.enabled:
        lines += ["[output.messages]", "enabled = true", f"trail_header = {str(formats.messages.trail_header).lower()}"]
    return "\n".join(lines) + "\n"


def renew_backlog(config: Config, engine: Engine, last_record_id: int) -> int:
    """Set the backlog's rows (record_ids up to `last_record_id`) back to `N` and vacuum the event
    log, as they were generated; the rows set back."""
    table, status, record_id = event_log_names(config, engine)
    with engine.begin() as conn:
        renewed = conn.execute(text(f"UPDATE {table} SET {status} = '{Status.NEW.value}' "
                                    f"WHERE {record_id} <= {int(last_record_id)}")).rowcount
    vacuum(engine, table)
    return int(renewed)


def last_record_id(config: Config, engine: Engine) -> int:
    table, _, record_id = event_log_names(config, engine)
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT COALESCE(MAX({record_id}), 0) FROM {table}")).scalar_one())
