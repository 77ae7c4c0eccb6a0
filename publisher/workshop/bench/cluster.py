"""Throwaway Spark daemons on loopback: a standalone cluster (one master, one worker) or a
Spark Connect server.

They run the publisher the way a site would: separate JVMs whose Python workers read the
database and write the documents, not threads inside the driver. The daemons come from the
installed pyspark's own scripts, so their Spark is the driver's.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from publisher.workshop.bench.processes import descendants

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
IDENT = "publisher"
"""SPARK_IDENT_STRING: fixes the daemons' pid and log file names."""


class ClusterError(RuntimeError):
    """The daemons did not come up (or go down) as asked; the message carries their log tails."""


def spark_home() -> Path:
    """The installed pyspark, which ships the jars, `bin/spark-class` and `sbin/spark-daemon.sh`."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def free_ports(count: int, taken: int = 0) -> list[int]:
    """`count` distinct ports free on loopback now (none equal to `taken`); all are held open
    together while choosing, so the kernel cannot hand out one twice."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
            if port != taken:
                ports.append(port)
        return ports


class _Daemons:
    """Spark daemons started by the installed pyspark's `sbin` scripts, which keep their logs and
    pid files in `workdir`; `stop` ends them, and whatever they started, in reverse order."""

    daemon_classes: tuple[str, ...] = ()
    """In start order."""

    def __init__(self, workdir: Path, start_timeout: float) -> None:
        self.workdir = Path(workdir).resolve()
        self.start_timeout = start_timeout
        self.log_dir = self.workdir / "logs"
        self.pid_dir = self.workdir / "pids"
        self.conf_dir = self.workdir / "conf"

    def environment(self) -> dict[str, str]:
        """The daemons' environment: everything they write stays in `workdir`, and an empty
        SPARK_CONF_DIR keeps a user's spark-defaults.conf or spark-env.sh out of the test."""
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_NO_DAEMONIZE", "SPARK_MASTER")}
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_LOG_DIR=str(self.log_dir),
            SPARK_PID_DIR=str(self.pid_dir),
            SPARK_IDENT_STRING=IDENT,
            SPARK_LOCAL_IP=HOST,
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def _make_directories(self) -> None:
        for directory in (self.log_dir, self.pid_dir, self.conf_dir):
            directory.mkdir(parents=True, exist_ok=True)

    def _script(self, script: str, *args: str) -> None:
        result = subprocess.run(
            ["bash", str(spark_home() / "sbin" / script), *args],
            env=self.environment(), capture_output=True, text=True, timeout=120,
        )
        if result.returncode != 0:
            raise ClusterError(
                f"{script} {' '.join(args[:2])} exited {result.returncode}: "
                f"{(result.stdout + result.stderr).strip()}\n{self.log_tail()}"
            )

    def _daemon(self, action: str, daemon_class: str, *args: str) -> None:
        self._script("spark-daemon.sh", action, daemon_class, "1", *args)

    def daemon_pids(self) -> tuple[int, ...]:
        """The daemons' pids; executors and Python workers are their descendants."""
        pids = (_read_pid(self.pid_file(c)) for c in self.daemon_classes)
        return tuple(p for p in pids if p is not None)

    def pid_file(self, daemon_class: str) -> Path:
        return self.pid_dir / f"spark-{IDENT}-{daemon_class}-1.pid"

    def _check_running(self) -> None:
        for daemon_class in self.daemon_classes:
            pid = _read_pid(self.pid_file(daemon_class))
            if pid is None or not _alive(pid):
                raise ClusterError(f"the {daemon_class.rsplit('.', 1)[1]} is not running\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        tails = []
        for log in sorted(self.log_dir.glob("*.out")) if self.log_dir.exists() else []:
            text = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log}\n" + "\n".join(text))
        return "\n".join(tails) or f"(no daemon logs in {self.log_dir})"

    def start(self) -> Self:
        self._make_directories()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the daemons, last started first; whatever outlives spark-daemon.sh's SIGTERM (a
        daemon, an executor, a Python worker) is killed, so no process is left behind."""
        for daemon_class in reversed(self.daemon_classes):
            pid_file = self.pid_file(daemon_class)
            pid = _read_pid(pid_file)
            if pid is None:
                continue
            family = [pid, *descendants(pid)] if _alive(pid) else []
            with contextlib.suppress(ClusterError, subprocess.TimeoutExpired):
                self._daemon("stop", daemon_class)
            _reap(family)
            pid_file.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class StandaloneCluster(_Daemons):
    """`with StandaloneCluster(tmp_path) as cluster:` gives `cluster.master_url` with one ALIVE worker.

    Logs, pid files and the worker's directory (one subdirectory per application, with each
    executor's stdout and stderr) live in `workdir`; port 0 picks free ports.
    """

    daemon_classes = (MASTER_CLASS, WORKER_CLASS)

    def __init__(
        self, workdir: Path, cores: int = 2, memory: str = "2g", master_port: int = 0, start_timeout: float = 60.0
    ) -> None:
        super().__init__(workdir, start_timeout)
        self.cores = cores
        self.memory = memory
        ports = free_ports(3, taken=master_port)
        self.master_port = master_port or ports[0]
        self.webui_port, self.worker_webui_port = ports[1:]
        self.worker_dir = self.workdir / "work"

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "SPARK_WORKER_DIR": str(self.worker_dir)}

    def _make_directories(self) -> None:
        super()._make_directories()
        self.worker_dir.mkdir(parents=True, exist_ok=True)

    def _start(self) -> None:
        self._daemon(
            "start", MASTER_CLASS,
            "--host", HOST, "--port", str(self.master_port), "--webui-port", str(self.webui_port),
        )
        self._daemon(
            "start", WORKER_CLASS, self.master_url,
            "--host", HOST, "--cores", str(self.cores), "--memory", self.memory,
            "--webui-port", str(self.worker_webui_port),
        )
        self._wait_for_worker()

    def _wait_for_worker(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        state: Any = None
        while time.monotonic() < deadline:
            self._check_running()
            with contextlib.suppress(OSError, ValueError):
                state = self.master_state()
                if [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]:
                    return
            time.sleep(0.5)
        raise ClusterError(
            f"no ALIVE worker at {self.webui_url}/json/ after {self.start_timeout:.0f} s "
            f"(last answer: {state!r})\n{self.log_tail()}"
        )

    def master_state(self) -> dict[str, Any]:
        """The master's web UI JSON: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state


