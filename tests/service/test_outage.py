"""Outages: the output or the database goes away; nothing is acknowledged, and `run` resumes by itself."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import DIALECTS, TestDatabase
from harness import Harness
from sqlalchemy import create_engine, text

from publisher.cli import main


def write_config(h: Harness, tmp_path: Path) -> Path:
    schema = f'schema = "{h.db.schema}"\n' if h.db.schema else ""
    path = tmp_path / "publisher.toml"
    path.write_text(
        f'[database]\nurl = "{h.db.url}"\n{schema}'
        f'[publisher]\npolling_interval = 0.5\ntables = ["usr"]\n'
        f'[output]\ndirectory = "{h.output}"\n[spark]\nmaster = "local[1]"\n',
        encoding="utf-8",
    )
    return path


@pytest.fixture
def harness(spark, database, tmp_path):
    h = Harness(spark, database, tmp_path, tables=("usr",))
    h.create_usr()
    h.create_event_log()
    return h


def break_output(h: Harness) -> None:
    """The output directory becomes a plain file: nothing can be written there."""
    if h.output.exists():
        shutil.move(h.output, h.output.with_name("out.saved"))
    h.output.write_text("not a directory")


def mend_output(h: Harness) -> None:
    h.output.unlink()
    saved = h.output.with_name("out.saved")
    if saved.exists():
        shutil.move(saved, h.output)


def test_poll_exits_1_and_acknowledges_nothing_when_output_is_unwritable(harness, tmp_path, capsys):
    config = write_config(harness, tmp_path)
    (rid,) = harness.log((4, "usr", "idu=1"))
    break_output(harness)
    assert main(["poll", "-c", str(config)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("publisher: cycle failed in stage write:")
    assert "out" in err and len(err.splitlines()) == 1
    assert harness.statuses() == {rid: "N"}
    mend_output(harness)
    assert main(["poll", "-c", str(config)]) == 0
    assert harness.statuses() == {rid: "S"}


class RunningPublisher:
    """`publisher run` in a subprocess, its log lines collected as they come."""

    def __init__(self, config: Path) -> None:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "publisher.cli", "run", "-c", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, condition, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            assert self.process.poll() is None, "publisher exited:\n" + "\n".join(self.lines[-30:])
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}:\n" + "\n".join(self.lines[-30:]))

    def failures(self) -> list[str]:
        signs = ("cycle failed, nothing acknowledged", "cannot take the lock")
        return [line for line in self.lines if any(sign in line for sign in signs)]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def published_keys(h: Harness) -> set[str]:
    return {a for doc in h.published(new_only=False).documents for a in (
        op.findtext("association") for op in doc.find("input"))}


@pytest.mark.process
def test_run_rides_out_an_output_outage(harness, tmp_path):
    config = write_config(harness, tmp_path)
    publisher = RunningPublisher(config)
    try:
        harness.log((4, "usr", "idu=1"))
        publisher.wait_for(lambda: harness.association("idu=1") in published_keys(harness), "the first document")

        break_output(harness)
        (rid,) = harness.log((4, "usr", "idu=2"))
        publisher.wait_for(lambda: len(publisher.failures()) >= 1, "a failed cycle")
        assert "stage write" in publisher.failures()[0]
        assert harness.statuses()[rid] == "N"
        mend_output(harness)
        publisher.wait_for(lambda: harness.statuses()[rid] == "S", "the output to come back")
        assert harness.association("idu=2") in published_keys(harness)
    finally:
        code = publisher.stop()
    assert code == 0, "\n".join(publisher.lines[-30:])


@pytest.fixture
def private_postgres():
    """A PostgreSQL server of the test's own, so that stopping it disturbs no other test. Its
    directory is outside pytest's, which the server's own user cannot enter."""
    from publisher.databases.postgresql.workshop import PrivatePostgres

    root = Path(tempfile.mkdtemp(prefix="outage-"))
    root.chmod(0o755)
    server = PrivatePostgres(root)
    engine = create_engine(server.url, pool_pre_ping=True)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE SCHEMA outage"))
        yield server, TestDatabase("postgresql", server.url, "outage", engine)
    finally:
        engine.dispose()
        server.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.process
@pytest.mark.skipif("postgresql" not in DIALECTS, reason="the run's databases leave out PostgreSQL")
def test_run_rides_out_the_database_going_away(spark, private_postgres, tmp_path):
    server, database = private_postgres
    harness = Harness(spark, database, tmp_path, tables=("usr",))
    harness.create_usr()
    harness.create_event_log()
    publisher = RunningPublisher(write_config(harness, tmp_path))
    try:
        harness.log((4, "usr", "idu=1"))
        publisher.wait_for(lambda: harness.association("idu=1") in published_keys(harness), "the first document")
        server.stop("fast")
        try:
            publisher.wait_for(lambda: len(publisher.failures()) >= 1, "a cycle failing on the database")
            assert len(publisher.failures()[-1]) < 400
        finally:
            server.start()
        (rid,) = harness.log((4, "usr", "idu=3"))
        publisher.wait_for(lambda: harness.statuses()[rid] == "S", "the database to come back", timeout=400)
        assert harness.association("idu=3") in published_keys(harness)
    finally:
        code = publisher.stop()
    assert code == 0, "\n".join(publisher.lines[-30:])
