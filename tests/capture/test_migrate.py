"""`publisher migrate`: the application's migration of published tables, run while the
application writes. No write fails (on MariaDB a plain ALTER makes them fail until the capture is
made anew: see test_migrations), each statement's capture is made anew for the new shape before
any write runs, a TRUNCATE publishes its deletes, and what the database refuses is said with what
had run."""
from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
from harness import Harness, drain
from sqlalchemy import text

from publisher.capture.install import capture_problems
from publisher.cli import main
from publisher.locking.backends import LockScope
from publisher.locking.lock import PublisherLock
from publisher.model.statements import Lexis, StatementSyntaxError, TableName, altered_tables, split_statements
from publisher.service.mirror import verify

PUBLISHER_USER = "publisher_app"
NUMERIC = {"sqlite": "NUMERIC(10,2)", "postgresql": "NUMERIC(10,2)", "mariadb": "DECIMAL(10,2)"}
WIDER = {"postgresql": "ALTER TABLE {t} ALTER COLUMN amount TYPE NUMERIC(12,3)",
         "mariadb": "ALTER TABLE {t} MODIFY amount DECIMAL(12,3)"}


def site(spark, database, tmp_path: Path) -> tuple[Harness, Path]:
    """`person`, keyed by a text and a date, with columns the migrations change and `note`, which
    the application writes; its capture installed; a configuration file for the commands."""
    h = Harness(spark, database, tmp_path, user=PUBLISHER_USER, tables=())
    h.db.execute(f"CREATE TABLE {h.table('person')} (code VARCHAR(20) NOT NULL, day DATE NOT NULL, "
                 f"family_name VARCHAR(40), born DATE, amount {NUMERIC[h.dialect]}, note VARCHAR(40), "
                 "PRIMARY KEY (code, day))")
    h.install("person")
    schema = f'schema = "{h.db.schema}"\n' if h.db.schema else ""
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "{h.db.url}"\n{schema}user = "{PUBLISHER_USER}"\n'
                    f'[output]\ndirectory = "{h.output}"\n', encoding="utf-8")
    return h, path


class Writers:
    """Application threads inserting, updating and deleting rows of `person` (the columns no
    migration touches), each on keys of its own, until stopped; every failure kept."""

    def __init__(self, h: Harness, count: int = 3) -> None:
        self.h = h
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.transactions = 0
        self.threads = [threading.Thread(target=self.write, args=(n,), daemon=True) for n in range(count)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def write(self, writer: int) -> None:
        rng = random.Random(writer)
        person = self.h.table("person")
        while not self.stop.is_set():
            code, day = f"w{writer}-{rng.randrange(12)}", f"2026-0{rng.randrange(1, 4)}-0{rng.randrange(1, 9)}"
            where = f"code = '{code}' AND day = '{day}'"
            action = rng.choice(["insert", "update", "delete", "reinsert"])
            try:
                with self.h.engine.begin() as conn:
                    exists = conn.execute(text(f"SELECT COUNT(*) FROM {person} WHERE {where}")).scalar_one()
                    if action in ("delete", "reinsert") and exists:
                        conn.execute(text(f"DELETE FROM {person} WHERE {where}"))
                    if action in ("insert", "reinsert") and (not exists or action == "reinsert"):
                        conn.execute(text(f"INSERT INTO {person} (code, day, note) VALUES ('{code}', '{day}', "
                                          f"'n{rng.randrange(100)}')"))
                    elif action == "update" and exists:
                        conn.execute(text(f"UPDATE {person} SET note = 'u{rng.randrange(100)}' WHERE {where}"))
                self.transactions += 1
            except Exception as exc:  # what the application would see
                self.errors.append(f"{action}: {exc}")
            time.sleep(0.002)


def migrate(path: Path, *statements: str, capsys=None) -> dict:  # type: ignore[no-untyped-def]
    assert main(["migrate", "-c", str(path), *[a for s in statements for a in ("-e", s)]]) == 0
    if capsys is None:
        return {}
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_writers_never_fail_while_migrate_renames_drops_adds_retypes_and_truncates(spark, database, tmp_path, capsys):
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(f"INSERT INTO {person} VALUES ('a', '2026-01-01', 'Lee', '1990-01-01', 12.5, 'x')")
    with Writers(h) as writers:
        time.sleep(0.3)
        summary = migrate(path, f"ALTER TABLE {person} RENAME COLUMN family_name TO surname", capsys=capsys)
        assert summary["tables"] == ["person"] and summary["shapes_recorded"] == ["person"], summary
        time.sleep(0.2)
        migrate(path, f"ALTER TABLE {person} DROP COLUMN born")
        time.sleep(0.2)
        if h.dialect in WIDER:
            migrate(path, WIDER[h.dialect].format(t=person))
            time.sleep(0.2)
        migrate(path, f"ALTER TABLE {person} ADD COLUMN email VARCHAR(40) DEFAULT 'none'",
                f"UPDATE {person} SET surname = 'Ng' WHERE code = 'a'")
        time.sleep(0.2)
        for _ in range(2):  # cycles among the writes, across the migrations
            h.poll()
        summary = migrate(path, f"TRUNCATE TABLE {person}", capsys=capsys)
        assert summary["truncated"] == ["person"], summary
        time.sleep(0.5)
    assert writers.errors == [], writers.errors[:5]
    assert writers.transactions > 50
    assert capture_problems(h.config, h.engine) == []
    drain(h)
    assert [str(d) for d in verify(h.config, h.engine)] == [], "every object since the TRUNCATE captured whole"
    reasons = {r["reason"] for r in h.rejects()}
    assert reasons <= {"column 'family_name' does not exist in table 'person'",
                       "column 'born' does not exist in table 'person'"}, reasons


@pytest.mark.parametrize("retired", ["keep", "remove"])
@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_the_consumer_settles_after_a_rename_a_retype_and_a_column_added_with_a_default(spark, database, tmp_path,
                                                                                      capsys, retired):
    """Rows published before the migration: each migration that changes the table's shape
    publishes every row again (a snapshot), so `verify` is equal once the log is drained. The
    values of the renamed-away and dropped columns stay with the consumer, said apart (`keep`), or
    every object loses them (`remove`)."""
    from publisher.service.mirror import check

    h, path = site(spark, database, tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + f'[publisher]\nretired_columns = "{retired}"\n',
                    encoding="utf-8")
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', '1990-01-01', {n}.5, 'x')"
                   for n in range(30)))
    drain(h)
    with Writers(h) as writers:
        summary = migrate(path, f"ALTER TABLE {person} RENAME COLUMN family_name TO surname", capsys=capsys)
        assert summary["resync"] == ["person"] and summary["resynced"]["person"] >= 30, summary
        summary = migrate(path, f"ALTER TABLE {person} DROP COLUMN born", capsys=capsys)
        assert summary["resync"] == ["person"], summary
        assert summary["resynced"]["person"] >= 30, summary
        if h.dialect in WIDER:
            migrate(path, WIDER[h.dialect].format(t=person))
        migrate(path, f"ALTER TABLE {person} ADD COLUMN email VARCHAR(40) DEFAULT 'none'")
    assert writers.errors == [], writers.errors[:5]
    drain(h)
    result = check(h.config, h.engine)
    assert [str(d) for d in result.differences] == []
    if retired == "keep":
        assert set(result.retired) == {("person", "family_name"), ("person", "born")}
        assert result.retired[("person", "family_name")] >= 30
    else:
        assert result.retired == {}
        removed = {(op.findtext("association"), a.get("attr-name")) for op in h.published(new_only=False).operations
                   for a in op.iter("modify-attr") if a.find("remove-all-values") is not None}
        assert {a for a, name in removed if name == "family_name"} >= {
            op.findtext("association") for op in h.published(new_only=False).operations
            if op.findtext("association").startswith("code=p")}
    capsys.readouterr()
    assert main(["verify", "-c", str(path)]) == 0
    assert ("retired: person.family_name: " in capsys.readouterr().out) is (retired == "keep")


