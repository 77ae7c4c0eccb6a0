"""`publisher poll` through a Spark Connect server publishes what local mode publishes.

Two copies of one SQLite database, filled through the real triggers, are polled by the CLI:
one as a Connect client of a server started from the installed pyspark's scripts, every cycle
as Spark jobs, so the server's Python workers read the event log and write the documents; one
in local mode.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from test_cluster import (
    LocalPoll,
    assert_published_like_local,
    clean_environment,
    make_database,
    poll_command,
    statuses,
    write_config,
)

from publisher.workshop.bench.cluster import ConnectServer


@pytest.mark.process
def test_poll_through_spark_connect_publishes_what_local_mode_publishes(tmp_path: Path) -> None:
    started = time.monotonic()
    remote = tmp_path / "connect.db"
    make_database(remote)
    assert len(statuses(remote)) > 1000

    local_poll = LocalPoll(tmp_path, remote)
    try:
        starting = time.monotonic()
        with ConnectServer(tmp_path / "spark") as server:
            server_started = time.monotonic()
            remote_config = write_config(
                tmp_path / "connect.toml", remote, tmp_path / "out-connect", server.url, {"small_cycle_events": 0}
            )
            remote_run = subprocess.run(
                poll_command(remote_config), capture_output=True, text=True, env=clean_environment(), timeout=300
            )
            assert remote_run.returncode == 0, remote_run.stderr[-5000:] + "\n" + server.log_tail()
            poll_seconds = time.monotonic() - server_started
        local = local_poll.finish()
    finally:
        local_poll.stop()

    summary = assert_published_like_local(remote, tmp_path / "out-connect", remote_run, local, local_poll)
    print(
        f"Connect server start {server_started - starting:.1f} s, poll through it {poll_seconds:.1f} s, "
        f"whole test {time.monotonic() - started:.1f} s; stages through Connect {summary['seconds']}"
    )
