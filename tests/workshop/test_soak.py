"""The short soak: concurrent writers, `publisher run` killed and the database restarted, then a
drain and `verify` of every reader, on each database of the run (about 40 s each).

`make soak` runs the long one; this one has every stressor but the Spark path.
"""
from __future__ import annotations

import pytest
from conftest import DIALECTS

from publisher.workshop.soak.run import SoakOptions, soak_database
from publisher.workshop.soak.schema import styles_for

SHORT = {"minutes": 0.3, "writers": 4, "rate": 3.0, "gap": (1.5, 3.0), "spark_path": False, "drain_seconds": 120.0}


@pytest.mark.process
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_short_soak_finds_no_difference_and_compares_every_row(dialect):
    options = SoakOptions(databases=(dialect,), seed=3, **SHORT)  # type: ignore[arg-type]
    outcome = soak_database(dialect, options, lambda _: None)

    report = "\n".join([*outcome.problems, *outcome.samples, str(outcome.counts.get("run_log_tail", ""))])
    assert outcome.ok, report
    assert outcome.differences == 0
    assert outcome.styles == styles_for(dialect, options.seed)
    counts = outcome.counts
    assert counts["writes"] > 50 and counts["events"] > 50, counts
    assert counts["kills"] >= 1, counts
    if dialect != "sqlite":
        assert counts["restarts"] >= 1, counts
    assert counts["migrations"] >= 1, counts
    assert counts["rows_left_new"] == 0 and counts["subscriber_waiting"] == 0
    readers = {"status mode"} | ({"mirror"} if dialect != "mariadb" else set())
    assert set(outcome.readers) == readers
    for reader in outcome.readers.values():
        assert reader["documents"] > 0 and reader["objects"] >= counts["source_rows"] > 0, reader


def test_a_soak_that_compared_nothing_or_left_work_fails_without_differences():
    """0 differences is a pass only when verify compared every row and the soak did its faults."""
    from publisher.databases.servers import NoServer
    from publisher.workshop.soak.outcome import Outcome
    from publisher.workshop.soak.run import _check

    def problems(counts: dict, readers: dict) -> list[str]:
        outcome = Outcome("sqlite", styles_for("sqlite", 1), counts, readers)
        _check(outcome, SoakOptions(), NoServer("sqlite:///unused.db", "sqlite"))  # nothing to restart
        return outcome.problems

    done = {"writes": 10, "events": 30, "kills": 1, "rows_left_new": 0, "subscriber_waiting": 0, "source_rows": 5}
    compared = {"status mode": {"differences": 0, "objects": 5, "documents": 3}}
    assert problems(done, compared) == []
    assert problems(done, {}) == ["verify did not run"]
    assert problems({**done, "writes": 0}, compared) == ["nothing was written or logged: the soak compared nothing"]
    assert "not every row" in problems(done, {"status mode": {"differences": 0, "objects": 4, "documents": 3}})[0]
    assert "not every row" in problems(done, {"status mode": {"differences": 0, "objects": 5, "documents": 0}})[0]
    assert problems({**done, "rows_left_new": 2}, compared) == ["2 event log rows still N after the drain"]
    assert problems({**done, "kills": 0}, compared) == ["the publisher was never killed: it never got to publish"]
    assert problems({**done, "stopped_readers": ["the status mode stopped: x"]}, compared) == [
        "publisher run: the status mode stopped: x"]


@pytest.mark.process
@pytest.mark.parametrize("dialect", [d for d in ("postgresql",) if d in DIALECTS])
def test_a_short_soak_on_the_native_capture_finds_no_difference(dialect):
    """The native capture under the same faults: the server restarted (immediate shutdown too)
    while the C function writes the event log directly, `run` killed, then drained and verified."""
    options = SoakOptions(databases=(dialect,), seed=4, native=True, **SHORT)  # type: ignore[arg-type]
    outcome = soak_database(dialect, options, lambda _: None)

    report = "\n".join([*outcome.problems, *outcome.samples, str(outcome.counts.get("run_log_tail", ""))])
    assert outcome.ok, report
    assert outcome.differences == 0
    counts = outcome.counts
    assert counts["writes"] > 50 and counts["events"] > 50, counts
    assert counts["kills"] >= 1 and counts["restarts"] >= 1, counts
    assert counts["rows_left_new"] == 0 and counts["subscriber_waiting"] == 0


def test_keep_copies_a_servers_files_but_not_its_sockets():
    """`--keep` copies the soak's directory; a server's sockets and pid files cannot be copied."""
    from publisher.workshop.databases import named
    from publisher.workshop.soak.run import _sockets

    files = [".s.PGSQL.5432", ".s.PGSQL.5432.lock", "mysqld.sock", "mysqld.pid", "server.log", "soak.db"]
    assert _sockets(named("postgresql"))("dir", files) == files[:4]
    assert _sockets(named("sqlite"))("dir", files) == files[2:4]