def test_a_removal_names_only_a_column_the_table_had(spark, sqlite_database, tmp_path):
    """A type 3 naming a column the table never had is rejected as before; one naming a column a
    migration dropped removes the attribute's values."""
    h, path = site(spark, sqlite_database, tmp_path)
    h.db.execute("INSERT INTO person VALUES ('a', '2026-01-01', 'Lee', '1990-01-01', 1.5, 'x')")
    drain(h)
    migrate(path, "ALTER TABLE person DROP COLUMN born")
    drain(h)  # the rows published again
    h.published()
    key = "code=a+day=2026-01-01"
    born, never, updated = h.log((3, "person", key, "born"), (3, "person", key, "never_there"),
                                 (2, "person", key, "born", "1990-01-01", "1991-01-01"))
    drain(h)
    statuses = h.statuses()
    assert (statuses[born], statuses[never], statuses[updated]) == ("S", "E", "E")
    assert [r["record_id"] for r in h.rejects()] == [never, updated]
    assert "column 'never_there' does not exist in table 'person'" in h.rejects()[0]["reason"]
    removed = [(a.get("attr-name"), [child.tag for child in a]) for op in h.published().operations
               for a in op.iter("modify-attr")]
    assert removed == [("born", ["remove-all-values"])]
    # A field query-back of a retired column (a resync's, logged before a later migration took the
    # column away) removes its values; an insert's field query-back still says the object exists.
    h.db.execute("INSERT INTO person VALUES ('b', '2026-01-02', 'Ng', 2.5, 'y')")
    read_back, inserted = h.log((8, "person", key, "born"), (7, "person", "code=b+day=2026-01-02", "born"))
    drain(h)
    statuses = h.statuses()
    assert (statuses[read_back], statuses[inserted]) == ("S", "S")
    published = h.published().operations
    removed = [(op.findtext("association").split(",")[0], a.get("attr-name"), [child.tag for child in a])
               for op in published for a in op.iter("modify-attr")]
    assert removed == [("code=a+day=2026-01-01", "born", ["remove-all-values"])]
    added = [(op.findtext("association").split(",")[0], sorted(a.get("attr-name") for a in op.iter("add-attr")))
             for op in published if op.tag == "add"]
    assert added == [("code=b+day=2026-01-02", ["amount", "family_name", "note"])]


