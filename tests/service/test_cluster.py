"""`publisher poll` on a real Spark standalone cluster publishes what local mode publishes.

Two copies of one SQLite database, filled through the real triggers, are polled by the CLI:
one on a master and a worker started from the installed pyspark's scripts, every cycle as
Spark jobs, so the executors read the event log and write the documents; one in local mode.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness import read_change_tables, read_messages
from lxml import etree
from sqlalchemy import text

from publisher.capture.install import install_capture
from publisher.config.loading import load_config
from publisher.database import connect
from publisher.workshop.bench.cluster import StandaloneCluster, spark_conf_for

ROWS = 400
"""Enough events (over 1,000) that the event log is read in more than one partition."""
USR_DDL = (
    "CREATE TABLE usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), photo BLOB, "
    "age INTEGER, active BOOLEAN, born TIMESTAMP)"
)
GRP_DDL = "CREATE TABLE grp (name VARCHAR(64), site INTEGER, descr VARCHAR(64), PRIMARY KEY (name, site))"
CHANGES = (
    "UPDATE usr SET fname = 'F' || idu, photo = X'0102' WHERE idu % 7 = 0",
    "UPDATE usr SET lname = NULL, age = age + 1 WHERE idu % 11 = 0",
    "UPDATE usr SET idu = idu + 10000 WHERE idu % 13 = 0",
    "DELETE FROM usr WHERE idu % 17 = 0",
    "INSERT INTO grp (name, site, descr) VALUES ('R&D, \"Lab\" <1>', 7, 'research'), ('ops', 1, 'o'), ('gone', 2, 'g')",
    "UPDATE grp SET descr = 'operations' WHERE name = 'ops'",
    "DELETE FROM grp WHERE name = 'gone'",
)


def make_database(path: Path) -> None:
    """usr with field triggers (types 1, 2, 4, 7, 8), grp with row triggers (5, 6, 4), and a backlog."""
    config = load_config(None, environ={}, overrides=[f"database.url=sqlite:///{path}"])
    engine = connect(config)
    with engine.begin() as conn:
        conn.execute(text(USR_DDL))
        conn.execute(text(GRP_DDL))
    install_capture(config, engine, ["usr"], "field")
    install_capture(config, engine, ["grp"], "row")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO usr (idu, fname, lname, photo, age, active, born) "
                "VALUES (:idu, :fname, :lname, :photo, :age, :active, :born)"
            ),
            [
                {
                    "idu": i, "fname": f"first {i}", "lname": f"O'Last <{i}> & co", "photo": bytes([i % 256]) * 3,
                    "age": 20 + i % 50, "active": i % 2 == 0, "born": f"19{50 + i % 50}-01-02 03:04:05",
                }
                for i in range(1, ROWS + 1)
            ],
        )
        for statement in CHANGES:
            conn.execute(text(statement))
    engine.dispose()


def write_config(path: Path, database: Path, output: Path, master: str, spark: dict[str, Any]) -> Path:
    """A TOML file; JSON strings are valid TOML basic strings."""
    conf = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in spark.pop("conf", {}).items())
    lines = [
        "[database]", f"url = {json.dumps(f'sqlite:///{database}')}",
        "[output]", f"directory = {json.dumps(str(output))}",
        "[spark]", f"master = {json.dumps(master)}",
        *(f"{key} = {json.dumps(value)}" for key, value in spark.items()),
        f"conf = {{ {conf} }}",
        "[output.change_tables]", "enabled = true", "trail_header = true",
        "[output.messages]", "enabled = true", "trail_header = true",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def poll_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "publisher.cli", "poll", "--config", str(config)]


def clean_environment() -> dict[str, str]:
    """No PUBLISHER_* override of the test's configuration, and no Spark settings from outside."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PUBLISHER_", "SPARK_", "PYSPARK_"))}


def statuses(database: Path) -> list[tuple[int, int, str]]:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT record_id, event_type, status FROM event_log ORDER BY record_id").fetchall()


def operations(output: Path) -> list[tuple[Any, ...]]:
    """Every published operation in publication order: file-name order, then document order."""
    found = []
    for document in sorted(output.glob("*.xml")):
        root = etree.parse(str(document)).getroot()
        source = etree.tostring(root.find("source"), method="c14n")
        for op in root.find("input"):
            found.append((
                op.tag, op.get("class-name"), op.get("event-id"), (op.findtext("association") or "").strip(),
                tuple(etree.tostring(child, method="c14n") for child in op if child.tag != "association"),
                source,
            ))
    return found


