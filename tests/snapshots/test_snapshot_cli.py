"""`publisher snapshot`: every current row logged once as a row query-back, whatever kills the
command on the way; the arguments it refuses; and the reader a snapshot is for the only one
that publishes it.

The oracle is the event log itself (one type-5 event per current row, no more) and the
consumer mirror (`verify`) once the cycles or check-outs have published the snapshot.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TestDatabase
from lxml import etree
from test_crash import MARKER_TIMEOUT, kill_session
from test_subscriptions import Site

from publisher.cli import main

OTHER_USER = "publisher_app"
USR = "CREATE TABLE {t} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64))"
MEMBER = "CREATE TABLE {t} (idu INTEGER NOT NULL, idg VARCHAR(16) NOT NULL, PRIMARY KEY (idu, idg))"
GROUPS = ("g,1", "g 2", "a=b", "z")
"""Group names a key must quote or escape, so that resuming after one parses it back."""
SNAPSHOT_BY = "publisher snapshot"


def write_config(db: TestDatabase, directory: Path, extra: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    schema = f'schema = "{db.schema}"\n' if db.schema else ""
    config = directory / "publisher.toml"
    config.write_text(
        f'[database]\nurl = "{db.url}"\n{schema}user = "{OTHER_USER}"\n'
        f'[publisher]\nbatch_size = 7\n'
        f'[output]\ndirectory = "{directory / "out"}"\n'
        f'[spark]\nmaster = "local[2]"\nconf = {{ "spark.sql.shuffle.partitions" = "2" }}\n{extra}',
        encoding="utf-8",
    )
    return config


def populated(db: TestDatabase, directory: Path, users: int = 20, spark: str = "") -> Path:
    """usr and member with rows, under capture, with an empty event log; `spark` more of the
    configuration's [spark] section."""
    config = write_config(db, directory, spark)
    db.execute(USR.format(t=db.qualified("usr")), MEMBER.format(t=db.qualified("member")))
    db.execute(*(f"INSERT INTO {db.qualified('usr')} VALUES ({i}, 'f{i}', 'l{i}')" for i in range(1, users + 1)))
    db.execute(*(f"INSERT INTO {db.qualified('member')} VALUES ({i}, '{g}')"
                 for i in range(1, 4) for g in GROUPS))
    assert main(["install", "-c", str(config), "--table", "usr", "--table", "member"]) == 0
    return config


def snapshot_process(config: Path, *options: str, failpoint: str | None = None,
                     markers: Path | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    if failpoint is not None:
        assert markers is not None
        env.update(PUBLISHER_FAILPOINT=failpoint, PUBLISHER_FAILPOINT_DIR=str(markers))
    return subprocess.Popen(
        [sys.executable, "-m", "publisher.cli", "snapshot", "-c", str(config), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
    )


def kill_at_chunk(config: Path, markers: Path, *options: str, takers: Callable[[], int] = lambda: 1) -> None:
    """Run the snapshot until `takers()` of its ranges (each a thread or a task) have each
    committed a chunk and stopped after it, then SIGKILL it: none is between a chunk's documents
    and its commit, whose rerun would write the chunk again (at least once, as the snapshots guide says)."""
    markers.mkdir()
    marker = markers / "snapshot_chunk.reached"
    process = snapshot_process(config, *options, failpoint="snapshot_chunk", markers=markers)
    try:
        deadline = time.monotonic() + MARKER_TIMEOUT
        while not marker.exists() or len(marker.read_text().splitlines()) < takers():
            if process.poll() is not None:
                pytest.fail(f"snapshot exited {process.returncode} before its first chunk:\n"
                            f"{process.stderr.read().decode()}")
            assert time.monotonic() < deadline, "snapshot_chunk not reached"
            time.sleep(0.1)
    finally:
        kill_session(process.pid)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def run_snapshot(config: Path, *options: str) -> dict:
    return run_snapshot_saying(config, *options)[0]


def run_snapshot_saying(config: Path, *options: str) -> tuple[dict, str]:
    """The snapshot's summary, and what it said on stderr."""
    process = snapshot_process(config, *options)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0]), err.decode()