@pytest.mark.parametrize("database", ["sqlite", "mariadb"], indirect=True)
def test_a_column_added_then_renamed_and_dropped_before_a_cycle_rejects_nothing(spark, database, tmp_path):
    """A column added, renamed and dropped before any cycle: nothing is rejected (a field
    query-back of a retired column removes its values, see the test above), and the consumer
    ends equal."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} (code, day, note) VALUES ('p{n}', '2026-01-01', 'x')" for n in range(5)))
    drain(h)
    migrate(path, f"ALTER TABLE {person} ADD COLUMN spare VARCHAR(40)")
    migrate(path, f"ALTER TABLE {person} RENAME COLUMN spare TO extra")
    migrate(path, f"ALTER TABLE {person} DROP COLUMN extra")
    drain(h)
    assert h.rejects() == []
    assert [str(d) for d in verify(h.config, h.engine)] == []


def poll_until_drained(path: Path, capsys) -> list[dict]:  # type: ignore[no-untyped-def]
    summaries = []
    for _ in range(20):
        assert main(["poll", "-c", str(path)]) == 0
        summaries.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
        if summaries[-1]["events"] == 0:
            return summaries
    raise AssertionError("the event log did not drain")


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
def test_the_consumer_settles_after_a_plain_migration_from_the_applications_own_tool(spark, database, tmp_path,
                                                                                   capsys):
    """No `migrate`: the application's tool renames and retypes from its own session while
    writers write (PostgreSQL's event trigger follows in the migration's transaction; SQLite's
    rename rewrites the triggers). The cycle that makes the capture anew publishes every row
    again, so `verify` is equal once drained."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', NULL, {n}.5, 'x')" for n in range(20)))
    poll_until_drained(path, capsys)
    with Writers(h) as writers:
        h.db.execute(f"ALTER TABLE {person} RENAME COLUMN family_name TO surname")
        if h.dialect == "postgresql":
            h.db.execute(WIDER["postgresql"].format(t=person))
        time.sleep(0.3)
    assert writers.errors == [], writers.errors[:5]
    summaries = poll_until_drained(path, capsys)
    assert summaries[0].get("reshaped") == ["person"], summaries[0]
    assert [str(d) for d in verify(h.config, h.engine)] == []


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_a_publisher_killed_between_the_reinstall_and_the_resync_resyncs_in_its_next_cycle(spark, database, tmp_path,
                                                                                         capsys):
    """The cycle that makes a migrated table's capture anew owes every reader its rows in the same
    transaction; a process that dies before publishing them (here: the cycle runs, its resync
    never does) leaves the debt to the next cycle, so `label`'s default reaches the consumer."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', NULL, {n}.5, 'x')" for n in range(5)))
    poll_until_drained(path, capsys)
    h.db.execute(f"ALTER TABLE {person} ADD COLUMN label VARCHAR(10) DEFAULT 'new'")
    assert h.poll().reshaped == ("person",)  # and the process dies here
    missing = [str(d) for d in verify(h.config, h.engine)]
    assert len(missing) == 5 and all("label: expected ['new'], published absent" in d for d in missing), missing

    summaries = poll_until_drained(path, capsys)  # its resync comes after the cycle ...
    assert "reshaped" not in summaries[0]  # (the capture was made anew already: only the resync was left)
    poll_until_drained(path, capsys)  # ... and the next publishes what it logged
    assert [str(d) for d in verify(h.config, h.engine)] == []
    assert h.db.rows(f"SELECT count(*) FROM {h.table('event_log_resyncs')}") == [(0,)]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
def test_migrate_publishes_the_resync_beside_a_running_publisher_one_payer_at_a_time(spark, database, tmp_path,
                                                                                    capsys):
    """With `run` publishing (its lock held), `migrate`, which runs as the tables' owner, publishes
    the rows again itself. A reader's resyncs are one process's at a time: while another holds
    them (a cycle publishing what an earlier migration owes), `migrate` waits, then publishes
    what is still owed."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', NULL, {n}.5, 'x')" for n in range(5)))
    poll_until_drained(path, capsys)
    with PublisherLock(h.config):
        summary = migrate(path, f"ALTER TABLE {person} ADD COLUMN label VARCHAR(10) DEFAULT 'new'", capsys=capsys)
    assert (summary["resync"], summary["resynced"]) == (["person"], {"person": 5})
    poll_until_drained(path, capsys)
    assert [str(d) for d in verify(h.config, h.engine)] == []

    resyncing = PublisherLock(h.config, retry_seconds=0.2, scope=LockScope.RESYNCS)
    assert resyncing.acquire()
    threading.Timer(1.5, resyncing.release).start()
    started = time.monotonic()
    summary = migrate(path, f"ALTER TABLE {person} ADD COLUMN other VARCHAR(10) DEFAULT 'x'", capsys=capsys)
    assert time.monotonic() - started >= 1.5 and summary["resynced"] == {"person": 5}
    poll_until_drained(path, capsys)
    assert [str(d) for d in verify(h.config, h.engine)] == []


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
def test_a_resync_interrupted_before_another_migration_begins_again(spark, database, tmp_path, capsys):
    """A resync killed after logging its chunks (its part of the snapshot left unfinished), then a
    second migration: the chunks it logged were read before that migration, so the next resync
    takes every row again rather than continuing after the last key."""
    from publisher.snapshots.snapshot import snapshot

    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', NULL, {n}.5, 'x')" for n in range(5)))
    poll_until_drained(path, capsys)
    h.db.execute(f"ALTER TABLE {person} ADD COLUMN label VARCHAR(10) DEFAULT 'new'")
    assert h.poll().reshaped == ("person",)
    snapshot(h.config, h.engine, ["person"])  # the resync's chunks, all logged; then the kill
    h.db.execute(f"UPDATE {h.table('event_log_snapshot')} SET finished_at = NULL")
    drain(h)
    h.db.execute(f"ALTER TABLE {person} ADD COLUMN tier VARCHAR(10) DEFAULT 'gold'")

    poll_until_drained(path, capsys)
    poll_until_drained(path, capsys)
    assert [str(d) for d in verify(h.config, h.engine)] == []


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_migrate_that_cannot_keep_the_resyncs_it_owes_runs_nothing_and_says_why(spark, database, tmp_path, capsys):
    """An event log from before `<event_log>_resyncs`, and a migration run by a user who may not
    create it: refused before the table is touched, naming the table and what to do."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(f"DROP TABLE {h.table('event_log_resyncs')}")
    role = f"mig_{h.db.schema[-10:]}"
    h.db.execute(f"CREATE ROLE {role} LOGIN", f"GRANT USAGE ON SCHEMA {h.db.schema} TO {role}")
    try:
        url = h.db.url.replace("postgres@", f"{role}@")
        assert main(["migrate", "-c", str(path), "--set", f"database.url={url}",
                     "-e", f"ALTER TABLE {person} ADD COLUMN label VARCHAR(10) DEFAULT 'new'"]) == 2
        err = capsys.readouterr().err
        assert "cannot create event_log_resyncs" in err and "permission denied" in err and "nothing ran" in err, err
        assert "label" not in [c for (c,) in h.db.rows(
            f"SELECT column_name FROM information_schema.columns WHERE table_schema = '{h.db.schema}' "
            "AND table_name = 'person'")]
    finally:
        h.db.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
                     f"DROP OWNED BY {role}", f"DROP ROLE {role}")


@pytest.mark.parametrize("database", ["sqlite", "mariadb"], indirect=True)
def test_a_truncate_through_migrate_publishes_a_delete_per_object(spark, database, tmp_path):
    """MariaDB and SQLite fire no trigger on TRUNCATE (SQLite has none): migrate deletes the rows
    first, so the consumer ends without them."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(f"INSERT INTO {person} (code, day, note) VALUES ('a', '2026-01-01', 'x'), ('b', '2026-01-02', 'y')")
    drain(h)
    migrate(path, f"TRUNCATE {person}")
    drain(h)
    deleted = [op.findtext("association").split(",table=")[0] for op in h.published(new_only=False).operations
               if op.tag == "delete"]
    assert sorted(deleted) == ["code=a+day=2026-01-01", "code=b+day=2026-01-02"]
    assert verify(h.config, h.engine) == []


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_a_refused_statement_says_what_had_run(spark, database, tmp_path, capsys):
    """PostgreSQL and SQLite undo the whole migration; MariaDB's DDL commits on its own, so the
    message names the statements that ran and are kept (their capture made anew)."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    sql = tmp_path / "0042.sql"
    sql.write_text(f"-- a migration\nALTER TABLE {person} ADD COLUMN email VARCHAR(40);\n\n"
                   f"ALTER TABLE {person} DROP COLUMN no_such_column;\nALTER TABLE {person} DROP COLUMN note;\n",
                   encoding="utf-8")
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "-f", str(sql)]) == 2
    err = capsys.readouterr().err
    assert "statement 2 (line 4) failed" in err and "no_such_column" in err, err
    columns = {c["name"] for c in h.db.engine.dialect.get_columns(h.db.engine.connect(), "person", h.db.schema)}
    if h.dialect == "mariadb":
        assert "statements 1 had run and are kept" in err, err
        assert "email" in columns
    else:
        assert "nothing of the migration was kept" in err, err
        assert "email" not in columns
    assert "note" in columns, "nothing after the refused statement ran"
    assert capture_problems(h.config, h.engine) == []
    h.db.execute(f"INSERT INTO {person} (code, day, note) VALUES ('c', '2026-01-03', 'z')")


def test_malformed_sql_and_a_missing_file_are_refused_before_anything_runs(sqlite_database, spark, tmp_path, capsys):
    h, path = site(spark, sqlite_database, tmp_path)
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "-e", "ALTER TABLE person ADD COLUMN x TEXT DEFAULT 'open"]) == 2
    assert "line 1: a quoted text opened with ' is never closed; nothing has run" in capsys.readouterr().err
    assert main(["migrate", "-c", str(path), "-f", str(tmp_path / "missing.sql")]) == 2
    assert "missing.sql: No such file or directory" in capsys.readouterr().err
    assert "x" not in {row[1] for row in h.db.rows("PRAGMA table_info(person)")}


def test_a_column_named_like_a_multi_valued_attribute_is_refused(spark, sqlite_database, tmp_path, capsys):
    h, path = site(spark, sqlite_database, tmp_path)
    h.db.execute("CREATE TABLE person_phone (code VARCHAR(20) NOT NULL, day DATE NOT NULL, phone VARCHAR(20) "
                 "NOT NULL, PRIMARY KEY (code, day, phone))")
    path.write_text(path.read_text(encoding="utf-8") + '[classes.person]\nmulti_valued = { phone = '
                    '"person_phone.phone" }\n', encoding="utf-8")
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "-e", "ALTER TABLE person RENAME COLUMN note TO phone"]) == 2
    err = capsys.readouterr().err
    assert "a column named 'phone'" in err and "classes.person.multi_valued" in err and "nothing has run" in err
    assert "note" in {row[1] for row in h.db.rows("PRAGMA table_info(person)")}


@pytest.mark.parametrize("database", ["sqlite", "mariadb"], indirect=True)
def test_migrate_runs_beside_a_publisher_holding_the_lock(spark, database, tmp_path):
    """A running publisher holds the event log's lock for its lifetime: migrate takes no part of
    it, and the cycles wait on the migration's tables (MariaDB: its LOCK TABLES) instead."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(f"INSERT INTO {person} (code, day, family_name) VALUES ('a', '2026-01-01', 'Lee')")
    with PublisherLock(h.config) as lock:
        assert lock.held
        migrate(path, f"ALTER TABLE {person} RENAME COLUMN family_name TO surname")
        h.db.execute(f"UPDATE {person} SET surname = 'Ng'")
        drain(h)
    attributes = {a.get("attr-name") for op in h.published(new_only=False).operations for a in op.iter("modify-attr")}
    assert "surname" in attributes