class LocalPoll:
    """`publisher poll` in local mode on a copy of the database, running while the remote side
    (a cluster, a Connect server) starts: the reference the remote run must match."""

    def __init__(self, tmp_path: Path, database: Path) -> None:
        self.database = tmp_path / "local.db"
        self.output = tmp_path / "out-local"
        shutil.copyfile(database, self.database)
        config = write_config(tmp_path / "local.toml", self.database, self.output, "local[2]", {})
        self.process = subprocess.Popen(
            poll_command(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_environment()
        )

    def finish(self) -> dict[str, Any]:
        """Its JSON summary, once it exited 0."""
        out, err = self.process.communicate(timeout=300)
        assert self.process.returncode == 0, err[-5000:]
        return dict(json.loads(out.strip().splitlines()[-1]))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def assert_published_like_local(database: Path, output: Path, run: subprocess.CompletedProcess[str],
                                local: dict[str, Any], local_poll: LocalPoll) -> dict[str, Any]:
    """The remote poll's summary, statuses and operations equal the local poll's; returns its summary."""
    summary = dict(json.loads(run.stdout.strip().splitlines()[-1]))
    assert summary["path"] == "spark"
    assert local["statuses"] == summary["statuses"]
    assert summary["events"] == len(statuses(database)) and summary["operations"] > 0
    remote_statuses = statuses(database)
    assert "N" not in {s for _, _, s in remote_statuses}
    assert remote_statuses == statuses(local_poll.database)
    published = operations(output)
    assert len(published) == summary["operations"]
    assert published == operations(local_poll.output)
    sent = read_messages(output, keep_time=False)
    assert sum("headers" in m for m in sent) == summary["messages"] == summary["operations"]
    assert sent == read_messages(local_poll.output, keep_time=False)
    assert summary["change_rows"] >= summary["operations"]
    assert read_change_tables(output) == read_change_tables(local_poll.output)
    return summary


@pytest.mark.process
def test_poll_on_a_standalone_cluster_publishes_what_local_mode_publishes(tmp_path: Path) -> None:
    started = time.monotonic()
    on_cluster = tmp_path / "cluster.db"
    make_database(on_cluster)
    assert {s for _, _, s in statuses(on_cluster)} == {"N"}
    assert {t for _, t, _ in statuses(on_cluster)} >= {1, 2, 4, 5, 6, 7, 8}
    assert len(statuses(on_cluster)) > 1000

    local_poll = LocalPoll(tmp_path, on_cluster)
    try:
        starting = time.monotonic()
        with StandaloneCluster(tmp_path / "spark") as cluster:
            cluster_started = time.monotonic()
            cluster_config = write_config(
                tmp_path / "cluster.toml", on_cluster, tmp_path / "out-cluster", cluster.master_url,
                {"small_cycle_events": 0, "conf": spark_conf_for(cluster)},
            )
            cluster_run = subprocess.run(
                poll_command(cluster_config), capture_output=True, text=True, env=clean_environment(), timeout=300
            )
            assert cluster_run.returncode == 0, cluster_run.stderr[-5000:] + "\n" + cluster.log_tail()
            poll_seconds = time.monotonic() - cluster_started
            applications = cluster.master_state()["completedapps"]
        local = local_poll.finish()
    finally:
        local_poll.stop()

    assert [(a["name"], a["state"]) for a in applications] == [("event-log-publisher", "FINISHED")]
    executor_logs = list((tmp_path / "spark" / "work" / applications[0]["id"]).glob("*/stderr"))
    assert executor_logs, f"no executor ran in {tmp_path / 'spark' / 'work'}"
    assert any("Finished task" in log.read_text(errors="replace") for log in executor_logs)

    summary = assert_published_like_local(on_cluster, tmp_path / "out-cluster", cluster_run, local, local_poll)
    print(
        f"cluster start {cluster_started - starting:.1f} s, poll on it {poll_seconds:.1f} s, "
        f"whole test {time.monotonic() - started:.1f} s; stages on the cluster {summary['seconds']}"
    )
