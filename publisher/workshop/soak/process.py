"""`publisher run` as a process of its own: started, SIGKILLed with everything it started, and
its peak memory sampled from /proc while it lives.

The process gets a session of its own, so a kill takes its JVM and Spark's Python workers too
(the Python daemon puts itself in a process group of its own, but stays in the session).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SAMPLE_SECONDS = 0.5


def session_members(session: int) -> list[int]:
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _status_kib(pid: int, key: str) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _kind(pid: int) -> str:
    with contextlib.suppress(OSError):
        return "jvm" if Path(f"/proc/{pid}/comm").read_text().strip() == "java" else "python"
    return "python"


class Publisher:
    """One `publisher run` at a time for a configuration; `starts`, `kills` and `exits` count
    what happened to it, `peaks` the highest resident size seen per kind of process (bytes)."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.process: subprocess.Popen[bytes] | None = None
        self._started_at = 0
        self.settings: tuple[str, ...] = ()
        """The `--set` overrides of the current start."""
        self.starts = self.kills = self.exits = 0
        self.exit_codes: list[int] = []
        self.peaks: dict[str, int] = {"python": 0, "jvm": 0}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, name="soak-memory", daemon=True)
        self._sampler.start()

    def start(self, *settings: str) -> None:
        """Start `run` with `--set` overrides (query_limit, the cycle path)."""
        command = [sys.executable, "-m", "publisher.cli", "run", "-c", str(self.config)]
        for setting in settings:
            command += ["--set", setting]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts + 1}: {' '.join(settings)}\n".encode())
            out.flush()
            self._started_at = out.tell()
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        self.starts += 1
        self.settings = settings

    def publishing(self) -> bool:
        """Whether this start has got past Spark's start-up and its locks: a kill before that
        would only ever test the start-up."""
        return self.process is not None and " publishing " in self.logged(since_start=True)

    def logged(self, since_start: bool = False) -> str:
        with self.log.open("rb") as log:
            log.seek(self._started_at if since_start else 0)
            return log.read().decode("utf-8", errors="replace")

    def stopped_readers(self, since_start: bool = False) -> list[str]:
        """Readers `run` gave up on (it goes on with the others): each reason once."""
        found = [line.split(" ERROR ", 1)[1] for line in self.logged(since_start).splitlines()
                 if " ERROR " in line and " stopped: " in line]
        return sorted(set(found))

    def failed_cycles(self) -> int:
        """Cycles that failed and were retried (nothing acknowledged), over every start."""
        return self.logged().count("cycle failed, nothing acknowledged")

    def alive(self) -> bool:
        """Whether it still runs; an exit nobody asked for is counted, with its code."""
        if self.process is None:
            return False
        code = self.process.poll()
        if code is None:
            return True
        self.exits += 1
        self.exit_codes.append(code)
        self.process = None
        return False

    def kill(self) -> None:
        """SIGKILL every process of its session, as a machine failure would."""
        if self.process is not None:
            self._end_session(self.process)
            self.kills += 1

    def _end_session(self, process: subprocess.Popen[bytes]) -> None:
        self._sample()
        deadline = time.monotonic() + 30
        while members := session_members(process.pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {members} survived SIGKILL")
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        process.wait(timeout=30)
        self.process = None

    def stop(self, timeout: float = 120.0) -> int | None:
        """SIGTERM: finish the cycle and exit; killed if it will not. Its exit code (None: it was
        not running; -9: it had to be killed). Sent once `run` publishes: during start-up it
        would end the process before its handlers exist."""
        deadline = time.monotonic() + timeout
        while self.alive() and not self.publishing() and time.monotonic() < deadline:
            time.sleep(0.5)
        process = self.process
        if process is None:
            return None
        self._sample()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        self._end_session(process)  # what it left behind, or all of it if it would not stop
        return code

    def close(self) -> None:
        self._stop.set()
        self._sampler.join(5)
        if self.process is not None:
            self._end_session(self.process)

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample()

    def _sample(self) -> None:
        process = self.process
        if process is None:
            return
        for pid in session_members(process.pid):
            kind = _kind(pid)
            self.peaks[kind] = max(self.peaks[kind], _status_kib(pid, "VmHWM") * 1024)