def test_dry_run_prints_the_capture_made_anew_and_changes_nothing(spark, sqlite_database, tmp_path, capsys):
    h, path = site(spark, sqlite_database, tmp_path)
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "--dry-run", "-e", "ALTER TABLE person DROP COLUMN born"]) == 0
    out = capsys.readouterr().out
    assert "ALTER TABLE person DROP COLUMN born;" in out and "CREATE TRIGGER person_publisher_ins" in out
    assert json.loads(out.strip().splitlines()[-1])["dry_run"] is True
    assert "born" in {row[1] for row in h.db.rows("PRAGMA table_info(person)")}
    assert capture_problems(h.config, h.engine) == []


# --- the SQL text's statements ------------------------------------------------------------------

@pytest.mark.parametrize(("sql", "lexis", "expected"), [
    ("ALTER TABLE a ADD b INT; -- c;\nUPDATE a SET b = ';'", Lexis(),
     ["ALTER TABLE a ADD b INT", "UPDATE a SET b = ';'"]),
    ("CREATE FUNCTION f() RETURNS int AS $x$ SELECT 1; $x$ LANGUAGE sql;; SELECT 2", Lexis(dollar_quotes=True),
     ["CREATE FUNCTION f() RETURNS int AS $x$ SELECT 1; $x$ LANGUAGE sql", "SELECT 2"]),
    ("SELECT 'it\\'s;'; # x;\nSELECT 2", Lexis(hash_comments=True, backslash_escapes=True),
     ["SELECT 'it\\'s;'", "SELECT 2"]),
    ("SELECT 'c:\\'; SELECT 1 # 2; SELECT 3", Lexis(), ["SELECT 'c:\\'", "SELECT 1 # 2", "SELECT 3"]),
    ('UPDATE "a;b" SET "c""" = 1 /* ; */; ', Lexis(), ['UPDATE "a;b" SET "c""" = 1 /* ; */']),
])
def test_statements_end_at_a_semicolon_outside_texts_names_comments_and_bodies(sql, lexis, expected):
    assert [s.text for s in split_statements(sql, lexis)] == expected


