"""Loop policy of `publisher run`: schedule, heartbeat, backoff. The cycle itself is tested elsewhere."""
from __future__ import annotations

import datetime as dt
import threading

from lxml import etree
from sqlalchemy.exc import OperationalError

from publisher.config import Config, OutputConfig, PublisherSettings
from publisher.pipeline.cycle import CycleResult
from publisher.service.loop import MAX_BACKOFF_SECONDS, backoff_seconds, run_forever, seconds_until_next


def config(tmp_path, **settings) -> Config:
    return Config(publisher=PublisherSettings(**settings), output=OutputConfig(directory=str(tmp_path / "out")))


def test_interval_and_times_of_day(tmp_path):
    assert seconds_until_next(config(tmp_path, polling_interval=2.5), dt.datetime(2026, 1, 1, 12)) == 2.5
    times = config(tmp_path, time_of_day=("02:00", "14:30:15"))
    assert seconds_until_next(times, dt.datetime(2026, 1, 1, 12, 0, 0)) == 2 * 3600 + 30 * 60 + 15
    # after the last time of the day comes the first one of the next day
    assert seconds_until_next(times, dt.datetime(2026, 1, 1, 15, 0, 0)) == 11 * 3600
    assert seconds_until_next(times, dt.datetime(2026, 1, 1, 2, 0, 0)) == 12 * 3600 + 30 * 60 + 15


class ScriptedCycles:
    """Plays back results (or raises) and stops the loop when the script is done."""

    def __init__(self, stop: threading.Event, script: list) -> None:
        self.stop, self.script, self.calls = stop, list(script), 0

    def __call__(self, spark, engine, config) -> CycleResult:
        self.calls += 1
        step = self.script.pop(0)
        if not self.script:
            self.stop.set()
        if isinstance(step, BaseException):
            raise step
        return step


def test_heartbeat_after_idle_time(tmp_path):
    stop = threading.Event()
    cfg = config(tmp_path, polling_interval=0.01, heartbeat_interval=0.0001)  # 6 ms
    cycles = ScriptedCycles(stop, [CycleResult(), CycleResult(), CycleResult()])
    run_forever(None, None, cfg, stop, cycle=cycles)
    beats = sorted((tmp_path / "out").glob("*.xml"))
    assert beats, "an idle publisher with a heartbeat interval publishes heartbeats"
    status = etree.parse(str(beats[0])).getroot().find("input/status")
    assert status.get("type") == "heartbeat"


def test_no_heartbeat_when_off(tmp_path):
    stop = threading.Event()
    cycles = ScriptedCycles(stop, [CycleResult()] * 3)
    run_forever(None, None, config(tmp_path, polling_interval=0.01), stop, cycle=cycles)
    assert not list(tmp_path.glob("out/*.xml"))


def test_failed_cycle_is_retried_and_logged(tmp_path, caplog):
    stop = threading.Event()
    failure = OperationalError("SELECT 1", {}, Exception("connection refused"))
    cycles = ScriptedCycles(stop, [failure, CycleResult(events=1, operations=1, documents=1)])
    run_forever(None, None, config(tmp_path, polling_interval=0.01), stop, cycle=cycles)
    assert cycles.calls == 2
    assert any("cycle failed, nothing acknowledged" in r.message and "connection refused" in r.message
               for r in caplog.records)


def test_full_cycle_is_followed_at_once(tmp_path):
    stop = threading.Event()
    full = CycleResult(events=5)
    cycles = ScriptedCycles(stop, [full, full, CycleResult()])
    started = dt.datetime.now()
    run_forever(None, None, config(tmp_path, polling_interval=30, query_limit=5), stop, cycle=cycles)
    assert cycles.calls == 3
    assert (dt.datetime.now() - started).total_seconds() < 10


def test_backoff_doubles_per_failure_up_to_its_bound_however_long_the_failures_last(tmp_path):
    c = config(tmp_path, polling_interval=2.0)
    assert [backoff_seconds(c, n) for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert backoff_seconds(c, 2_000) == backoff_seconds(c, 10**6) == MAX_BACKOFF_SECONDS