def snapshot_events(db: TestDatabase, perpetrator: str = SNAPSHOT_BY) -> list[tuple[str, str]]:
    """(table, key) of every type-5 event the snapshot logged, in record_id order."""
    return [(r[0], r[1]) for r in db.rows(
        f"SELECT table_name, table_key FROM {db.qualified('event_log')} "
        f"WHERE event_type = 5 AND perpetrator = '{perpetrator}' ORDER BY record_id")]


def event_count(db: TestDatabase) -> int:
    return int(db.rows(f"SELECT count(*) FROM {db.qualified('event_log')}")[0][0])


def poll_until_drained(db: TestDatabase, config: Path) -> None:
    for _ in range(10):
        assert main(["poll", "-c", str(config)]) == 0
        if not db.rows(f"SELECT 1 FROM {db.qualified('event_log')} WHERE status = 'N'"):
            return
    pytest.fail("events still new after 10 cycles")


@pytest.mark.process
def test_a_snapshot_killed_at_each_chunk_resumes_and_logs_every_row_once(spark, database, tmp_path, capsys):
    """Killed after each of its first four chunks of five rows: the third ends member's rows,
    the fourth is usr's first; every run after the first continues where the last one stopped,
    past a table it finished."""
    config = populated(database, tmp_path / "publisher")
    usr = database.qualified("usr")

    logged_after = []
    for run in range(1, 5):
        kill_at_chunk(config, tmp_path / f"m{run}", "--chunk-rows", "5")
        logged_after.append(snapshot_events(database))
    assert [len(events) for events in logged_after] == [5, 10, 12, 17]
    assert all(later[:len(earlier)] == earlier for earlier, later in zip(logged_after, logged_after[1:]))
    assert [t for t, _ in logged_after[-1]] == ["member"] * 12 + ["usr"] * 5, "tables in name order"
    # Writers meanwhile: a row ahead of the snapshot goes, one is added, one behind it changes.
    database.execute(f"DELETE FROM {usr} WHERE idu = 15", f"INSERT INTO {usr} VALUES (99, 'new', 'row')",
                     f"UPDATE {database.qualified('member')} SET idg = 'y' WHERE idu = 1 AND idg = 'z'")

    summary, err = run_snapshot_saying(config, "--chunk-rows", "5")

    assert summary["tables"]["member"]["resumed_after"] is not None
    assert summary["tables"]["usr"]["resumed_after"] == "idu=5"
    assert summary["tables"]["member"]["rows"] == 0 and summary["tables"]["usr"]["rows"] == 15
    # what the progress counts: the rows logged before it resumed, and since
    assert summary["tables"]["member"]["rows_before"] == 12 and summary["tables"]["usr"]["rows_before"] == 5
    (last_usr,) = [line for line in err.splitlines() if line.startswith("snapshot usr: ")][-1:]
    assert last_usr.startswith("snapshot usr: 20 of 20 rows"), err
    assert "logged 15 row query-backs (after 17 the snapshot it resumed logged)" in err
    logged = snapshot_events(database)
    assert len(logged) == len(set(logged)), Counter(logged).most_common(3)
    users = {k for t, k in logged if t == "usr"}
    assert users == {f"idu={i}" for i in [*range(1, 21), 99] if i != 15}
    members = [k for t, k in logged if t == "member"]
    assert len(members) == 12, "every member row once: the renamed one was logged before it changed"
    again = run_snapshot(config, "--table", "member")
    assert again["tables"]["member"] == {"rows": 12, "total": 12, "resumed_after": None}, \
        "a finished snapshot started again is a new one"

    poll_until_drained(database, config)
    assert main(["verify", "-c", str(config)]) == 0, capsys.readouterr()