def test_sqlite_trigger_bodies_are_one_statement_and_lines_are_counted():
    import sqlite3

    sql = "\n-- header\nCREATE TRIGGER t AFTER INSERT ON a BEGIN INSERT INTO b VALUES (1); END;\n\nDELETE FROM a"
    found = split_statements(sql, Lexis(complete=sqlite3.complete_statement))
    assert [(s.text[:14], s.line) for s in found] == [("CREATE TRIGGER", 3), ("DELETE FROM a", 5)]


@pytest.mark.parametrize("sql", ["SELECT 'a", 'SELECT "a', "SELECT /* a", "SELECT $q$ a", "SELECT E'a\\'"])
def test_an_unclosed_quote_comment_or_body_is_an_error_with_its_line(sql):
    with pytest.raises(StatementSyntaxError, match="line 2"):
        split_statements("SELECT 1;\n" + sql, Lexis(dollar_quotes=True))


@pytest.mark.parametrize(("statement", "tables"), [
    ("TRUNCATE usr", [TableName("usr")]),
    ('truncate table S.Usr, "Other" RESTART IDENTITY CASCADE', [TableName("Usr", "S"), TableName("Other", None, True)]),
    ("TRUNCATE ONLY `a``b`", [TableName("a`b", None, True)]),
    ("ALTER TABLE IF EXISTS s.usr RENAME TO members", [TableName("usr", "s"), TableName("members")]),
    ("RENAME TABLE a TO b, c TO d", [TableName(n) for n in "abcd"]),
    ("CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS i ON ONLY usr (x)", [TableName("usr")]),
    ("DROP TABLE IF EXISTS a, b CASCADE", [TableName("a"), TableName("b")]),
    ("DELETE FROM usr", []), ("UPDATE usr u SET u.x = 1", []), ('"TRUNCATE" x', []),
    ("ALTER TABLE staging ADD COLUMN usr INT -- was usr", [TableName("staging")]),
])
def test_the_tables_a_statement_alters(statement, tables):
    assert altered_tables(statement) == tables


@pytest.mark.parametrize(("sql", "lexis", "expected"), [
    ("SELECT n--1; SELECT 2", Lexis(hash_comments=True), ["SELECT n--1", "SELECT 2"]),
    ("SELECT $c$ FROM t; SELECT 2", Lexis(hash_comments=True), ["SELECT $c$ FROM t", "SELECT 2"]),
    ("SELECT E'it\\'s; x'; SELECT 2", Lexis(dollar_quotes=True), ["SELECT E'it\\'s; x'", "SELECT 2"]),
    ("SELECT 1 /* a /* b */ ; */; SELECT 2", Lexis(dollar_quotes=True), ["SELECT 1 /* a /* b */ ; */", "SELECT 2"]),
    ("SELECT [it's;] FROM t; SELECT 2", Lexis(bracket_names=True), ["SELECT [it's;] FROM t", "SELECT 2"]),
])
def test_each_database_spells_its_texts_names_and_comments_its_own_way(sql, lexis, expected):
    assert [s.text for s in split_statements(sql, lexis)] == expected


