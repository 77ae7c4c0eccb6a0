"""A publisher wired to a real test database: log events, run cycles, read what came out."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from lxml import etree
from sqlalchemy import text

from publisher.capture.install import event_log_ddl, install_capture
from publisher.config import (
    Config,
    DatabaseConfig,
    EventLogColumns,
    EventLogConfig,
    OutputConfig,
    PublisherSettings,
    SparkConfig,
)
from publisher.database import connect
from publisher.pipeline.acknowledge import Acknowledging
from publisher.pipeline.cycle import CycleResult, run_cycle
from publisher.pipeline.event_log import event_log_source
from publisher.pipeline.window import CycleWindow, WindowLimits, plan_window

USR_COLUMNS = ("idu", "fname", "lname", "photo", "age", "active", "born")
USR_DDL = {
    "sqlite": (
        "CREATE TABLE usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), photo BLOB, "
        "age INTEGER, active BOOLEAN, born TIMESTAMP)"
    ),
    "postgresql": (
        "CREATE TABLE {schema}.usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), photo BYTEA, "
        "age INTEGER, active BOOLEAN, born TIMESTAMPTZ)"
    ),
    "mariadb": (
        "CREATE TABLE {schema}.usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), photo BLOB, "
        "age INTEGER, active BOOLEAN, born DATETIME(6))"
    ),
}

TEST_TABLES = ("usr", "grp", "view_usr")
"""The tables the tests publish, with or without triggers."""


@dataclass
class Published:
    """What one or more cycles wrote: the documents in file order and their operations."""

    documents: list[etree._Element] = field(default_factory=list)

    @property
    def operations(self) -> list[etree._Element]:
        return [op for doc in self.documents for op in doc.find("input")]

    def describe(self) -> list[tuple[str, str, int]]:
        """(operation, association, event-id) per operation, in publication order."""
        return [(op.tag, op.findtext("association").strip(), int(op.get("event-id"))) for op in self.operations]


class Harness:
    """One test's publisher: its database (see conftest `database`), config and output directory.

    `user` is the publisher's own database user (loopback); `path` the way cycles run ("driver":
    the small-cycle path, "spark": every cycle as Spark jobs); other keywords are PublisherSettings.
    Most tests log events by hand without installing triggers, so `tables` defaults to the
    tables they use; `tables=()` publishes the tables that carry triggers, as a site would.
    """

    def __init__(
        self, spark: Any, database: Any, tmp_path: Path, user: str | None = None, path: str = "driver", **settings: Any
    ) -> None:
        self.spark = spark
        self.db = database
        self.output = tmp_path / "out"
        columns = settings.pop("columns", EventLogColumns())
        settings.setdefault("tables", TEST_TABLES)
        self.config = Config(
            database=DatabaseConfig(url=database.url, schema=database.schema or None, user=user),
            event_log=EventLogConfig(columns=columns),
            publisher=PublisherSettings(**settings),
            output=OutputConfig(directory=str(self.output)),
            spark=SparkConfig(small_cycle_events=SparkConfig.small_cycle_events if path == "driver" else 0),
        )
        self.engine = connect(self.config)
        self.seen: set[str] = set()

    @property
    def dialect(self) -> str:
        return self.db.dialect

    def reconfigure(self, **settings: Any) -> None:
        self.config = dataclasses.replace(
            self.config, publisher=dataclasses.replace(self.config.publisher, **settings)
        )

    def table(self, name: str) -> str:
        return self.db.qualified(name)

    def create_usr(self) -> None:
        self.db.execute(USR_DDL[self.dialect].format(schema=self.db.schema))

    def insert_usr(self, idu: int, **values: Any) -> None:
        """Insert one usr row by SQL (the state a query-back event reads); unnamed columns are NULL."""
        row = {name: values.get(name) for name in USR_COLUMNS}
        row["idu"] = idu
        born = row["born"]
        if self.dialect == "mariadb" and isinstance(born, dt.datetime) and born.tzinfo is not None:
            row["born"] = born.astimezone(dt.UTC).replace(tzinfo=None)  # a DATETIME holds UTC, as published
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO {self.table('usr')} ({', '.join(USR_COLUMNS)}) "
                    f"VALUES ({', '.join(':' + c for c in USR_COLUMNS)})"
                ),
                row,
            )

    def create_event_log(self) -> None:
        with self.engine.begin() as conn:
            for statement in event_log_ddl(self.config, self.engine):
                conn.exec_driver_sql(statement)

    def install(self, *tables: str, style: str = "field") -> None:
        install_capture(self.config, self.engine, tables, style)  # type: ignore[arg-type]

    def log(self, *events: tuple[Any, ...], perpetrator: str | None = None, status: str = "N") -> list[int]:
        """Insert event rows (type, table, key[, column[, old[, new]]]) by hand; returns their record_ids."""
        c = self.config.event_log.columns
        ids = []
        with self.engine.begin() as conn:
            for event in events:
                event_type, table, key, column, old, new = (tuple(event) + (None,) * 3)[:6]
                row = conn.execute(
                    text(
                        f"INSERT INTO {self.table(self.config.event_log.table)} "
                        f"({c.status}, {c.event_type}, {c.perpetrator}, {c.table_name}, {c.table_key}, "
                        f"{c.column_name}, {c.old_value}, {c.new_value}) "
                        "VALUES (:status, :type, :perp, :table, :key, :column, :old, :new) "
                        f"RETURNING {c.record_id}"
                    ),
                    {"status": status, "type": event_type, "perp": perpetrator, "table": table, "key": key,
                     "column": column, "old": old, "new": new},
                ).scalar_one()
                ids.append(int(row))
        return ids

    def poll(self) -> CycleResult:
        return run_cycle(self.spark, self.engine, self.config)

    def window(self) -> CycleWindow | None:
        """The window the next cycle of the status mode would take."""
        log = event_log_source(self.config, self.engine)
        return plan_window(log, self.engine, WindowLimits.of(self.config.publisher))

    def acknowledging(self) -> Acknowledging:
        """What the status mode's acknowledgement needs, as a cycle resolves it."""
        return Acknowledging.of(self.config, event_log_source(self.config, self.engine))

    def published(self, new_only: bool = True) -> Published:
        """The documents written since the last call (all of them with new_only=False), in name order."""
        names = sorted(p.name for p in self.output.glob("*.xml")) if self.output.exists() else []
        if new_only:
            names = [n for n in names if n not in self.seen]
        self.seen.update(names)
        return Published([etree.parse(str(self.output / n)).getroot() for n in names])

    def statuses(self) -> dict[int, str]:
        c = self.config.event_log.columns
        rows = self.db.rows(
            f"SELECT {c.record_id}, {c.status} FROM {self.table(self.config.event_log.table)} ORDER BY {c.record_id}"
        )
        return {int(r[0]): r[1] for r in rows}

    def rejects(self) -> list[dict[str, Any]]:
        path = self.output / "rejects.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def association(self, key: str, table: str = "usr") -> str:
        return f"{key},table={table},schema={self.schema_label}"

    @property
    def schema_label(self) -> str:
        return self.db.schema or "main"


