"""The mix `publisher bench --capture` runs, and the databases it runs on: the bench schema and
table, the capture installed for each configuration, and the clients that drive the mix
(pgbench on PostgreSQL, Python threads on MariaDB)."""
from __future__ import annotations

import abc
import os
import random
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from publisher.capture.install import CaptureError, capture_of, install_capture
from publisher.capture.tables import Style
from publisher.config import Config, DatabaseConfig
from publisher.database import connect

Configuration = Literal["none", "field", "row", "native-field", "native-row"]
CONFIGURATIONS: tuple[Configuration, ...] = ("none", "field", "row")
NATIVE: tuple[Configuration, ...] = ("native-field", "native-row")
"""PostgreSQL's native capture, measured where the server has its library."""
CAPTURES: dict[Configuration, tuple[Style, bool]] = {
    "field": ("field", False), "row": ("row", False), "native-field": ("field", True), "native-row": ("row", True)}
"""Each configuration's capture: its style, and whether native."""
TABLE = "account"
EVENT_LOG = "event_log"
ROWS = 10_000
CLIENTS = 4
PGBENCH_THREADS = 2


class CaptureBenchError(RuntimeError):
    """The benchmark could not measure: pgbench failed, or a transaction did."""


@dataclass(frozen=True)
class Run:
    """One configuration's run: its committed transactions and the events they logged."""

    configuration: Configuration
    round: int
    transactions: int
    seconds: float
    events: int

    @property
    def tps(self) -> float:
        return round(self.transactions / self.seconds, 1)

    def summary(self) -> dict[str, Any]:
        return {"round": self.round, "tps": self.tps, "transactions": self.transactions,
                "seconds": round(self.seconds, 3), "events": self.events}


class Target(abc.ABC):
    """A database the mix runs on: the bench schema, the table, capture and the driver."""

    schema_word = "SCHEMA"
    cascade = " CASCADE"
    table_ddl: str

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema_name = schema
        self.config = Config(database=DatabaseConfig(url=url, schema=schema))
        self.engine: Engine = connect(self.config)

    def qualified(self, name: str) -> str:
        return f"{self.schema_name}.{name}"

    @contextmanager
    def schema(self) -> Iterator[None]:
        """The bench schema with an empty event log, dropped afterwards whatever happens."""
        drop = f"DROP {self.schema_word} IF EXISTS {self.schema_name}{self.cascade}"
        self.execute(drop, f"CREATE {self.schema_word} {self.schema_name}")
        try:
            install_capture(self.config, self.engine, [])
            yield
        finally:
            self.execute(drop)
            self.engine.dispose()

    def execute(self, *statements: str) -> None:
        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))

    def configurations(self) -> tuple[Configuration, ...]:
        return CONFIGURATIONS

    def measure(self, configuration: Configuration, round_number: int, seconds: int) -> Run:
        self.prepare(configuration)
        transactions, elapsed = self.drive(seconds)
        return Run(configuration, round_number, transactions, elapsed, self.logged_events())

    def prepare(self, configuration: Configuration) -> None:
        """A fresh, seeded table with the configuration's triggers, and an empty event log."""
        table = self.qualified(TABLE)
        self.execute(f"DROP TABLE IF EXISTS {table}", self.table_ddl.format(table=table))
        self.seed()
        if configuration != "none":
            style, native = CAPTURES[configuration]
            install_capture(self.config, self.engine, [TABLE], style=style, native=native)
        self.execute(f"TRUNCATE TABLE {self.qualified(EVENT_LOG)}")
        self.settle()

    def logged_events(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text(f"SELECT COUNT(*) FROM {self.qualified(EVENT_LOG)}")).scalar_one())

    @abc.abstractmethod
    def seed(self) -> None:
        """Keys 1 to ROWS: each client's first window."""

    @abc.abstractmethod
    def settle(self) -> None:
        """Whatever levels the ground between runs."""

    @abc.abstractmethod
    def drive(self, seconds: int) -> tuple[int, float]:
        """Run the mix for `seconds`; the transactions committed and the seconds they took."""


PGBENCH_SCRIPT = """\
\\set k1 (:t + random(0, :window - 1)) * :clients + :client_id + 1
\\set k2 (:t + random(0, :window - 1)) * :clients + :client_id + 1
\\set knew (:t + :window) * :clients + :client_id + 1
\\set kold :t * :clients + :client_id + 1
BEGIN;
UPDATE {table} SET balance = balance + 1, updated_at = now() WHERE id = :k1;
UPDATE {table} SET balance = balance + 1, updated_at = now() WHERE id = :k2;
INSERT INTO {table} (id, name, balance, updated_at) VALUES (:knew, 'name ' || :knew, :knew % 1000, now());
DELETE FROM {table} WHERE id = :kold;
END;
\\set t :t + 1
"""