# --- what a review of migrate found -------------------------------------------------------------

@pytest.mark.parametrize("database", ["sqlite", "mariadb"], indirect=True)
def test_a_truncate_the_database_refuses_leaves_every_row(spark, database, tmp_path, capsys):
    """MariaDB refuses to truncate a table a foreign key references: the DELETE that stands for
    the TRUNCATE must not have emptied it meanwhile (SQLite refuses the DELETE itself)."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    h.db.execute(f"INSERT INTO {person} (code, day, note) VALUES ('a', '2026-01-01', 'x')",
                 f"CREATE TABLE {h.table('visit')} (code VARCHAR(20) NOT NULL, day DATE NOT NULL, "
                 f"FOREIGN KEY (code, day) REFERENCES {person} (code, day))",
                 f"INSERT INTO {h.table('visit')} VALUES ('a', '2026-01-01')")
    if h.dialect == "sqlite":
        h.db.execute("PRAGMA foreign_keys = ON")
    capsys.readouterr()
    code = main(["migrate", "-c", str(path), "-e", f"TRUNCATE TABLE {person}"])
    assert h.db.rows(f"SELECT COUNT(*) FROM {person}") == [(1,)] or code == 0
    if code == 2:
        assert "failed" in capsys.readouterr().err


@pytest.mark.parametrize("database", ["sqlite", "mariadb"], indirect=True)
def test_statements_that_change_rows_pass_through_as_the_applications_own(spark, database, tmp_path):
    """An alias, another table, a published table's name as a column's: the triggers capture
    the rows' changes; nothing is locked or made anew for them."""
    h, path = site(spark, database, tmp_path)
    person, staging = h.table("person"), h.table("staging")
    h.db.execute(f"INSERT INTO {person} (code, day, note) VALUES ('a', '2026-01-01', 'x')",
                 f"CREATE TABLE {staging} (code VARCHAR(20))", f"INSERT INTO {staging} VALUES ('a')")
    alias = " p" if h.dialect == "mariadb" else ""  # SQLite's UPDATE takes no alias
    migrate(path, f"UPDATE {person}{alias} SET note = 'y' WHERE code IN (SELECT code FROM {staging})",
            f"ALTER TABLE {staging} ADD COLUMN person INT")
    assert h.db.rows(f"SELECT note FROM {person}") == [("y",)]
    drain(h)
    assert verify(h.config, h.engine) == []


def test_a_failure_after_kept_statements_still_publishes_their_rows_again(spark, mariadb_database, tmp_path, capsys):
    h, path = site(spark, mariadb_database, tmp_path)
    person = h.table("person")
    h.db.execute(f"INSERT INTO {person} (code, day, note) VALUES ('a', '2026-01-01', 'x')")
    drain(h)
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "-e", f"ALTER TABLE {person} ADD COLUMN state VARCHAR(9) DEFAULT 'new'",
                 "-e", f"ALTER TABLE {person} ADD COLUMN state INT"]) == 2
    assert "statements 1 had run and are kept" in capsys.readouterr().err
    drain(h)
    assert verify(h.config, h.engine) == [], "the default of the kept column published"


def test_tables_held_too_long_name_the_statement_that_waited(spark, mariadb_database, tmp_path, capsys, monkeypatch):
    from publisher.service import migration

    monkeypatch.setattr(migration, "TAKE_SECONDS", 0.5)
    h, path = site(spark, mariadb_database, tmp_path)
    person = h.table("person")
    with h.engine.connect() as holder:
        holder.execute(text(f"SELECT * FROM {person}"))  # an open transaction that read the table
        capsys.readouterr()
        assert main(["migrate", "-c", str(path), "-e", "CREATE TABLE {0}.t1 (x INT)".format(h.db.schema),
                     "-e", f"ALTER TABLE {person} ADD COLUMN c INT"]) == 2
        err = capsys.readouterr().err
        holder.rollback()
    assert "statement 2 (line 3) failed" in err and "held its tables" in err and "statements 1 had run" in err, err


def test_sqlite_runs_a_migration_of_no_published_table_in_one_transaction_too(spark, sqlite_database, tmp_path):
    h, path = site(spark, sqlite_database, tmp_path)
    assert main(["migrate", "-c", str(path), "-e", "CREATE TABLE t2 (x INT)", "-e", "INSERT INTO nosuch VALUES (1)"]
                ) == 2
    assert main(["migrate", "-c", str(path), "--dry-run", "-e", "CREATE TABLE t3 (x INT)"]) == 0
    tables = {name for (name,) in h.db.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables & {"t2", "t3"} == set()


def test_an_index_changes_no_shape_and_publishes_nothing_again(spark, sqlite_database, tmp_path, capsys):
    h, path = site(spark, sqlite_database, tmp_path)
    summary = migrate(path, "CREATE INDEX person_note ON person (note)", capsys=capsys)
    assert summary["tables"] == ["person"] and summary["shapes_recorded"] == [] and summary["resync"] == []


def test_sqlite_a_table_renamed_keeps_its_triggers_and_a_capture_that_cannot_be_made_is_undone(
        spark, sqlite_database, tmp_path, capsys):
    h, path = site(spark, sqlite_database, tmp_path)
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "-e", 'ALTER TABLE person RENAME COLUMN code TO "code+2"']) == 2
    assert "its capture cannot be made anew" in capsys.readouterr().err
    assert "code" in {row[1] for row in h.db.rows("PRAGMA table_info(person)")}, "undone"
    migrate(path, "ALTER TABLE person RENAME TO members")
    assert main(["install", "-c", str(path), "--check"]) == 1
    assert "capture triggers are on table 'members'" in capsys.readouterr().out


