"""One publisher per event log: the second one waits or exits, and a dead holder frees the lock."""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from publisher.cli import main
from publisher.config import Config, DatabaseConfig, PublisherSettings
from publisher.locking.lock import LockHeldError, PublisherLock

HOLD_THE_LOCK = """
import sys, time
from publisher.config.loading import load_config
from publisher.locking.lock import PublisherLock

lock = PublisherLock(load_config(sys.argv[1], environ={}))
lock.acquire()
print("locked", flush=True)
time.sleep(600)
"""


def lock_config(database, when_locked: str = "exit") -> Config:
    return Config(
        database=DatabaseConfig(url=database.url, schema=database.schema),
        publisher=PublisherSettings(when_locked=when_locked),  # type: ignore[arg-type]
    )


def config_file(database, tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "publisher.toml"
    schema = f'schema = "{database.schema}"\n' if database.schema else ""
    path.write_text(
        f'[database]\nurl = "{database.url}"\n{schema}'
        f'[output]\ndirectory = "{tmp_path / "out"}"\n[spark]\nmaster = "local[1]"\n{extra}',
        encoding="utf-8",
    )
    return path


def holder_of(process_id: int) -> str:
    return f"the publisher with pid {process_id} on host {socket.gethostname()}"


def seconds_to_take(config: Config, limit: float = 10.0) -> float:
    """How long until an exit-mode lock succeeds, trying every 0.05 s."""
    started = time.monotonic()
    while True:
        lock = PublisherLock(config)
        try:
            lock.acquire()
        except LockHeldError:
            assert time.monotonic() - started < limit, "the lock was not freed"
            time.sleep(0.05)
            continue
        lock.release()
        return time.monotonic() - started


def test_a_second_lock_in_exit_mode_names_the_holder(database):
    with PublisherLock(lock_config(database)) as first:
        assert first.held
        with pytest.raises(LockHeldError) as info:
            PublisherLock(lock_config(database)).acquire()
        message = str(info.value)
        assert holder_of(os.getpid()) in message
        assert 'publisher.when_locked = "wait"' in message
        assert "\n" not in message
    with PublisherLock(lock_config(database)) as again:
        assert again.held


def test_a_waiting_lock_gets_it_once_the_holder_releases(database, caplog):
    caplog.set_level(logging.INFO, logger="publisher")
    first = PublisherLock(lock_config(database))
    first.acquire()
    second = PublisherLock(lock_config(database, "wait"), retry_seconds=0.1)
    got = threading.Event()
    waiter = threading.Thread(target=lambda: second.acquire() and got.set())
    waiter.start()
    try:
        assert not got.wait(1.0), "took a lock that was held"
        first.release()
        assert got.wait(10.0), "did not take the lock after it was released"
    finally:
        first.release()
        second.stop.set()
        waiter.join(10.0)
        second.release()
    waits = [r.getMessage() for r in caplog.records if "waiting for it" in r.getMessage()]
    assert len(waits) == 1, waits
    assert holder_of(os.getpid()) in waits[0]


def test_stop_ends_the_wait_without_the_lock(database):
    with PublisherLock(lock_config(database)):
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        waiting = PublisherLock(lock_config(database, "wait"), stop, retry_seconds=0.1)
        with waiting:
            assert not waiting.held
        assert not waiting.lost


@pytest.mark.process
def test_a_killed_holder_frees_the_lock_at_once(database, tmp_path):
    config = config_file(database, tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked", holder.stderr.read() if holder.stderr else ""
        with pytest.raises(LockHeldError, match=holder_of(holder.pid)):
            PublisherLock(lock_config(database)).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        # far below the 30 s lease: the server ends the session, or the owner is a dead pid here
        assert seconds_to_take(lock_config(database)) < 5.0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_an_expired_lease_is_taken_over_and_its_holder_stops(sqlite_database, caplog):
    stop = threading.Event()
    first = PublisherLock(lock_config(sqlite_database), stop, renew_seconds=1.0)
    first.acquire()
    try:
        sqlite_database.execute("UPDATE event_log_lock SET expires_at = 0")
        with PublisherLock(lock_config(sqlite_database)) as second:
            assert second.held
            assert stop.wait(5.0), "the former holder did not notice"
            assert first.lost and not first.held
            # `run` takes the lock again and goes on: the line says so, and is no error
            (lost,) = [r for r in caplog.records if "lost the lock" in r.getMessage()]
            assert lost.levelname == "WARNING" and "until it is ours again" in lost.getMessage()
            assert sqlite_database.rows("SELECT owner FROM event_log_lock") == [(second.owner,)]
    finally:
        first.release()
    assert sqlite_database.rows("SELECT count(*) FROM event_log_lock") == [(0,)]


@pytest.mark.process
def test_a_second_publisher_run_exits_while_the_first_keeps_running(database, tmp_path):
    config = config_file(database, tmp_path, "[publisher]\npolling_interval = 0.5\n")
    assert main(["install", "-c", str(config)]) == 0
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "publisher.cli", "run", "-c", str(config)]
    log_path = tmp_path / "first.log"
    with log_path.open("w") as log_file:
        first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log_file, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while "publishing" not in log_path.read_text() and time.monotonic() < deadline:
            assert first.poll() is None, log_path.read_text()
            time.sleep(0.2)
        assert "publishing" in log_path.read_text(), "the first publisher did not start within 120 s"

        second = subprocess.run(
            [*command, "--set", "publisher.when_locked=exit"], capture_output=True, text=True, env=env, timeout=120
        )
        assert second.returncode == 1, second.stderr
        last_line = second.stderr.strip().splitlines()[-1]
        assert last_line.startswith("publisher: the event log ")
        assert holder_of(first.pid) in last_line
        assert first.poll() is None, log_path.read_text()

        first.send_signal(signal.SIGTERM)
        first.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, log_path.read_text()
    assert "stopped" in log_path.read_text()
    assert seconds_to_take(lock_config(database), limit=1.0) < 1.0


@pytest.mark.process
def test_ctrl_c_while_poll_waits_for_the_lock_ends_it_with_one_line(database, tmp_path):
    config = config_file(database, tmp_path, '[publisher]\nwhen_locked = "wait"\n')
    assert main(["install", "-c", str(config)]) == 0
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(config)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        waiting = subprocess.Popen(
            [sys.executable, "-m", "publisher.cli", "poll", "-c", str(config)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        lines: list[str] = []
        assert waiting.stderr is not None
        while not any("waiting" in line for line in lines):
            line = waiting.stderr.readline()
            assert line, f"poll ended before waiting: {lines}"
            lines.append(line)
        waiting.send_signal(signal.SIGINT)
        _, rest = waiting.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert waiting.returncode == 130
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1].startswith("publisher: interrupted")
