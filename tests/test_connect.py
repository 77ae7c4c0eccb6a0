"""`publisher poll` through a Spark Connect server publishes what local mode publishes.

Two copies of one SQLite database, filled through the real triggers, are polled by the CLI:
one as a Connect client of a server started from the installed pyspark's scripts, every cycle
as Spark jobs, so the server's Python workers read the event log and write the documents; one
in local mode.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from test_cluster import clean_environment, make_database, operations, poll_command, statuses, write_config

from publisher.bench.cluster import ConnectServer


def test_poll_through_spark_connect_publishes_what_local_mode_publishes(tmp_path: Path) -> None:
    started = time.monotonic()
    remote, local = tmp_path / "connect.db", tmp_path / "local.db"
    make_database(remote)
    shutil.copyfile(remote, local)
    assert len(statuses(remote)) > 1000

    env = clean_environment()
    local_config = write_config(tmp_path / "local.toml", local, tmp_path / "out-local", "local[2]", {})
    local_run = subprocess.Popen(
        poll_command(local_config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        starting = time.monotonic()
        with ConnectServer(tmp_path / "spark") as server:
            server_started = time.monotonic()
            remote_config = write_config(
                tmp_path / "connect.toml", remote, tmp_path / "out-connect", server.url, {"small_cycle_events": 0}
            )
            remote_run = subprocess.run(
                poll_command(remote_config), capture_output=True, text=True, env=env, timeout=300
            )
            assert remote_run.returncode == 0, remote_run.stderr[-5000:] + "\n" + server.log_tail()
            poll_seconds = time.monotonic() - server_started
        local_out, local_err = local_run.communicate(timeout=300)
    finally:
        if local_run.poll() is None:
            local_run.kill()
            local_run.wait()
    assert local_run.returncode == 0, local_err[-5000:]

    summary = json.loads(remote_run.stdout.strip().splitlines()[-1])
    assert summary["path"] == "spark"
    assert json.loads(local_out.strip().splitlines()[-1])["statuses"] == summary["statuses"]
    assert summary["events"] == len(statuses(remote)) and summary["operations"] > 0

    remote_statuses = statuses(remote)
    assert "N" not in {s for _, _, s in remote_statuses}
    assert remote_statuses == statuses(local)

    published = operations(tmp_path / "out-connect")
    assert len(published) == summary["operations"]
    assert published == operations(tmp_path / "out-local")
    print(
        f"Connect server start {server_started - starting:.1f} s, poll through it {poll_seconds:.1f} s, "
        f"whole test {time.monotonic() - started:.1f} s; stages through Connect {summary['seconds']}"
    )