@pytest.mark.parametrize("statement", ["BEGIN", "COMMIT", "START TRANSACTION", "ROLLBACK"])
def test_transaction_control_is_refused_before_anything_runs(spark, sqlite_database, tmp_path, capsys, statement):
    h, path = site(spark, sqlite_database, tmp_path)
    capsys.readouterr()
    assert main(["migrate", "-c", str(path), "-e", "ALTER TABLE person ADD COLUMN z INT", "-e", statement]) == 2
    assert "controls a transaction" in capsys.readouterr().err
    assert "z" not in {row[1] for row in h.db.rows("PRAGMA table_info(person)")}


def test_a_trailing_comment_of_one_e_ends_with_its_statement(spark, sqlite_database, tmp_path):
    h, path = site(spark, sqlite_database, tmp_path)
    migrate(path, "UPDATE person SET note = 'x' -- tidy", "ALTER TABLE person ADD COLUMN c INT")
    assert "c" in {row[1] for row in h.db.rows("PRAGMA table_info(person)")}


# --- Alembic --------------------------------------------------------------------------------------

ALEMBIC_VERSION = '''
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade():
    op.alter_column("person", "family_name", new_column_name="surname", existing_type=sa.String(40),
                    schema={schema!r})
    op.add_column("person", sa.Column("email", sa.String(40), server_default="none"), schema={schema!r})
'''


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_an_alembic_migration_through_the_shipped_env_fails_no_write(spark, database, tmp_path):
    """The env.py in examples/alembic, run by Alembic itself: a rename and a column added with a
    default while the application writes."""
    import shutil

    from alembic import command
    from alembic.config import Config as AlembicConfig

    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    scripts = tmp_path / "alembic"
    (scripts / "versions").mkdir(parents=True)
    shutil.copy(Path(__file__).parents[2] / "examples" / "alembic" / "env.py", scripts / "env.py")
    (scripts / "versions" / "0001_rename.py").write_text(ALEMBIC_VERSION.format(schema=h.db.schema),
                                                         encoding="utf-8")
    url = h.engine.url
    if h.dialect == "mariadb":
        url = url.set(database=h.db.schema)
    elif h.dialect == "postgresql":
        url = url.update_query_dict({"options": f"-csearch_path={h.db.schema}"})
    alembic = AlembicConfig()
    alembic.set_main_option("script_location", str(scripts))
    alembic.set_main_option("sqlalchemy.url", url.render_as_string(hide_password=False).replace("%", "%%"))
    alembic.set_main_option("publisher_config", str(path))
    h.db.execute(f"INSERT INTO {person} (code, day, family_name) VALUES ('a', '2026-01-01', 'Lee')")
    with Writers(h) as writers:
        time.sleep(0.3)
        command.upgrade(alembic, "head")
        time.sleep(0.3)
    assert writers.errors == [], writers.errors[:5]
    assert capture_problems(h.config, h.engine) == []
    h.db.execute(f"UPDATE {person} SET surname = 'Ng', email = 'a@b' WHERE code = 'a'")
    drain(h)
    changed = {a.get("attr-name") for op in h.published(new_only=False).operations
               if op.findtext("association").startswith("code=a+") for a in op.iter("modify-attr")}
    assert {"surname", "email"} <= changed
    assert [str(d) for d in verify(h.config, h.engine)] == [], "the row from before published again"


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
def test_every_subscriber_settles_after_migrate_too(spark, database, tmp_path, capsys):
    """The rows are published again for the status mode and for each subscriber whose
    subscription tracks the table."""
    h, path = site(spark, database, tmp_path)
    person = h.table("person")
    path.write_text(path.read_text(encoding="utf-8") + '[subscriptions.all]\ntables = ["person"]\n'
                    f'[subscribers.vault]\nsubscription = "all"\noutput = "{tmp_path / "vault"}"\n', encoding="utf-8")
    assert main(["install", "-c", str(path), "--table", "person"]) == 0
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', NULL, {n}.5, 'x')" for n in range(5)))
    assert main(["poll", "-c", str(path), "--subscriber", "vault"]) == 0
    summary = migrate(path, f"ALTER TABLE {person} RENAME COLUMN family_name TO surname", capsys=capsys)
    assert summary["resynced"] == {"person": 5}, summary
    assert main(["poll", "-c", str(path), "--subscriber", "vault"]) == 0
    poll_until_drained(path, capsys)
    capsys.readouterr()
    assert main(["verify", "-c", str(path), "--subscriber", "vault"]) == 0, capsys.readouterr().out
    assert main(["verify", "-c", str(path)]) == 0, capsys.readouterr().out


