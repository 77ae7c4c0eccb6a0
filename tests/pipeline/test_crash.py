"""A publisher killed at any step of a cycle loses nothing and publishes nothing twice unrecognisably
(docs/concepts/delivery.md).

Each test builds one workload through the real triggers, starts `publisher poll` as its own
process with one failpoint armed, SIGKILLs every process of it (driver, JVM, Python workers)
once the point is reached, then polls again until the event log is drained. The outcome is
compared with a crash-free run of the same workload on a fresh database of the same kind.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import DIALECTS, POSTGRES_URL, TestDatabase, on_each_database_in_turn
from harness import read_change_tables, read_messages
from lxml import etree
from sqlalchemy import create_engine, text

from publisher.cli import main

FAILPOINTS = ["after_read", "query_back", "write", "changes", "before_acknowledge", "acknowledge"]
SPARK_FAILPOINTS = ["query_back", "write", "changes"]
"""The points that lie elsewhere when a cycle runs as Spark jobs: in an executor, after the executors
staged, and the change tables and messages written from the executors' staged parts."""
WRITES_BEFORE = {"write", "changes", "before_acknowledge", "acknowledge"}
"""Failpoints reached after at least one document is in place."""
MARKER_TIMEOUT = 180.0
# Triggers on PostgreSQL record session_user; the publisher must not take it for its own (loopback).
OTHER_USER = "publisher_app"

USR_DDL = "CREATE TABLE {table} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64))"
WORKLOAD = [
    "INSERT INTO {usr} (idu, fname, lname) VALUES (1, 'Ann', 'Lee')",
    "INSERT INTO {usr} (idu, fname, lname) VALUES (2, 'Bob', 'Ray')",
    "INSERT INTO {usr} (idu, fname) VALUES (3, 'Cy')",
    "INSERT INTO {usr} (idu, fname, lname) VALUES (4, 'Di', 'Fox')",
    "UPDATE {usr} SET fname = 'Anne' WHERE idu = 1",
    "UPDATE {usr} SET lname = 'Roy' WHERE idu = 2",
    "DELETE FROM {usr} WHERE idu = 3",
    "UPDATE {usr} SET fname = 'Dee', lname = 'Fix' WHERE idu = 4",
    "INSERT INTO {usr} (idu, fname, lname) VALUES (5, 'Eve', 'Ng')",
    "UPDATE {usr} SET lname = 'Li' WHERE idu = 1",
    "DELETE FROM {usr} WHERE idu = 2",
    "UPDATE {usr} SET fname = 'Eva' WHERE idu = 5",
    "INSERT INTO {usr} (idu, fname, lname) VALUES (6, 'Fay', 'Oz')",
    "UPDATE {usr} SET lname = 'Ox' WHERE idu = 6",
    "UPDATE {usr} SET idu = 7 WHERE idu = 4",
    "INSERT INTO {log} (status, event_type, table_name, table_key) VALUES ('N', 9, 'usr', 'idu=1')",
    "INSERT INTO {log} (status, event_type, table_name, table_key) VALUES ('N', 6, 'usr', 'idu=99')",
]

Operation = tuple[str, str, int, bytes]
"""(tag, association without the schema label, event-id, canonical XML without whitespace)."""


@dataclass(frozen=True)
class Outcome:
    """What polling a workload to the end left behind."""

    statuses: dict[int, str]
    operations: list[Operation]
    rejects: list[tuple[int, str]]
    """(record_id, reason) per line of rejects.jsonl."""
    changes: list[tuple[str, str, str]]
    """(operation, streamPosition, data and beforeData as JSON) per data message, in file order."""
    sequence: list[str]
    """The change sequence of every row of usr's change table, in file order."""