class ConnectServer(_Daemons):
    """`with ConnectServer(tmp_path) as server:` gives `server.url` (`sc://127.0.0.1:PORT`) served by
    a Spark Connect server on `master`, started with `sbin/start-connect-server.sh`.

    Its Python workers run this interpreter, so the `publisher` package is importable there; its
    log and pid file live in `workdir`. It fixes what a Connect client cannot set, as
    `publisher.pipeline.spark.get_spark` does for a local session: no web UI, JVMs in UTC.
    """

    daemon_classes = (CONNECT_CLASS,)

    def __init__(
        self, workdir: Path, master: str = "local[2]", conf: dict[str, str] | None = None,
        port: int = 0, start_timeout: float = 120.0,
    ) -> None:
        super().__init__(workdir, start_timeout)
        self.master = master
        self.port = port or free_ports(1)[0]
        self.conf = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
            **(conf or {}),
        }

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def _start(self) -> None:
        settings = [arg for key, value in self.conf.items() for arg in ("--conf", f"{key}={value}")]
        self._script("start-connect-server.sh", "--master", self.master, *settings)
        self._wait_for_port()

    def _wait_for_port(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            self._check_running()
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), timeout=1):
                return
            time.sleep(0.5)
        raise ClusterError(
            f"the Spark Connect server does not accept connections on {HOST}:{self.port} "
            f"after {self.start_timeout:.0f} s\n{self.log_tail()}"
        )


def spark_conf_for(cluster: StandaloneCluster, executor_memory: str = "1g") -> dict[str, str]:
    """Settings for a session on `cluster.master_url`: a driver that listens and advertises itself
    on loopback (executors connect back to it; by default it advertises the host's first
    non-loopback address), no more than the worker offers, and this interpreter, which has the
    `publisher` package installed, for Python workers.

    The executors' Python workers run what the driver process's PYSPARK_PYTHON names, which
    `publisher.pipeline.spark.get_spark` defaults to its own interpreter; the settings here say the same to
    the JVM and the executors' environment, but do not override a PYSPARK_PYTHON the driver
    inherited."""
    return {
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.executor.memory": executor_memory,
        "spark.executor.cores": str(cluster.cores),
        "spark.cores.max": str(cluster.cores),
    }


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


def _reap(pids: list[int], grace: float = 15.0) -> None:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