def test_messages_carry_the_rows_published_again_under_the_new_version(spark, sqlite_database, tmp_path, capsys):
    """The resync's rows go out in the formats beside XDS as a snapshot's do: data messages under
    the table version the migration began, whose metadata message comes first."""
    from harness import versions_and_data

    h, path = site(spark, sqlite_database, tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + "[output.messages]\nenabled = true\nexternal_schema_id = true\n",
                    encoding="utf-8")
    h.db.execute("INSERT INTO person VALUES ('a', '2026-01-01', 'Lee', NULL, 1.5, 'x')",
                 "INSERT INTO person VALUES ('b', '2026-01-02', 'Ng', NULL, 2.5, 'y')")
    poll_until_drained(path, capsys)
    migrate(path, "ALTER TABLE person RENAME COLUMN family_name TO surname")
    poll_until_drained(path, capsys)
    versions = versions_and_data(h.output, "person")
    assert len(versions) == 2, versions
    _, columns, rows = versions[-1]
    assert "surname" in columns and "family_name" not in columns
    named = [dict(zip(columns, row, strict=True)) for row in rows]
    assert sorted((row["code"], row["surname"]) for row in named) == [("a", "Lee"), ("b", "Ng")]


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_changes_the_publisher_s_own_user_would_log_are_refused_before_anything_runs(spark, database, tmp_path,
                                                                                     capsys):
    """Run with the publisher's own configuration, a TRUNCATE's deletes and a data statement's
    rows would be logged as the publisher's changes and passed over as loopback: refused, naming
    the way out; a statement on no published table still runs, and so does all of it once the
    loopback is allowed."""
    from sqlalchemy.engine import make_url

    h, path = site(spark, database, tmp_path)
    person, staging = h.table("person"), h.table("staging")
    h.db.execute(f"INSERT INTO {person} (code, day, note) VALUES ('a', '2026-01-01', 'x')",
                 f"CREATE TABLE {staging} (code VARCHAR(20))")
    own = make_url(h.db.url).username
    path.write_text(path.read_text(encoding="utf-8").replace(f'user = "{PUBLISHER_USER}"', f'user = "{own}"'),
                    encoding="utf-8")
    for statement, what in ((f"TRUNCATE TABLE {person}", "the deletes of this TRUNCATE"),
                            (f"UPDATE {person} SET note = 'y'", "the rows this statement changes"),
                            (f"WITH gone AS (DELETE FROM {person} RETURNING code) SELECT * FROM gone"
                             if h.dialect == "postgresql" else f"DELETE FROM {person}",
                             "the rows this statement changes")):
        capsys.readouterr()
        assert main(["migrate", "-c", str(path), "-e", f"INSERT INTO {staging} VALUES ('s')", "-e", statement]) == 2
        err = capsys.readouterr().err
        assert f"statement 2 (line 3): {what} would be logged by {own!r}" in err, err
        assert "passed over as loopback" in err and "nothing has run" in err, err
        assert h.db.rows(f"SELECT code, note FROM {person}") == [("a", "x")]
        assert h.db.rows(f"SELECT code FROM {staging}") == [], "nothing of the migration ran"
    migrate(path, f"INSERT INTO {staging} VALUES ('s')", f"SELECT code FROM {person}")
    assert h.db.rows(f"SELECT code FROM {staging}") == [("s",)]
    assert main(["migrate", "-c", str(path), "--set", "publisher.allow_loopback=true",
                 "-e", f"TRUNCATE TABLE {person}"]) == 0
    assert h.db.rows(f"SELECT code FROM {person}") == []


@pytest.mark.parametrize(("statement", "changes"), [
    ("INSERT INTO t VALUES (1)", True), ("update t set a = 1", True), ("DELETE FROM t", True),
    ("REPLACE INTO t VALUES (1)", True), ("MERGE INTO t USING s ON (t.a = s.a) WHEN MATCHED THEN DELETE", True),
    ("WITH x AS (SELECT 1) UPDATE t SET a = 1", True), ("WITH x AS (SELECT 1) SELECT * FROM x", False),
    ("SELECT * FROM t FOR UPDATE", False), ("ALTER TABLE t ADD FOREIGN KEY (a) REFERENCES s ON DELETE CASCADE", False),
    ("SELECT 'DELETE'", False), ("TRUNCATE t", False),
])
def test_the_statements_that_change_rows(statement, changes):
    from publisher.model.statements import changes_rows

    assert changes_rows(statement) is changes


@pytest.mark.parametrize(("file_user", "overrides", "kept"), [
    ("", ["database.url=mysql://app@db.example.org/hr"], "idm"),
    ("", ["database.url=mysql://app@db.example.org/hr", "database.url=mysql://ops@db.example.org/hr"], "idm"),
    ('user = "pub"\n', ["database.url=mysql://app@db.example.org/hr"], "pub"),
    ("", ["publisher.query_limit=5"], None),
    ("", ["database.url=mysql://app@db.example.org/hr", "database.user=other"], "other"),
])
def test_migrate_as_the_application_keeps_the_publisher_s_own_user(tmp_path, file_user, overrides, kept):
    """`--set database.url=…` logs migrate in as the application; the loopback user stays the one
    the cycles use, the configuration's, not the login migrate borrowed."""
    from publisher.cli.migrating import publisher_user_kept
    from publisher.config.loading import load_config

    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "mysql://idm@db.example.org/hr"\n{file_user}', encoding="utf-8")
    config = load_config(path, environ={}, overrides=overrides)
    resolved = publisher_user_kept(config, str(path), overrides)
    assert resolved.database.user == kept
    assert resolved.database.url == config.database.url