def prepare(db: TestDatabase, directory: Path, path: str = "driver") -> Path:
    """Create usr, install the event log and its triggers with `publisher install`, log the workload.

    `path` "spark" makes every cycle run as Spark jobs (query-back in the executors, documents
    staged by the executors and renamed by the driver)."""
    small = "" if path == "driver" else "small_cycle_events = 0\n"
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "publisher.toml"
    schema = f'schema = "{db.schema}"\n' if db.schema else ""
    config.write_text(
        f'[database]\nurl = "{db.url}"\n{schema}user = "{OTHER_USER}"\n'
        f'[publisher]\nbatch_size = 3\n'
        f'[output]\ndirectory = "{directory / "out"}"\n'
        f'[spark]\nmaster = "local[2]"\n{small}conf = {{ "spark.sql.shuffle.partitions" = "2" }}\n'
        '[output.change_tables]\nenabled = true\n[output.messages]\nenabled = true\n',
        encoding="utf-8",
    )
    db.execute(USR_DDL.format(table=db.qualified("usr")))
    assert main(["install", "-c", str(config), "--table", "usr"]) == 0
    db.execute(*(s.format(usr=db.qualified("usr"), log=db.qualified("event_log")) for s in WORKLOAD))
    return config


def poll_until_drained(db: TestDatabase, config: Path) -> None:
    """Poll in-process (on the test run's warm SparkSession) until no event is left new."""
    for _ in range(5):
        assert main(["poll", "-c", str(config)]) == 0
        if "N" not in statuses(db).values():
            return
    pytest.fail("events still new after 5 cycles")


def statuses(db: TestDatabase) -> dict[int, str]:
    return {int(r[0]): r[1] for r in db.rows(f"SELECT record_id, status FROM {db.qualified('event_log')}")}


def outcome(db: TestDatabase, config: Path) -> Outcome:
    output = config.parent / "out"
    operations = [canonical(op) for doc in documents(output) for op in doc.find("input")]
    rejects_file = output / "rejects.jsonl"
    lines = rejects_file.read_text(encoding="utf-8").splitlines() if rejects_file.exists() else []
    rejects = [(int(r["record_id"]), r["reason"]) for r in map(json.loads, lines)]
    changes = [
        (m["headers"]["operation"], m["headers"]["streamPosition"], json.dumps([m["data"], m["beforeData"]]))
        for m in read_messages(output)
        if "headers" in m
    ]
    sequence = [row["header__change_seq"] for row in read_change_tables(output).get("usr", [])]
    return Outcome(statuses(db), operations, rejects, changes, sequence)


def documents(output: Path) -> list[etree._Element]:
    """Every document in the output directory, in name order; each must parse whole."""
    names = sorted(p.name for p in output.glob("*.xml")) if output.exists() else []
    return [etree.parse(str(output / name)).getroot() for name in names]


def canonical(op: etree._Element) -> Operation:
    """The operation with the (per-database) schema label and layout whitespace taken out."""
    op = etree.fromstring(etree.tostring(op))
    association = op.find("association")
    association.text = association.text.strip().rsplit(",schema=", 1)[0]
    for element in op.iter():
        if element.text is not None and not element.text.strip():
            element.text = None
        if element.tail is not None and not element.tail.strip():
            element.tail = None
    return op.tag, association.text, int(op.get("event-id")), etree.tostring(op, method="c14n")


def temporaries(output: Path) -> list[str]:
    """Files a writer leaves while it works: `.…tmp` from the driver, `.…staged` from executors."""
    names = [str(p.relative_to(output)) for p in output.rglob(".*")] if output.exists() else []
    return sorted(n for n in names if n.endswith((".tmp", ".staged")))


class References:
    """Crash-free outcomes, one per kind of database, each computed once on a database of its own."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.outcomes: dict[str, Outcome] = {}
        self.schemas: list[str] = []

    def of(self, dialect: str) -> Outcome:
        if dialect not in self.outcomes:
            db = self._database(dialect)
            try:
                config = prepare(db, self.directory / dialect)
                poll_until_drained(db, config)
                self.outcomes[dialect] = outcome(db, config)
            finally:
                db.engine.dispose()
        return self.outcomes[dialect]

    def _database(self, dialect: str) -> TestDatabase:
        if dialect == "sqlite":
            url = f"sqlite:///{self.directory / 'reference.db'}"
            return TestDatabase("sqlite", url, None, create_engine(url))
        schema = f"t_{uuid.uuid4().hex[:12]}"
        self.schemas.append(schema)
        db = TestDatabase("postgresql", POSTGRES_URL, schema, create_engine(POSTGRES_URL))
        db.execute(f"CREATE SCHEMA {schema}")
        return db

    def drop(self) -> None:
        if self.schemas:
            engine = create_engine(POSTGRES_URL)
            with engine.begin() as conn:
                for schema in self.schemas:
                    conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            engine.dispose()


@pytest.fixture(scope="module")
def references(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[References]:
    refs = References(tmp_path_factory.mktemp("reference"))
    yield refs
    refs.drop()


def session_members(session: int) -> list[int]:
    """Live processes of a session: Spark's Python daemon puts itself in a process group of its own."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, sid = stat.rsplit(")", 1)[1].split()[:4]
        if int(sid) == session and state != "Z":
            members.append(int(entry))
    return members


