"""Private database servers for the soak: each in a temporary directory, on 127.0.0.1 and a free
port, so that restarting it disturbs no other user of the machine's servers.

PostgreSQL and MariaDB refuse to run as root, so as root the servers run as the `postgres` and
`mysql` users. SQLite has no server: its "restart" is not offered.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


def _postgres_bin() -> Path:
    """The server's binaries: PUBLISHER_SOAK_PG_BIN, else the newest of Debian's versions."""
    named = os.environ.get("PUBLISHER_SOAK_PG_BIN")
    if named:
        return Path(named)
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    return max(versions, key=lambda p: int(p.parent.name), default=Path("/usr/lib/postgresql/bin"))


POSTGRES_BIN = _postgres_bin()
START_SECONDS = 60.0


class ServerError(RuntimeError):
    """A private server could not be set up or started: the soak cannot run on that database."""


class Server:
    """A database the soak owns. `url` connects as a superuser to a database the soak may fill."""

    dialect = "sqlite"
    restartable = False

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.url = f"sqlite:///{directory / 'soak.db'}"
        self.schema: str | None = None

    def restart(self, mode: str) -> None:
        """Stop the server (`fast`: a clean shutdown; `immediate`: a crash) and start it again."""
        raise ServerError(f"{self.dialect} has no server to restart")

    def close(self) -> None:
        """Stop the server for good; the directory goes with the soak's own."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_user(user: str, command: list[str]) -> list[str]:
    """Servers refuse root: run them as their own system user when we are root."""
    return ["runuser", "-u", user, "--", *command] if os.geteuid() == 0 else command


def _own(path: Path, user: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(path, user, user)


def _run(command: list[str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise ServerError(f"{' '.join(command)} exited {done.returncode}:\n{tail}")


class PrivatePostgres(Server):
    """A cluster made by initdb, trust authentication on 127.0.0.1 only; fsync is off because a
    restart here is a process crash, never a machine's, and the page cache survives it."""

    dialect = "postgresql"
    restartable = True

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        if not (POSTGRES_BIN / "initdb").exists():
            raise ServerError(f"no PostgreSQL server binaries in {POSTGRES_BIN} (name them with PUBLISHER_SOAK_PG_BIN)")
        self.home = directory / "postgresql"
        _own(self.home, "postgres")
        self.data, self.log = self.home / "data", self.home / "server.log"
        self.port = free_port()
        self._pg(["initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        self._start()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.schema = "soak"

    def _pg(self, command: list[str]) -> None:
        _run(_as_user("postgres", [str(POSTGRES_BIN / command[0]), *command[1:]]), self.directory / "postgresql.out")

    def _start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.home} -c fsync=off"
        self._pg(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start"])

    def restart(self, mode: str) -> None:
        self._pg(["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"])
        self._start()

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])


class PrivateMariaDB(Server):
    """A server made by mariadb-install-db; `immediate` is SIGKILL, InnoDB recovers at start."""

    dialect = "mariadb"
    restartable = True

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/usr/local/sbin")
        installer = shutil.which("mariadb-install-db")
        if not self.server or not installer:
            raise ServerError("no mariadbd or mariadb-install-db on this machine")
        self.home = directory / "mariadb"
        _own(self.home, "mysql")
        self.data, self.port = self.home / "data", free_port()
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        _run([installer, "--no-defaults", f"--datadir={self.data}", *user, "--skip-test-db",
              "--auth-root-authentication-method=normal"], directory / "mariadb.out")
        self.process: subprocess.Popen[bytes] | None = None
        self._start()
        self._execute("CREATE DATABASE soak CHARACTER SET utf8mb4")
        self.url = f"mysql://root@127.0.0.1:{self.port}/soak"
        self.schema = "soak"

    def _start(self) -> None:
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        command = [str(self.server), "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
                   "--bind-address=127.0.0.1", f"--socket={self.home / 'mysqld.sock'}",
                   f"--pid-file={self.home / 'mysqld.pid'}", f"--log-error={self.home / 'error.log'}",
                   "--skip-log-bin", "--innodb-buffer-pool-size=128M", "--max-allowed-packet=256M",
                   "--innodb-flush-log-at-trx-commit=2", *user]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                self._execute("SELECT 1")
                return
            except Exception as exc:  # noqa: BLE001 - any failure means "not up yet"
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.home / "error.log").read_text(errors="replace")[-2000:]
                    raise ServerError(f"mariadbd did not start: {exc}\n{log}") from None
                time.sleep(0.2)

    def _execute(self, statement: str) -> None:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=2)
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement)
        finally:
            conn.close()

    def restart(self, mode: str) -> None:
        self._stop(signal.SIGKILL if mode == "immediate" else signal.SIGTERM)
        self._start()

    def _stop(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=120)

    def close(self) -> None:
        self._stop(signal.SIGKILL)


def open_server(dialect: str, directory: Path) -> Server:
    if dialect == "postgresql":
        return PrivatePostgres(directory)
    if dialect == "mariadb":
        return PrivateMariaDB(directory)
    return Server(directory)
