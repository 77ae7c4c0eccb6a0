"""A cold `publisher poll` starts Spark while it plans the cycle, when the backlog is more than
the driver alone publishes; never for a small one, and never in a way that hides why a cycle
cannot run."""
from __future__ import annotations

import dataclasses

import pytest
from harness import Harness

from publisher.cli.commands import _start_spark_early
from publisher.config import SparkConfig
from publisher.pipeline.event_log import event_log_source
from publisher.pipeline.spark import EarlySpark
from publisher.pipeline.window import more_waiting_than


@pytest.fixture
def site(spark, database, tmp_path) -> Harness:
    """The capture is no matter here: an event log with rows logged by hand."""
    h = Harness(spark, database, tmp_path)
    h.create_event_log()
    return h


class Begun:
    """Records whether the poll asked for an early start."""

    def __init__(self) -> None:
        self.begun = 0

    def begin(self) -> None:
        self.begun += 1


def test_more_waiting_than_counts_the_new_rows_only(site: Harness) -> None:
    harness = site
    log = event_log_source(harness.config, harness.engine)
    harness.log((1, "usr", "idu=1", "fname", None, "a"), (1, "usr", "idu=2", "fname", None, "b"))
    harness.log((1, "usr", "idu=3", "fname", None, "c"), status="S")
    assert [more_waiting_than(log, harness.engine, n) for n in (0, 1, 2, 3)] == [True, True, False, False]


@pytest.mark.parametrize(("small_cycle_events", "begun"), [(1, 1), (2, 0)])
def test_the_poll_starts_spark_early_only_for_a_cycle_of_spark_jobs(site: Harness, small_cycle_events, begun) -> None:
    harness = site
    harness.log((1, "usr", "idu=1", "fname", None, "a"), (1, "usr", "idu=2", "fname", None, "b"))
    config = dataclasses.replace(harness.config, spark=SparkConfig(small_cycle_events=small_cycle_events))
    recorded = Begun()
    _start_spark_early(config, harness.engine, recorded)  # type: ignore[arg-type]
    assert recorded.begun == begun


def test_an_event_log_that_is_not_there_is_left_to_the_cycle_to_report(site: Harness) -> None:
    harness = site
    harness.db.execute(f"DROP TABLE {harness.table('event_log')}")
    recorded = Begun()
    _start_spark_early(harness.config, harness.engine, recorded)  # type: ignore[arg-type]
    assert recorded.begun == 0


def test_the_session_started_early_is_the_one_the_cycle_gets(spark) -> None:
    early = EarlySpark(SparkConfig(master="local[2]"))
    early.begin()
    early.begin()
    assert early() is early() is spark, "one start, the session of this process"


def test_a_start_that_failed_is_raised_to_the_cycle_that_asks(spark) -> None:
    early = EarlySpark(SparkConfig(master="sc://127.0.0.1:1"))
    early.begin()
    with pytest.raises(Exception):  # noqa: B017 - whatever the client raises, it reaches the caller
        early()