def read_messages(output: Path, keep_time: bool = True) -> list[dict[str, Any]]:
    """Every message under `output`/messages in file order; without keep_time, the metadata
    messages' own time of writing is left out, so two runs can be compared."""
    found = []
    folder = output / "messages"
    for path in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            message = json.loads(line)
            if not keep_time:
                message.get("lineage", {}).pop("timestamp", None)
            found.append(message)
    return found


def read_change_tables(output: Path) -> dict[str, list[dict[str, Any]]]:
    """Every change table under `output`/changes: its rows, files in name order (publication order)."""
    folder = output / "changes"
    return {
        table.name: [row for path in sorted(table.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
        for table in (sorted(folder.iterdir()) if folder.exists() else [])
    }


def versions_and_data(output: Path, table: str = "usr") -> list[tuple[int, list[str], list[tuple]]]:
    """Each version of `table` the messages under `output` describe (`external_schema_id` on),
    with its columns and the values of the data messages published under it, checking that each
    comes after its version's metadata message and before another."""
    described: list[tuple[int, list[str], list[tuple]]] = []
    version_of: dict[str, int] = {}
    for message in read_messages(output):
        if message.get("table", message.get("lineage", {}).get("table")) != table:
            continue
        if "tableStructure" in message:
            version_of[message["schemaId"]] = message["lineage"]["tableVersion"]
            described.append((message["lineage"]["tableVersion"], list(message["tableStructure"]["tableColumns"]),
                              []))
        else:
            data = message["data"]
            assert version_of[message["headers"]["externalSchemaId"]] == described[-1][0], "data before its version"
            assert list(data) == described[-1][1], "data not in its version's columns"
            described[-1][2].append(tuple(data.values()))
    return described


def drain(h: Harness, cycles: int = 20) -> None:
    """Poll until a cycle finds nothing new."""
    for _ in range(cycles):
        if h.poll().idle:
            return
    raise AssertionError(f"the event log did not drain in {cycles} cycles")


def assert_mirrored(h: Harness, rejects_allowed: bool = True) -> None:
    """No event is left N and the consumer mirror equals the tables."""
    from publisher.service.mirror import verify

    statuses = set(h.statuses().values())
    assert "N" not in statuses
    if not rejects_allowed:
        assert "E" not in statuses, h.rejects()
    assert [str(d) for d in verify(h.config, h.engine)] == []


@contextlib.contextmanager
def publisher_run(config: Path, log_path: Path,
                  env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`publisher run -c CONFIG` in a process of its own (in `env`, else this one's), its stderr
    in `log_path`; stopped by SIGTERM when the block ends (killed if it does not stop within a
    minute)."""
    env = env or {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with log_path.open("w") as log_file:
        run = subprocess.Popen([sys.executable, "-m", "publisher.cli", "run", "-c", str(config)],
                               stdout=subprocess.DEVNULL, stderr=log_file, env=env)
    try:
        yield run
        run.send_signal(signal.SIGTERM)
        run.wait(60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
