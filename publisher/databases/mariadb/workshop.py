"""MariaDB in `publisher bench` and `publisher soak`: the test server, the capture mix through
Python threads, one connection each, and a private server for the soak. The drain benchmark is
not measured here."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from publisher.databases.servers import START_SECONDS, ServerError, free_port, owned, run_logged
from publisher.databases.workbench import Workbench


class MariaDBWorkshop(Workbench):
    name = "mariadb"
    bench_url = "mysql://root@127.0.0.1:3306/test"
    soak_acct_ddl = ("CREATE TABLE {t} (code VARCHAR(120) NOT NULL, day DATE NOT NULL, part SMALLINT NOT NULL, "
                     "name VARCHAR(200), score DECIMAL(12,3), seen DATETIME(3), photo LONGBLOB, note LONGTEXT, "
                     "PRIMARY KEY (code, day, part))")
    soak_retype_sql = "ALTER TABLE {t} MODIFY score DECIMAL(14,4)"
    serves_subscribers = False
    """MariaDB refuses subscribers (docs: guides/mariadb.md)."""

    def capture_mix(self) -> ThreadsMix:
        return ThreadsMix()

    def vacuum_sql(self, table: str) -> str:
        return f"ANALYZE TABLE {table}"

    def soak_server(self, directory: Path) -> PrivateMariaDB:
        return PrivateMariaDB(directory)


class ThreadsMix:
    """The capture mix through Python threads, one connection each; a schema is a database."""

    schema_word = "DATABASE"
    cascade = ""
    table_ddl = ("CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(100) NOT NULL, balance INT NOT NULL, "
                 "updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB")

    def seed(self, engine: Engine, table: str, rows: int) -> None:
        values = [{"id": k, "name": f"name {k}", "balance": k % 1000, "at": f"2026-01-01 00:00:{k % 60:02d}"}
                  for k in range(1, rows + 1)]
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {table} VALUES (:id, :name, :balance, :at)"), values)

    def settle(self, engine: Engine, table: str, event_log: str) -> None:
        with engine.begin() as conn:
            conn.execute(text(f"ANALYZE TABLE {table}"))

    def drive(self, target: Any, seconds: int) -> tuple[int, float]:
        """Run the mix for `seconds` on `target` (its `engine`, `table`, `clients`, `rows` and
        `failure`); the transactions committed and the seconds they took."""
        clients = [Client(target.engine.raw_connection(), target.table, c, target.clients, target.rows)
                   for c in range(target.clients)]
        start = threading.Barrier(target.clients + 1)
        threads = [threading.Thread(target=c.run, args=(start, seconds), daemon=True) for c in clients]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.monotonic()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - began
        for client in clients:
            client.close()
        errors = [c.error for c in clients if c.error is not None]
        if errors:
            raise target.failure(f"a MariaDB transaction failed: {errors[0]}")
        return sum(c.transactions for c in clients), elapsed


class Client:
    """One application connection running the mix, with the keys pgbench's script gives client
    `client` of `clients` on PostgreSQL."""

    def __init__(self, connection: Any, table: str, client: int, clients: int, rows: int) -> None:
        self.connection = connection
        self.client, self.clients, self.window = client, clients, rows // clients
        self.transactions = 0
        self.error: BaseException | None = None
        self.random = random.Random(client)
        self.update = f"UPDATE {table} SET balance = balance + 1, updated_at = NOW(6) WHERE id = %s"
        self.insert = f"INSERT INTO {table} (id, name, balance, updated_at) VALUES (%s, %s, %s, NOW(6))"
        self.delete = f"DELETE FROM {table} WHERE id = %s"

    def key(self, slot: int) -> int:
        return slot * self.clients + self.client + 1

    def run(self, start: threading.Barrier, seconds: int) -> None:
        start.wait()
        deadline = time.monotonic() + seconds
        try:
            with self.connection.cursor() as cursor:
                while time.monotonic() < deadline:
                    self.transaction(cursor, self.transactions)
                    self.transactions += 1
        except Exception as exc:  # reported by drive, which fails the benchmark
            self.error = exc

    def transaction(self, cursor: Any, t: int) -> None:
        for _ in range(2):
            cursor.execute(self.update, (self.key(t + self.random.randrange(self.window)),))
        new = self.key(t + self.window)
        cursor.execute(self.insert, (new, f"name {new}", new % 1000))
        cursor.execute(self.delete, (self.key(t),))
        self.connection.commit()

    def close(self) -> None:
        self.connection.close()


class PrivateMariaDB:
    """A server made by mariadb-install-db; `immediate` is SIGKILL, InnoDB recovers at start.
    As root it runs as the `mysql` user."""

    restartable = True

    def __init__(self, directory: Path) -> None:
        self.server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/usr/local/sbin")
        installer = shutil.which("mariadb-install-db")
        if not self.server or not installer:
            raise ServerError("no mariadbd or mariadb-install-db on this machine")
        self.home = owned(directory / "mariadb", "mysql")
        self.data, self.port = self.home / "data", free_port()
        run_logged([installer, "--no-defaults", f"--datadir={self.data}", *self._user(), "--skip-test-db",
                    "--auth-root-authentication-method=normal"], directory / "mariadb.out")
        self.process: subprocess.Popen[bytes] | None = None
        self._start()
        self._execute("CREATE DATABASE soak CHARACTER SET utf8mb4")
        self.url = f"mysql://root@127.0.0.1:{self.port}/soak"
        self.schema: str | None = "soak"

    @staticmethod
    def _user() -> list[str]:
        return ["--user=mysql"] if os.geteuid() == 0 else []

    def _start(self) -> None:
        command = [str(self.server), "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
                   "--bind-address=127.0.0.1", f"--socket={self.home / 'mysqld.sock'}",
                   f"--pid-file={self.home / 'mysqld.pid'}", f"--log-error={self.home / 'error.log'}",
                   "--skip-log-bin", "--innodb-buffer-pool-size=128M", "--max-allowed-packet=256M",
                   "--innodb-flush-log-at-trx-commit=2", *self._user()]
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
        """Stop the server (`fast`: a clean shutdown; `immediate`: a crash) and start it again."""
        self._stop(signal.SIGKILL if mode == "immediate" else signal.SIGTERM)
        self._start()

    def _stop(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=120)

    def close(self) -> None:
        self._stop(signal.SIGKILL)