class PostgreSQLTarget(Target):
    table_ddl = ("CREATE TABLE {table} (id integer PRIMARY KEY, name text NOT NULL, balance integer NOT NULL, "
                 "updated_at timestamp NOT NULL)")

    def configurations(self) -> tuple[Configuration, ...]:
        """The native capture's too, where the server can run it."""
        try:
            capture_of(self.config, self.engine).check_native()
        except CaptureError:
            return CONFIGURATIONS
        return CONFIGURATIONS + NATIVE

    def seed(self) -> None:
        self.execute(
            f"INSERT INTO {self.qualified(TABLE)} SELECT g, 'name ' || g, g % 1000, "
            f"timestamp '2026-01-01' + g * interval '1 second' FROM generate_series(1, {ROWS}) AS g"
        )

    def settle(self) -> None:
        """Fresh statistics, and a checkpoint now rather than in the middle of a run."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"VACUUM ANALYZE {self.qualified(TABLE)}"))
            conn.execute(text(f"VACUUM ANALYZE {self.qualified(EVENT_LOG)}"))
            conn.execute(text("CHECKPOINT"))

    def drive(self, seconds: int) -> tuple[int, float]:
        with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="capture-bench-") as script:
            script.write(PGBENCH_SCRIPT.format(table=self.qualified(TABLE)))
            script.flush()
            result = subprocess.run(self.pgbench_command(script.name, seconds), capture_output=True, text=True,
                                    env=self.pgbench_environment(), check=False)
        return parse_pgbench(result.returncode, result.stdout, result.stderr)

    def pgbench_command(self, script: str, seconds: int) -> list[str]:
        url = make_url(self.url)
        command = ["pgbench", "-n", "-f", script, "-c", str(CLIENTS), "-j", str(PGBENCH_THREADS), "-T", str(seconds),
                   "-D", "t=0", "-D", f"window={ROWS // CLIENTS}", "-D", f"clients={CLIENTS}"]
        for flag, value in (("-h", url.host), ("-p", url.port), ("-U", url.username)):
            if value is not None:
                command += [flag, str(value)]
        return command + [url.database or "postgres"]

    def pgbench_environment(self) -> dict[str, str]:
        environment = dict(os.environ)
        password = make_url(self.config.database.sqlalchemy_url()).password
        if password:
            environment["PGPASSWORD"] = str(password)
        return environment


_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)
_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)


def parse_pgbench(returncode: int, stdout: str, stderr: str) -> tuple[int, float]:
    """The transactions pgbench committed and the seconds they took (from its tps, which leaves
    the connections' start out); any aborted client or failed transaction is an error."""
    processed, failed, tps = (p.search(stdout) for p in (_PROCESSED, _FAILED, _TPS))
    if returncode != 0 or processed is None or tps is None:
        raise CaptureBenchError(f"pgbench failed (exit {returncode}): {_tail(stderr or stdout)}")
    if failed is not None and int(failed.group(1)) > 0:
        raise CaptureBenchError(f"pgbench: {failed.group(1)} failed transactions: {_tail(stderr)}")
    transactions = int(processed.group(1))
    if transactions == 0:
        raise CaptureBenchError(f"pgbench committed no transaction: {_tail(stderr or stdout)}")
    return transactions, transactions / float(tps.group(1))


def _tail(output: str, lines: int = 5) -> str:
    return " | ".join(output.strip().splitlines()[-lines:])


class MariaDBTarget(Target):
    schema_word = "DATABASE"
    cascade = ""
    table_ddl = ("CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(100) NOT NULL, balance INT NOT NULL, "
                 "updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB")

    def seed(self) -> None:
        rows = [{"id": k, "name": f"name {k}", "balance": k % 1000, "at": f"2026-01-01 00:00:{k % 60:02d}"}
                for k in range(1, ROWS + 1)]
        with self.engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {self.qualified(TABLE)} VALUES (:id, :name, :balance, :at)"), rows)

    def settle(self) -> None:
        self.execute(f"ANALYZE TABLE {self.qualified(TABLE)}")

    def drive(self, seconds: int) -> tuple[int, float]:
        clients = [MariaDBClient(self.engine.raw_connection(), self.qualified(TABLE), c) for c in range(CLIENTS)]
        start = threading.Barrier(CLIENTS + 1)
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
            raise CaptureBenchError(f"a MariaDB transaction failed: {errors[0]}")
        return sum(c.transactions for c in clients), elapsed


class MariaDBClient:
    """One application connection running the mix, with the keys PGBENCH_SCRIPT gives client `client`."""

    def __init__(self, connection: Any, table: str, client: int) -> None:
        self.connection = connection
        self.client = client
        self.transactions = 0
        self.error: BaseException | None = None
        self.random = random.Random(client)
        self.update = f"UPDATE {table} SET balance = balance + 1, updated_at = NOW(6) WHERE id = %s"
        self.insert = f"INSERT INTO {table} (id, name, balance, updated_at) VALUES (%s, %s, %s, NOW(6))"
        self.delete = f"DELETE FROM {table} WHERE id = %s"

    def key(self, slot: int) -> int:
        return slot * CLIENTS + self.client + 1

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
        window = ROWS // CLIENTS
        for _ in range(2):
            cursor.execute(self.update, (self.key(t + self.random.randrange(window)),))
        new = self.key(t + window)
        cursor.execute(self.insert, (new, f"name {new}", new % 1000))
        cursor.execute(self.delete, (self.key(t),))
        self.connection.commit()

    def close(self) -> None:
        self.connection.close()
