"""PostgreSQL in `publisher bench` and `publisher soak`: the test server, the workload written
set-based (generate_series), the capture mix through pgbench, and a private cluster for the soak."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url

from publisher.databases.servers import ServerError, as_user, free_port, owned, run_logged
from publisher.databases.workbench import Workbench


class PostgreSQLWorkshop(Workbench):
    name = "postgresql"
    bench_url = "postgresql://postgres@127.0.0.1:5432/test"
    soak_acct_ddl = ("CREATE TABLE {t} (code VARCHAR(120) NOT NULL, day DATE NOT NULL, part BOOLEAN NOT NULL, "
                     "name VARCHAR(200), score NUMERIC(12,3), seen TIMESTAMP(3), photo BYTEA, note TEXT, "
                     "PRIMARY KEY (code, day, part))")
    soak_parts = (True, False)
    soak_retype_sql = "ALTER TABLE {t} ALTER COLUMN score TYPE NUMERIC(14,4)"
    soak_sockets = (".s.PGSQL",)
    soak_plain_ddl = True
    """As the application's own tool runs them: its event trigger follows, and `run`'s cycle
    publishes the rows again."""

    def backlog(self, schema: str) -> Backlog:
        return Backlog(schema)

    def capture_mix(self) -> PgbenchMix:
        return PgbenchMix()

    def vacuum_sql(self, table: str) -> str:
        return f"VACUUM ANALYZE {table}"

    def indexed_copy_sql(self, copy: str, table: str) -> str:
        return f"CREATE TABLE {copy} (LIKE {table} INCLUDING INDEXES)"

    def soak_server(self, directory: Path) -> PrivatePostgres:
        return PrivatePostgres(directory)

    def soak_schema_sql(self, schema: str) -> list[str]:
        return [f"CREATE SCHEMA IF NOT EXISTS {schema}"]


class Backlog:
    """The bench workload in a schema of its own, dropped and recreated; rows made in the server."""

    app_user = "session_user"
    binary_type = "BYTEA"

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.drop_sql = f"DROP SCHEMA IF EXISTS {schema} CASCADE"

    def clear(self, url: str) -> None:
        """Nothing outside the schema, which `prepare` makes afresh."""

    def prepare(self, conn: Connection, rows: int, events: int) -> None:
        conn.exec_driver_sql(self.drop_sql)
        conn.exec_driver_sql(f"CREATE SCHEMA {self.schema}")

    def insert_usr(self, conn: Connection, table: str, lo: int, hi: int) -> None:
        conn.execute(
            text(
                f"INSERT INTO {table} (idu, photo, fname, lname, email, age, score, active, born) "
                "SELECT g, decode(md5(g::text), 'hex'), 'first' || g, 'last' || g, 'user' || g || '@example.com', "
                "20 + g % 50, g % 1000, g % 2 = 0, timestamp '2000-01-01' + g * interval '1 minute' "
                "FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def insert_grp(self, conn: Connection, table: str, lo: int, hi: int) -> None:
        conn.execute(
            text(
                f"INSERT INTO {table} (gid, name, descr, members, changed) "
                "SELECT g, 'group' || g, 'description of group ' || g, g % 100, "
                "timestamp '2000-01-01' + g * interval '1 hour' "
                "FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def new_photo(self, generation: int) -> str:
        return f"decode(md5(idu::text || '.{generation}'), 'hex')"

    def later(self, column: str) -> str:
        return f"{column} + interval '1 second'"

    def log_field_query_backs(self, conn: Connection, event_log: str, lo: int, hi: int, rows: int,
                              columns: tuple[str, ...], spread: int) -> None:
        names = ", ".join(f"'{c}'" for c in columns)
        conn.execute(
            text(
                f"INSERT INTO {event_log} (event_type, perpetrator, table_name, table_key, column_name) "
                f"SELECT 7 + g % 2, session_user, 'usr', 'idu=' || (1 + g * {spread} % {rows}), "
                f"(ARRAY[{names}])[1 + g % {len(columns)}] "
                "FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g"
            ),
            {"lo": lo, "hi": hi},
        )

    def analyze(self, conn: Connection, tables: list[str]) -> None:
        conn.exec_driver_sql(f"ANALYZE {', '.join(tables)}")


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
PGBENCH_THREADS = 2


class PgbenchMix:
    """The capture mix through pgbench (on PATH), its clients each a connection of its own."""

    schema_word = "SCHEMA"
    cascade = " CASCADE"
    table_ddl = ("CREATE TABLE {table} (id integer PRIMARY KEY, name text NOT NULL, balance integer NOT NULL, "
                 "updated_at timestamp NOT NULL)")

    def seed(self, engine: Engine, table: str, rows: int) -> None:
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {table} SELECT g, 'name ' || g, g % 1000, "
                              f"timestamp '2026-01-01' + g * interval '1 second' FROM generate_series(1, {rows}) AS g"))

    def settle(self, engine: Engine, table: str, event_log: str) -> None:
        """Fresh statistics, and a checkpoint now rather than in the middle of a run."""
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"VACUUM ANALYZE {table}"))
            conn.execute(text(f"VACUUM ANALYZE {event_log}"))
            conn.execute(text("CHECKPOINT"))

    def drive(self, target: Any, seconds: int) -> tuple[int, float]:
        """Run the mix for `seconds` on `target` (its `url`, `password`, `table`, `clients`,
        `rows` and `failure`); the transactions committed and the seconds they took."""
        with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="capture-bench-") as script:
            script.write(PGBENCH_SCRIPT.format(table=target.table))
            script.flush()
            result = subprocess.run(pgbench_command(target, script.name, seconds), capture_output=True, text=True,
                                    env=_environment(target.password), check=False)
        try:
            return parse_pgbench(result.returncode, result.stdout, result.stderr)
        except ValueError as exc:
            raise target.failure(str(exc)) from None


def pgbench_command(target: Any, script: str, seconds: int) -> list[str]:
    url = make_url(target.url)
    command = ["pgbench", "-n", "-f", script, "-c", str(target.clients), "-j", str(PGBENCH_THREADS),
               "-T", str(seconds), "-D", "t=0", "-D", f"window={target.rows // target.clients}",
               "-D", f"clients={target.clients}"]
    for flag, value in (("-h", url.host), ("-p", url.port), ("-U", url.username)):
        if value is not None:
            command += [flag, str(value)]
    return command + [url.database or "postgres"]


def _environment(password: str | None) -> dict[str, str]:
    environment = dict(os.environ)
    if password:
        environment["PGPASSWORD"] = password
    return environment


_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)
_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)


def parse_pgbench(returncode: int, stdout: str, stderr: str) -> tuple[int, float]:
    """The transactions pgbench committed and the seconds they took (from its tps, which leaves
    the connections' start out); any aborted client or failed transaction is a ValueError."""
    processed, failed, tps = (p.search(stdout) for p in (_PROCESSED, _FAILED, _TPS))
    if returncode != 0 or processed is None or tps is None:
        raise ValueError(f"pgbench failed (exit {returncode}): {_tail(stderr or stdout)}")
    if failed is not None and int(failed.group(1)) > 0:
        raise ValueError(f"pgbench: {failed.group(1)} failed transactions: {_tail(stderr)}")
    transactions = int(processed.group(1))
    if transactions == 0:
        raise ValueError(f"pgbench committed no transaction: {_tail(stderr or stdout)}")
    return transactions, transactions / float(tps.group(1))


def _tail(output: str, lines: int = 5) -> str:
    return " | ".join(output.strip().splitlines()[-lines:])


def _server_bin() -> Path:
    """The server's binaries: PUBLISHER_SOAK_PG_BIN, else the newest of Debian's versions."""
    named = os.environ.get("PUBLISHER_SOAK_PG_BIN")
    if named:
        return Path(named)
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    return max(versions, key=lambda p: int(p.parent.name), default=Path("/usr/lib/postgresql/bin"))


class PrivatePostgres:
    """A cluster made by initdb, trust authentication on 127.0.0.1 only; fsync is off because a
    restart here is a process crash, never a machine's, and the page cache survives it. As root
    it runs as the `postgres` user."""

    restartable = True

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.bin = _server_bin()
        if not (self.bin / "initdb").exists():
            raise ServerError(f"no PostgreSQL server binaries in {self.bin} (name them with PUBLISHER_SOAK_PG_BIN)")
        self.home = owned(directory / "postgresql", "postgres")
        self.data, self.log = self.home / "data", self.home / "server.log"
        self.port = free_port()
        self._pg(["initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        self.start()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.schema: str | None = "soak"

    def _pg(self, command: list[str]) -> None:
        run_logged(as_user("postgres", [str(self.bin / command[0]), *command[1:]]), self.directory / "postgresql.out")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.home} -c fsync=off"
        self._pg(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start"])

    def restart(self, mode: str) -> None:
        """Stop the server (`fast`: a clean shutdown; `immediate`: a crash) and start it again."""
        self.stop(mode)
        self.start()

    def stop(self, mode: str) -> None:
        self._pg(["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"])

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])