def test_the_arguments_count_narrow_and_refuse_before_anything_is_logged(database, tmp_path, capsys):
    config = populated(database, tmp_path / "publisher")
    capsys.readouterr()
    snapshot = ["snapshot", "-c", str(config)]

    assert main([*snapshot, "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {"snapshot": "status mode", "dry_run": True,
                                                   "rows": {"member": 12, "usr": 20}}
    assert main([*snapshot, "--dry-run", "--table", "usr", "--where", "idu > 15"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == {"usr": 5}
    assert event_count(database) == 0

    # Valid on usr, not on member, which comes first: refused before usr is logged either.
    assert main([*snapshot, "--where", "fname = 'f1'"]) == 2
    err = capsys.readouterr().err
    assert "--where \"fname = 'f1'\" on table member: " in err, err
    assert "fname" in err.split("on table member:")[1], "the database's reason"
    assert main([*snapshot, "--table", "usr", "--where", "no_such_column > 1"]) == 2
    err = capsys.readouterr().err
    assert "on table usr:" in err and "no_such_column" in err.split("on table usr:")[1], err
    assert main([*snapshot, "--table", "usr", "--table", "nosuch"]) == 2
    assert "--table nosuch" in capsys.readouterr().err
    # Parentheses a comment hides let the condition escape the chunks' key bounds (it looped for ever).
    assert main([*snapshot, "--dry-run", "--where", "idu=2 /*(*/) OR (1=1 /*)*/"]) == 2
    assert "--where 'idu=2 /*(*/) OR (1=1 /*)*/': comments are refused: /* at character 7 begins a block " \
           "comment; a condition has no need of one" in capsys.readouterr().err
    assert main([*snapshot, "--dry-run", "--where", "'"]) == 2
    assert capsys.readouterr().err.strip() == \
        "publisher: --where \"'\": unterminated quote: the quote ' at character 1 is never closed"
    assert event_count(database) == 0

    assert main([*snapshot, "--table", "USR", "--where", "idu <= 5 AND fname <> 'f3'"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["events"] == 4 and list(summary["tables"]) == ["usr"]
    assert snapshot_events(database) == [("usr", f"idu={i}") for i in (1, 2, 4, 5)]

    with pytest.raises(SystemExit) as refused:
        main([*snapshot, "--chunk-rows", "0"])
    assert refused.value.code == 2
    assert "--chunk-rows: expected a number of at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as shown:
        main(["snapshot", "--help"])
    assert shown.value.code == 0
    help_text = capsys.readouterr().out
    for option in ("--table", "--where", "--subscriber", "--dry-run", "--chunk-rows"):
        assert option in help_text, option


HR = {"all": 'tables = ["usr", "member"]', "names": 'tables = ["usr"]\ncolumns = { usr = ["fname"] }'}


def attributes(site: Site, name: str | None, since: int) -> set[str | None]:
    folder = site.root / ("status" if name is None else name)
    names = sorted(p.name for p in folder.glob("*.xml"))
    ops = [op for n in names for op in etree.parse(str(folder / n)).getroot().find("input")][since:]
    return {a.get("attr-name") for op in ops for a in op.iter("add-attr", "modify-attr")}


def snapshot_ids(db: TestDatabase, reader: str | None) -> set[int]:
    perpetrator = SNAPSHOT_BY if reader is None else f"{SNAPSHOT_BY} for {reader}"
    return {int(r[0]) for r in db.rows(f"SELECT record_id FROM {db.qualified('event_log')} "
                                       f"WHERE perpetrator = '{perpetrator}'")}


def published_of(site: Site, name: str | None, ids: set[int]) -> list[tuple[str, str, int]]:
    return [op for op in site.operations(name) if op[2] in ids]


def drained(site: Site, name: str | None = None) -> int:
    """Cycles or check-outs until one takes nothing; the events they took."""
    total = 0
    while taken := (site.poll() if name is None else site.check_out(name)["events"]):
        total += taken
    return total


@pytest.mark.process
def test_a_snapshot_for_a_subscriber_goes_to_it_alone_exactly_once(spark, subscriber_database, tmp_path, capsys):
    db = subscriber_database
    site = Site(spark, db, tmp_path, HR, {"vault": "all", "hr": "names"}, settings="query_limit = 5")
    site.change(*(f"INSERT INTO {{usr}} VALUES ({i}, 'f{i}', 'l{i}')" for i in range(1, 8)),
                "INSERT INTO {member} VALUES (1, 'g,1')", "INSERT INTO {member} VALUES (2, 'a=b')")
    drained(site), drained(site, "vault"), drained(site, "hr")
    rows = 7 + 2

    # Killed after its first chunk, checked out, resumed, checked out: each row once.
    kill_at_chunk(site.path, tmp_path / "m1", "--subscriber", "vault", "--chunk-rows", "2")
    assert site.check_out("vault")["events"] == 2
    summary = run_snapshot(site.path, "--subscriber", "vault", "--chunk-rows", "2")
    assert summary["snapshot"] == "vault" and summary["events"] == rows - 2
    assert summary["tables"]["member"]["resumed_after"] is not None
    site.change("UPDATE {usr} SET fname = 'changed' WHERE idu = 3")
    drained(site, "vault")

    vault_ids = snapshot_ids(db, "vault")
    assert len(vault_ids) == rows
    vault = published_of(site, "vault", vault_ids)
    assert {op[2] for op in vault} == vault_ids
    assert len({key for _, key, _ in vault}) == rows and {tag for tag, _, _ in vault} == {"modify"}, \
        "a type 5 is a <modify> of every column under the default insert_row_operation"
    ids = [event_id for _, _, event_id in site.operations("vault")]
    assert len(ids) == len(set(ids)), "an event published twice across check-outs"
    assert site.verify("vault") == []

    assert drained(site) >= rows, "the status mode takes the vault's snapshot events, to pass them over"
    statuses = {r[0] for r in db.rows(f"SELECT status FROM {db.qualified('event_log')} "
                                      "WHERE perpetrator = 'publisher snapshot for vault'")}
    assert statuses == {"S"}
    assert drained(site, "hr") >= rows
    assert published_of(site, None, vault_ids) == [] and published_of(site, "hr", vault_ids) == []
    assert [key.split(",")[0] for _, key, _ in site.operations("hr")[-1:]] == ["idu=3"], "hr got the update"
    if db.dialect == "postgresql":
        assert db.rows(f"SELECT count(*) FROM {db.qualified('event_log')} "
                       "WHERE perpetrator LIKE 'publisher snapshot%' AND transaction_id IS NULL") == [(0,)]

    # hr: its tracked columns only; nobody else publishes them.
    hr_before = len(site.operations("hr"))
    assert main(["snapshot", "-c", str(site.path), "--subscriber", "hr"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"].keys() == {"usr"}
    drained(site, "hr")
    hr_ids = snapshot_ids(db, "hr")
    assert len(hr_ids) == 7 and {op[2] for op in published_of(site, "hr", hr_ids)} == hr_ids
    assert attributes(site, "hr", hr_before) == {"fname"}
    assert site.verify("hr") == []
    drained(site, "vault"), drained(site)
    assert published_of(site, "vault", hr_ids) == [] and published_of(site, None, hr_ids) == []

    # No --subscriber: the status mode's alone.
    assert main(["snapshot", "-c", str(site.path)]) == 0
    assert json.loads(capsys.readouterr().out)["snapshot"] == "status mode"
    status_ids = snapshot_ids(db, None)
    assert len(status_ids) == rows
    drained(site), drained(site, "vault"), drained(site, "hr")
    assert {op[2] for op in published_of(site, None, status_ids)} == status_ids
    assert published_of(site, "vault", status_ids) == [] and published_of(site, "hr", status_ids) == []
    assert site.verify() == [] and site.verify("vault") == [] and site.verify("hr") == []
    for name in (None, "vault", "hr"):
        ids = [event_id for _, _, event_id in site.operations(name)]
        assert len(ids) == len(set(ids)), name


def test_the_tables_a_snapshot_takes_by_default(spark, subscriber_database, tmp_path, capsys):
    db = subscriber_database
    site = Site(spark, db, tmp_path, HR, {"vault": "all", "hr": "names"})
    db.execute(f"CREATE TABLE {db.qualified('other')} (id INTEGER PRIMARY KEY)")
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')", "INSERT INTO {member} VALUES (1, 'g')")
    capsys.readouterr()
    snapshot = ["snapshot", "-c", str(site.path), "--dry-run"]

    assert main(snapshot) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == {"member": 1, "usr": 1}
    assert main([*snapshot, "--subscriber", "vault"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == {"member": 1, "usr": 1}
    assert main([*snapshot, "--subscriber", "hr"]) == 0
    assert json.loads(capsys.readouterr().out) == {"snapshot": "hr", "dry_run": True, "rows": {"usr": 1}}

    assert main([*snapshot, "--subscriber", "hr", "--table", "member"]) == 2
    assert "--table member: subscriber hr's subscription does not track it" in capsys.readouterr().err
    assert main(["snapshot", "-c", str(site.path), "--subscriber", "zed"]) == 2
    assert "--subscriber zed: no [subscribers.zed] in the configuration" in capsys.readouterr().err
    assert main(["snapshot", "-c", str(site.path), "--table", "other"]) == 2
    assert "--table other" in capsys.readouterr().err
    assert site.events() == 3, "nothing logged by a refused snapshot"


def test_a_snapshot_for_a_subscriber_on_mariadb_is_refused(mariadb_database, tmp_path, capsys):
    """No check-out could read its events there, and every other reader passes them over."""
    db = mariadb_database
    config = populated(db, tmp_path / "publisher", users=3)
    config.write_text(config.read_text(encoding="utf-8") + '[subscriptions.hr]\ntables = ["usr"]\n'
                      f'[subscribers.vault]\nsubscription = "hr"\noutput = "{tmp_path / "vault"}"\n',
                      encoding="utf-8")
    capsys.readouterr()

    for dry_run in ([], ["--dry-run"]):
        assert main(["snapshot", "-c", str(config), "--subscriber", "vault", *dry_run]) == 2
        assert "subscribers need PostgreSQL or SQLite" in capsys.readouterr().err
    assert event_count(db) == 0


def test_a_snapshot_for_a_subscriber_that_tracks_no_inserts_is_refused(sqlite_database, tmp_path, capsys):
    """Its check-outs would pass every row query-back over: nothing would ever be published."""
    db = sqlite_database
    config = populated(db, tmp_path / "publisher", users=3)
    config.write_text(config.read_text(encoding="utf-8") + '[subscriptions.gone]\ntables = ["usr"]\n'
                      'operations = ["delete"]\n'
                      f'[subscribers.audit]\nsubscription = "gone"\noutput = "{tmp_path / "audit"}"\n',
                      encoding="utf-8")
    capsys.readouterr()
    assert main(["snapshot", "-c", str(config), "--subscriber", "audit"]) == 2
    assert "--subscriber audit: its subscription does not track inserts" in capsys.readouterr().err
    assert event_count(db) == 0


KEY_TYPES = {
    "sqlite": {"ts": "TIMESTAMP", "n": "NUMERIC(10,2)", "r": "REAL", "s": "VARCHAR(20)"},
    "postgresql": {"ts": "TIMESTAMPTZ", "b": "BYTEA", "n": "NUMERIC(10,2)", "r": "REAL", "s": "VARCHAR(20)"},
    "mariadb": {"ts": "DATETIME(6)", "b": "VARBINARY(16)", "n": "DECIMAL(10,2)", "r": "DOUBLE", "s": "VARCHAR(20)"},
}
"""Key types a snapshot continues after: SQLite compares a REAL key by its text, a binary key
is bound as bytes (SQLite's triggers cannot log one)."""


def key_literal(kind: str, i: int, dialect: str) -> str:
    if kind == "b":
        return f"'\\x0{i}ff'::bytea" if dialect == "postgresql" else f"X'0{i}FF'"
    return {"ts": f"'2026-01-0{i} 10:00:00'", "n": f"{i}.5", "r": f"{i}.25", "s": f"'k {i},x'"}[kind]


def test_a_snapshot_stopped_at_any_chunk_continues_after_keys_of_every_kind(database, tmp_path, monkeypatch):
    from publisher import failpoints
    from publisher.config.loading import load_config
    from publisher.database import connect
    from publisher.snapshots.snapshot import snapshot

    config = write_config(database, tmp_path / "publisher")
    tables = [f"k_{kind}" for kind in KEY_TYPES[database.dialect]]
    for kind, sql_type in KEY_TYPES[database.dialect].items():
        table = database.qualified(f"k_{kind}")
        database.execute(f"CREATE TABLE {table} (k {sql_type} PRIMARY KEY, v INTEGER)",
                         *(f"INSERT INTO {table} VALUES ({key_literal(kind, i, database.dialect)}, {i})"
                           for i in range(1, 8)))
    assert main(["install", "-c", str(config), *(a for t in tables for a in ("--table", t))]) == 0
    loaded = load_config(config)
    engine = connect(loaded)

    class Killed(Exception):
        pass

    chunks = Counter[str]()

    def reached(name: str) -> None:
        chunks[name] += 1
        if chunks[name] in (3, 8, 11, 14):
            raise Killed

    monkeypatch.setattr(failpoints, "reached", reached)
    for _ in range(len(tables) * 4 + 4):
        try:
            snapshot(loaded, engine, chunk_rows=2)
            break
        except Killed:
            continue
    engine.dispose()

    logged = snapshot_events(database)
    assert len(logged) == len(set(logged)), Counter(logged).most_common(3)
    assert Counter(t for t, _ in logged) == dict.fromkeys(tables, 7)


def test_a_snapshot_continued_with_more_tables_takes_them_anew(database, tmp_path, monkeypatch, capsys):
    """usr finished in an earlier snapshot is no part of the member snapshot being continued:
    continued with usr too, it logs every usr row again."""
    from publisher import failpoints

    config = populated(database, tmp_path / "publisher", users=4)
    assert main(["snapshot", "-c", str(config), "--table", "usr"]) == 0

    def killed(name: str) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(failpoints, "reached", killed)
        assert main(["snapshot", "-c", str(config), "--table", "member", "--chunk-rows", "5"]) == 130
    capsys.readouterr()
    assert main(["snapshot", "-c", str(config), "--chunk-rows", "5"]) == 0
    summary = json.loads(capsys.readouterr().out)

    assert summary["tables"]["member"]["rows"] == 7 and summary["tables"]["member"]["resumed_after"] is not None
    assert summary["tables"]["usr"] == {"rows": 4, "total": 4, "resumed_after": None}
    assert Counter(t for t, _ in snapshot_events(database)) == {"usr": 8, "member": 12}


def test_verify_repair_as_a_command_loads_the_rows_the_triggers_never_saw(postgresql_database, tmp_path, capsys):
    """The rows of a table captured after they were written: verify finds them missing, exit 1;
    verify --repair publishes exactly them, prints what it logged and the clean verification,
    exit 0; verify is then clean."""
    db = postgresql_database
    config = populated(db, tmp_path / "publisher", users=4)
    capsys.readouterr()
    assert main(["verify", "-c", str(config)]) == 1
    assert "no documents to replay" in capsys.readouterr().err
    assert main(["verify", "-c", str(config), "--repair"]) == 0
    out = capsys.readouterr().out.splitlines()
    members = 3 * len(GROUPS)
    assert f"{4 + members} differences over {4 + members} objects in 2 tables" in out, out
    assert json.loads(out[-2]) == {"repair": {"member": {"add": members}, "usr": {"add": 4}}, "events": 4 + members}
    assert out[-1].startswith(f"mirror equals source: {4 + members} objects in 2 tables")
    assert main(["verify", "-c", str(config)]) == 0
    assert main(["verify", "-c", str(config), "--repair"]) == 0
    assert "repair" not in capsys.readouterr().out