def kill_session(session: int) -> None:
    deadline = time.monotonic() + 30
    while members := session_members(session):
        assert time.monotonic() < deadline, f"processes {members} survived SIGKILL"
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def crash_at(failpoint: str, config: Path, markers: Path, *options: str) -> None:
    """Run `publisher poll` (with `options`) in a session of its own until it reaches the
    failpoint, then kill it all."""
    markers.mkdir()
    marker = markers / f"{failpoint}.reached"
    env = {
        **os.environ,
        "PUBLISHER_FAILPOINT": failpoint,
        "PUBLISHER_FAILPOINT_DIR": str(markers),
        "PYSPARK_PYTHON": sys.executable,
    }
    log = markers / "poll.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "publisher.cli", "poll", "-c", str(config), *options],
            stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + MARKER_TIMEOUT
        while not marker.exists():
            if process.poll() is not None:
                pytest.fail(f"poll exited {process.returncode} before {failpoint}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{failpoint} not reached within {MARKER_TIMEOUT:.0f} s:\n{log.read_text()}")
            time.sleep(0.2)
    finally:
        kill_session(process.pid)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("database", "path", "failpoint"),
    [(d, "driver", f) for d in DIALECTS for f in FAILPOINTS]
    + on_each_database_in_turn([("spark", f) for f in SPARK_FAILPOINTS]),
    indirect=["database"],
)
def test_a_kill_at_any_step_loses_nothing_and_duplicates_are_recognisable(
    spark, database, tmp_path, references, path, failpoint
):
    reference = references.of(database.dialect)
    config = prepare(database, tmp_path / "publisher", path)
    output = config.parent / "out"

    crash_at(failpoint, config, tmp_path / "markers")

    crashed = outcome(database, config)
    assert set(crashed.statuses.values()) == {"N"}, "statuses were written before the crash"
    assert bool(crashed.operations) == (failpoint in WRITES_BEFORE)
    assert set(crashed.operations) <= set(reference.operations)
    assert set(crashed.changes) <= set(reference.changes)
    if failpoint == "write":
        # What another executor killed halfway through its document leaves behind.
        first = sorted(output.glob("*.xml"))[0]
        cycle = first.name.split("-")[0]
        (output / f".{cycle}-9999999.xml.tmp").write_bytes(first.read_bytes()[:40])

    poll_until_drained(database, config)
    final = outcome(database, config)

    assert "N" not in final.statuses.values()
    assert final.statuses == reference.statuses
    assert set(final.operations) == set(reference.operations)
    assert set(final.changes) == set(reference.changes)
    assert len(reference.changes) == len(reference.operations)
    assert final.sequence and all(
        earlier <= later for earlier, later in zip(final.sequence, final.sequence[1:])
    ), "change sequences never go back, across the crash"
    assert len(reference.operations) == len({op[2] for op in reference.operations})
    by_event: dict[int, set[Operation]] = {}
    for op in final.operations:
        by_event.setdefault(op[2], set()).add(op)
    assert all(len(copies) == 1 for copies in by_event.values()), "one event-id published two ways"
    assert temporaries(output) == []
    assert set(final.rejects) == set(reference.rejects)
    assert len(reference.rejects) == 1 and 1 <= len(final.rejects) <= 2
    assert reference.statuses[reference.rejects[0][0]] == "E"
    assert list(reference.statuses.values()).count("W") == 1
