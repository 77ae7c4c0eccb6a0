"""Migrations of published tables, through the real triggers and the application's own
connection: PostgreSQL's capture follows them in the migration's transaction, so no write of the
application fails; MariaDB's and SQLite's is made anew by the next cycle, and `install --check`
names it meanwhile. TRUNCATE on PostgreSQL publishes a delete per object."""
from __future__ import annotations

import dataclasses
import logging
import uuid

import pyarrow.parquet as pq
import pytest
from harness import Harness, assert_mirrored, drain, versions_and_data
from sqlalchemy import text

from publisher.capture.install import capture_problems, install_capture
from publisher.cli import main
from publisher.config import ChangeTablesConfig, MessagesConfig
from publisher.service.mirror import verify
from publisher.service.stats import Unpublished, unpublished_tables

PUBLISHER_USER = "publisher_app"


def harness_for(spark, database, tmp_path, **settings) -> Harness:
    """Capture is the same on either path of the cycle: these tests run the driver's."""
    h = Harness(spark, database, tmp_path, user=PUBLISHER_USER, tables=(), **settings)
    h.db.execute(f"CREATE TABLE {h.table('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), "
                 f"lname VARCHAR(64), born DATE)")
    h.install("usr")
    return h


def application(h: Harness, *statements: str) -> None:
    """The application's statements, in one transaction of its own connection."""
    with h.engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))


def columns_differences(h: Harness) -> list[str]:
    """What `verify` finds on the table's columns now: a dropped column's values stay with the
    consumer, which the publisher no longer speaks of."""
    current = {name for (name,) in h.db.rows(
        f"SELECT column_name FROM information_schema.columns WHERE table_schema = '{h.db.schema}' "
        f"AND table_name = 'usr'")} if h.dialect != "sqlite" else {
        row[1] for row in h.db.rows("PRAGMA table_info(usr)")}
    return [str(d) for d in verify(h.config, h.engine) if d.attribute is None or d.attribute in current]


def published_attributes(h: Harness) -> set[str]:
    return {attr.get("attr-name") for op in h.published().operations for attr in op.iter("add-attr", "modify-attr")}


def test_postgresql_capture_follows_a_migration_in_its_own_transaction(spark, postgresql_database,
                                                                        tmp_path):
    h = harness_for(spark, postgresql_database, tmp_path)
    usr = h.table("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', '1990-01-01'), (2, 'Bo', 'Ng', NULL)")
    drain(h)
    h.published()
    # The migration and the application's writes in one transaction: none of them fails.
    application(
        h,
        f"ALTER TABLE {usr} DROP COLUMN lname",
        f"UPDATE {usr} SET fname = 'Bob' WHERE idu = 2",
        f"ALTER TABLE {usr} RENAME COLUMN fname TO given",
        f"ALTER TABLE {usr} ADD COLUMN email text",
        f"UPDATE {usr} SET given = 'Anne' WHERE idu = 1",
        f"INSERT INTO {usr} (idu, given, email) VALUES (3, 'Cy', 'cy@example.com')",
        f"UPDATE {usr} SET email = 'ann@example.com' WHERE idu = 1",
        f"DELETE FROM {usr} WHERE idu = 2",
    )
    (problem,) = capture_problems(h.config, h.engine)
    assert problem.startswith("table 'usr'") and "followed the migration" in problem
    drain(h)
    assert {"given", "email"} <= published_attributes(h)
    # Logged before the rename, under the name the table no longer has: rejected, saying why.
    (rejected,) = h.rejects()
    assert (rejected["column_name"], rejected["new_value"]) == ("fname", "Bob")
    assert rejected["reason"] == "column 'fname' does not exist in table 'usr'"
    assert capture_problems(h.config, h.engine) == []  # the cycle put the table's own capture back
    application(h, f"UPDATE {usr} SET email = 'anne@example.com' WHERE idu = 1",
                f"INSERT INTO {usr} (idu, given) VALUES (4, 'Di')")
    fields = h.db.rows(f"SELECT event_type, column_name, new_value FROM {h.table('event_log')} "
                       f"WHERE status = 'N' ORDER BY record_id")
    assert fields == [(2, "email", "anne@example.com"), (1, "given", "Di")]  # field events again
    drain(h)
    assert columns_differences(h) == []
    assert "N" not in set(h.statuses().values())


def assert_mirrored_on_columns(h: Harness) -> None:
    assert "N" not in set(h.statuses().values())
    assert "E" not in set(h.statuses().values()), h.rejects()


def test_postgresql_install_waits_for_no_application_transaction_on_another_table(spark, postgresql_database,
                                                                                 tmp_path):
    """Installing one table's capture again takes no lock on an existing event log: it would
    hold up every write the triggers log until the install ends, and deadlock with a writer of
    the table being installed (the application's statement is the one that fails)."""
    import concurrent.futures

    h = harness_for(spark, postgresql_database, tmp_path)
    grp = h.table("grp")
    application(h, f"CREATE TABLE {grp} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))")
    h.install("grp")
    with h.engine.connect() as writer:
        writer.execute(text(f"INSERT INTO {grp} VALUES (1, 'open')"))  # its transaction stays open
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            installing = pool.submit(h.install, "usr")
            try:
                installing.result(timeout=20)
            finally:
                writer.rollback()


def test_postgresql_followed_capture_keys_rows_as_the_installed_one_does(spark, postgresql_database,
                                                                         tmp_path):
    """The column-blind capture builds table_keys from the catalog, the installed one from
    reflection: for keys of every type, both must name the same objects."""
    from test_real_schemas import TYPED_KEYS

    h = Harness(spark, postgresql_database, tmp_path, user=PUBLISHER_USER, tables=())
    ddl, _, rows = TYPED_KEYS["postgresql"]
    h.db.execute(ddl.format(s=h.db.schema))
    h.install("acct")
    acct = h.table("acct")
    for row in rows:
        application(h, f"INSERT INTO {acct} (c, b, ts, t, u, n, d, f, h, v) VALUES ({', '.join(row)}, 'x')")
    log = h.table("event_log")
    installed = [k for (k,) in h.db.rows(f"SELECT DISTINCT table_key FROM {log} ORDER BY 1")]
    application(h, f"ALTER TABLE {acct} ADD COLUMN extra text", f"UPDATE {acct} SET v = 'y'", f"DELETE FROM {acct}")
    followed = h.db.rows(f"SELECT event_type, table_key FROM {log} WHERE event_type IN (2, 4) ORDER BY record_id")
    assert sorted(k for t, k in followed if t == 2) == installed
    assert sorted(k for t, k in followed if t == 4) == installed
    drain(h)
    assert_mirrored(h, rejects_allowed=False)


def test_postgresql_truncate_publishes_a_delete_per_object_in_order(spark, postgresql_database, tmp_path):
    h = harness_for(spark, postgresql_database, tmp_path)
    usr = h.table("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL), (2, 'Bo', 'Ng', NULL)")
    drain(h)
    h.published()
    application(h, f"INSERT INTO {usr} VALUES (3, 'Cy', NULL, NULL)", f"TRUNCATE {usr}",
                f"INSERT INTO {usr} VALUES (2, 'Bob', NULL, NULL)")
    drain(h)
    operations = [(op.tag, op.findtext("association").strip()) for op in h.published().operations]
    assert [tag for tag, _ in operations] == ["add", "delete", "delete", "delete", "add"]
    assert sorted(a for tag, a in operations if tag == "delete") == sorted(
        h.association(f"idu={n}") for n in (1, 2, 3))
    assert_mirrored(h, rejects_allowed=False)


def test_mariadb_capture_is_made_anew_by_the_next_cycle_and_install_check_says_so(
    spark, mariadb_database, tmp_path, capsys,
):
    h = harness_for(spark, mariadb_database, tmp_path)
    usr = h.table("usr")
    config_file = tmp_path / "publisher.toml"
    config_file.write_text(
        f'[database]\nurl = "{h.db.url}"\nschema = "{h.db.schema}"\nuser = "{PUBLISHER_USER}"\n'
        f'[output]\ndirectory = "{h.output}"\n', encoding="utf-8")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', '1990-01-01'), (2, 'Bo', 'Ng', NULL)")
    drain(h)
    assert main(["install", "-c", str(config_file), "--check"]) == 0
    application(h, f"ALTER TABLE {usr} DROP COLUMN lname", f"ALTER TABLE {usr} RENAME COLUMN fname TO given",
                f"ALTER TABLE {usr} ADD COLUMN email VARCHAR(64)")
    with pytest.raises(Exception, match="Unknown column"):  # what the migrations guide says the application sees
        application(h, f"UPDATE {usr} SET given = 'Anne' WHERE idu = 1")
    capsys.readouterr()
    assert main(["install", "-c", str(config_file), "--check"]) == 1
    reported = capsys.readouterr()
    assert "'usr'" in reported.out and "given" in reported.out and "lname" in reported.out
    assert reported.err.splitlines()[-1] == f"1 table to install again: publisher install -c {config_file} --table usr"
    drain(h)  # the cycle reinstalls the capture before it reads
    assert main(["install", "-c", str(config_file), "--check"]) == 0
    application(
        h,
        f"UPDATE {usr} SET given = 'Anne', email = 'ann@example.com' WHERE idu = 1",
        f"INSERT INTO {usr} (idu, given, email) VALUES (3, 'Cy', 'cy@example.com')",
        f"DELETE FROM {usr} WHERE idu = 2",
    )
    drain(h)
    assert {"given", "email"} <= published_attributes(h)
    assert columns_differences(h) == []
    assert_mirrored_on_columns(h)


def test_sqlite_rename_is_followed_and_a_dropped_column_is_refused_by_sqlite(spark, sqlite_database,
                                                                             tmp_path):
    h = harness_for(spark, sqlite_database, tmp_path)
    application(h, "INSERT INTO usr VALUES (1, 'Ann', 'Lee', NULL)")
    drain(h)
    with pytest.raises(Exception, match="lname"):  # SQLite will not drop a column a trigger names
        application(h, "ALTER TABLE usr DROP COLUMN lname")
    application(h, "ALTER TABLE usr RENAME COLUMN fname TO given", "ALTER TABLE usr ADD COLUMN email TEXT")
    assert capture_problems(h.config, h.engine) != []
    drain(h)
    assert capture_problems(h.config, h.engine) == []
    application(h, "UPDATE usr SET given = 'Anne', email = 'a@example.com' WHERE idu = 1")
    drain(h)
    assert {"given", "email"} <= published_attributes(h)
    assert columns_differences(h) == []


def test_postgresql_events_under_an_old_primary_key_are_rejected_with_the_reason(spark, postgresql_database,
                                                                                tmp_path):
    h = harness_for(spark, postgresql_database, tmp_path)
    usr = h.table("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)")
    application(h, f"ALTER TABLE {usr} DROP CONSTRAINT usr_pkey", f"ALTER TABLE {usr} ADD PRIMARY KEY (idu, fname)",
                f"INSERT INTO {usr} VALUES (3, 'Cy', NULL, NULL)")
    drain(h)
    rejected = h.rejects()
    assert {r["table_key"] for r in rejected} == {"idu=1"}
    assert all("key column 'fname' is missing" in r["reason"] for r in rejected)
    associations = [op.findtext("association").strip() for op in h.published().operations]
    assert associations == [h.association("idu=3+fname=Cy")]


def test_postgresql_a_migration_succeeds_whatever_becomes_of_the_capture_record(spark, postgresql_database,
                                                                               tmp_path):
    """The event trigger fires on every ALTER TABLE of the database: if it fails, it warns and
    the migration goes on."""
    h = harness_for(spark, postgresql_database, tmp_path)
    h.db.execute(f"DROP TABLE {h.table('event_log_capture')}")
    application(h, f"ALTER TABLE {h.table('usr')} ADD COLUMN email text",
                f"INSERT INTO {h.table('usr')} (idu, fname, email) VALUES (1, 'Ann', 'a@example.com')")
    assert h.db.rows(f"SELECT count(*) FROM {h.table('event_log')}") == [(1,)]  # fname; email once reinstalled


def test_postgresql_a_migration_is_followed_whatever_becomes_of_the_shape_records(spark, postgresql_database,
                                                                                  tmp_path):
    """Recording where the shape changes is the event trigger's second task: its failure warns,
    and the capture still follows the migration."""
    h = harness_for(spark, postgresql_database, tmp_path)
    h.db.execute(f"DROP TABLE {h.table('event_log_shapes')}")
    usr = h.table("usr")
    application(h, f"ALTER TABLE {usr} DROP COLUMN lname",
                f"INSERT INTO {usr} (idu, fname, born) VALUES (1, 'Ann', NULL)")
    assert h.db.rows(f"SELECT column_name FROM {h.table('event_log')} ORDER BY record_id") == [("fname",)]


def test_postgresql_without_event_triggers_install_says_so_and_the_cycle_reinstalls(spark, postgresql_database,
                                                                                   tmp_path, caplog):
    """Only a superuser may create event triggers: a plain owner of the tables gets capture, a
    warning, and the MariaDB behaviour after a migration."""
    db = postgresql_database
    role = f"pub_{uuid.uuid4().hex[:10]}"
    db.execute(f"CREATE ROLE {role} LOGIN", f"GRANT USAGE, CREATE ON SCHEMA {db.schema} TO {role}")
    try:
        as_role = dataclasses.replace(db, url=db.url.replace("postgres@", f"{role}@"))
        caplog.set_level(logging.WARNING, logger="publisher")
        h = Harness(spark, as_role, tmp_path, user=PUBLISHER_USER, tables=())
        db.execute(f"CREATE TABLE {h.table('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), "
                   f"born DATE)", f"ALTER TABLE {h.table('usr')} OWNER TO {role}")
        h.install("usr")
        assert "may not create event triggers" in caplog.text
        assert db.rows("SELECT count(*) FROM pg_event_trigger WHERE evtfoid::regproc::text LIKE "
                       f"'{db.schema}.%'") == [(0,)]
        usr = h.table("usr")
        application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)", f"ALTER TABLE {usr} DROP COLUMN lname")
        with pytest.raises(Exception, match="lname"):
            application(h, f"UPDATE {usr} SET fname = 'Anne'")
        drain(h)
        application(h, f"UPDATE {usr} SET fname = 'Anne'")
        drain(h)
        assert columns_differences(h) == []
        h.engine.dispose()
    finally:
        db.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
                   f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def test_postgresql_the_event_trigger_leaves_other_schemas_alone(spark, postgresql_database, tmp_path):
    """The event trigger fires for every ALTER TABLE of the database: one on a table of another
    schema, by a user who may not see the published schema, gets no warning from it."""
    import psycopg

    db = postgresql_database
    harness_for(spark, db, tmp_path)
    assert db.rows("SELECT count(*) FROM pg_event_trigger WHERE evtfoid::regproc::text LIKE "
                   f"'{db.schema}.%'") == [(1,)]
    others = [name for (name,) in db.rows("SELECT evtname FROM pg_event_trigger WHERE evtenabled <> 'D' AND "
                                          f"evtfoid::regproc::text NOT LIKE '{db.schema}.%'")]
    # other schemas' triggers (left by other tests in this worker's own database), off meanwhile
    db.execute(*(f'ALTER EVENT TRIGGER "{name}" DISABLE' for name in others))
    role = f"other_{uuid.uuid4().hex[:10]}"
    db.execute(f"CREATE ROLE {role} LOGIN", f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    notices: list[str] = []
    try:
        with psycopg.connect(db.url.replace("postgres@", f"{role}@"), autocommit=True) as conn:
            conn.add_notice_handler(lambda notice: notices.append(str(notice.message_primary)))
            conn.execute(f"CREATE TABLE {role}.t (a integer)")
            conn.execute(f"ALTER TABLE {role}.t ADD COLUMN b integer")
    finally:
        db.execute(f"DROP SCHEMA {role} CASCADE", f"DROP ROLE {role}",
                   *(f'ALTER EVENT TRIGGER "{name}" ENABLE' for name in others))
    assert notices == []


def with_formats(h: Harness) -> Harness:
    output = dataclasses.replace(h.config.output, change_tables=ChangeTablesConfig(enabled=True),
                                 messages=MessagesConfig(enabled=True, external_schema_id=True))
    h.config = dataclasses.replace(h.config, output=output)
    return h


def change_table_files(h: Harness) -> list[tuple[list[str], list[tuple]]]:
    """The usr change table's files in publication order: each one's columns, and its rows as
    (operation, values…)."""
    found = []
    for path in sorted((h.output / "changes" / "usr").glob("*.parquet")):
        rows = pq.read_table(path)
        columns = [name for name in rows.column_names if not name.startswith("header__")]
        found.append((columns, [(row["header__operation"], *(row[c] for c in columns)) for row in rows.to_pylist()]))
    return found


def test_postgresql_a_migration_mid_backlog_is_published_with_the_version_of_each_side(
    spark, postgresql_database, tmp_path,
):
    """Events logged before the migration are described by the table version they were logged
    in, those after by the new one; a value logged for a column the migration dropped is
    rejected, saying why. The migration runs in the application's transaction, between writes."""
    h = with_formats(harness_for(spark, postgresql_database, tmp_path))
    usr = h.table("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)")
    drain(h)
    application(h, f"INSERT INTO {usr} VALUES (2, 'Bo', NULL, NULL)", f"UPDATE {usr} SET lname = 'Lea' WHERE idu = 1")
    application(h, f"UPDATE {usr} SET fname = 'Bob' WHERE idu = 2",
                f"ALTER TABLE {usr} DROP COLUMN lname", f"ALTER TABLE {usr} ADD COLUMN email text",
                f"INSERT INTO {usr} (idu, fname, email) VALUES (3, 'Cy', 'cy@example.com')",
                f"UPDATE {usr} SET email = 'bo@example.com' WHERE idu = 2")
    drain(h)
    assert versions_and_data(h.output) == [
        (1, ["idu", "fname", "lname", "born"], [(1, "Ann", "Lee", None), (2, "Bo", None, None),
                                                (2, "Bob", None, None)]),
        (2, ["idu", "fname", "born", "email"], [(3, "Cy", None, "cy@example.com"),
                                                (2, None, None, "bo@example.com")]),
    ]
    files = change_table_files(h)
    assert [columns for columns, _ in files] == [["idu", "fname", "lname", "born"]] * 2 + [
        ["idu", "fname", "born", "email"]]
    assert [row[:3] for _, rows in files for row in rows] == [
        ("INSERT", 1, "Ann"), ("INSERT", 2, "Bo"), ("BEFOREIMAGE", 2, "Bo"), ("UPDATE", 2, "Bob"),
        ("INSERT", 3, "Cy"), ("BEFOREIMAGE", 2, None), ("UPDATE", 2, None)]
    rejected = h.rejects()
    assert [(r["table_key"], r["column_name"], r["new_value"]) for r in rejected] == [("idu=1", "lname", "Lea")]
    assert rejected[0]["reason"] == "column 'lname' does not exist in table 'usr'"
    assert columns_differences(h) == []


@pytest.mark.parametrize("style", ["field", "row"])
def test_a_column_added_mid_backlog_is_published_with_the_version_of_each_side(style, spark, database, tmp_path):
    """On every database: what the capture logged before it followed the migration is described
    by the version it was logged for, what it logs after by the new one. In row style every
    change is the row read back as it is now: the new version."""
    h = with_formats(Harness(spark, database, tmp_path, user=PUBLISHER_USER, tables=()))
    usr = h.table("usr")
    h.db.execute(f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))")
    h.install("usr", style=style)
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann')")
    drain(h)
    application(h, f"INSERT INTO {usr} VALUES (2, 'Bo')")
    application(h, f"ALTER TABLE {usr} ADD COLUMN email VARCHAR(64)")
    application(h, f"UPDATE {usr} SET email = 'ann@example.com', fname = 'Anne' WHERE idu = 1")
    drain(h)
    application(h, f"UPDATE {usr} SET email = 'bo@example.com' WHERE idu = 2")
    drain(h)
    published = versions_and_data(h.output)
    if style == "row":
        assert published == [
            (1, ["idu", "fname"], [(1, "Ann")]),
            (2, ["idu", "fname", "email"], [(2, "Bo", None), (1, "Anne", "ann@example.com"),
                                            (2, "Bo", "bo@example.com")]),
        ]
        return
    # MariaDB and SQLite see the migration at the next cycle: until then their capture logs
    # for the columns it had (Anne's email is not among them); PostgreSQL's follows at once.
    followed = h.dialect == "postgresql"
    assert published == [
        (1, ["idu", "fname"], [(1, "Ann"), (2, "Bo")] + ([] if followed else [(1, "Anne")])),
        (2, ["idu", "fname", "email"], ([(1, "Anne", "ann@example.com")] if followed else [])
         + [(2, None, "bo@example.com")]),
    ]
    assert [columns for columns, _ in change_table_files(h)][-1] == ["idu", "fname", "email"]


def test_full_windows_long_after_a_migration_are_described_as_the_table_is_now(spark, database, tmp_path):
    """A window that reads exactly query_limit rows starts where its rows start: it is no
    window reaching back to before the migration."""
    h = with_formats(Harness(spark, database, tmp_path, user=PUBLISHER_USER, tables=(), query_limit=4))
    usr = h.table("usr")
    h.db.execute(f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))")
    h.install("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann')")
    application(h, f"ALTER TABLE {usr} ADD COLUMN email VARCHAR(64)")
    drain(h)
    for idu in range(2, 8):
        application(h, f"INSERT INTO {usr} VALUES ({idu}, 'n{idu}', 'e{idu}')")
    drain(h)
    assert versions_and_data(h.output) == [
        (1, ["idu", "fname"], [(1, "Ann")]),
        (2, ["idu", "fname", "email"], [(idu, f"n{idu}", f"e{idu}") for idu in range(2, 8)]),
    ]


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_a_column_whose_type_a_migration_changed_is_described_by_its_type_now(spark, database, tmp_path):
    """Every value is read by the column's type now, logged before the change or after; the
    version that carries it says that type, so nothing is refused for it."""
    h = with_formats(harness_for(spark, database, tmp_path))
    usr = h.table("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', '1990-01-01')")
    drain(h)
    application(h, f"INSERT INTO {usr} VALUES (2, 'Bo', NULL, '1991-02-03')")
    change = (f"ALTER TABLE {usr} ALTER COLUMN born TYPE VARCHAR(20)" if h.dialect == "postgresql"
              else f"ALTER TABLE {usr} MODIFY born VARCHAR(20)")
    application(h, change)
    application(h, f"INSERT INTO {usr} VALUES (3, 'Cy', NULL, 'spring')")
    drain(h)
    assert [(version, [row[0::3] for row in rows]) for version, _, rows in versions_and_data(h.output)] == [
        (1, [(1, "1990-01-01T00:00:00Z")]),
        (2, [(2, "1991-02-03"), (3, "spring")]),
    ]
    assert set(h.statuses().values()) == {"S"}


def test_postgresql_a_migration_when_the_log_is_empty_still_marks_where_the_shape_changes(
    spark, postgresql_database, tmp_path,
):
    """With processed rows deleted, the log can be empty when a migration comes, and its
    highest record_id far below where the table's shape was last recorded (here: reinstalled
    after other tables' events)."""
    h = with_formats(harness_for(spark, postgresql_database, tmp_path, delete_processed_rows=True))
    usr, grp = h.table("usr"), h.table("grp")
    h.db.execute(f"CREATE TABLE {grp} (gid INTEGER PRIMARY KEY, name VARCHAR(64))")
    h.install("grp")
    application(h, f"INSERT INTO {grp} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    h.install("usr")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)")
    drain(h)
    assert h.db.rows(f"SELECT count(*) FROM {h.table('event_log')}") == [(0,)]
    application(h, f"ALTER TABLE {usr} ADD COLUMN email text")
    application(h, f"INSERT INTO {usr} (idu, fname, email) VALUES (2, 'Bo', 'b@example.com')",
                f"UPDATE {usr} SET email = 'a@example.com' WHERE idu = 1")
    drain(h)
    assert [(version, rows) for version, _, rows in versions_and_data(h.output)] == [
        (1, [(1, "Ann", "Lee", None)]),
        (2, [(2, "Bo", None, None, "b@example.com"), (1, None, None, None, "a@example.com")]),
    ]


def test_a_table_rebuilt_by_a_migration_gets_its_capture_back_from_the_next_cycle(spark, database, tmp_path):
    """Create a new table, copy, drop the old one, rename (how migration tools rebuild a SQLite
    table): the old triggers went with the old table; `install --check` says so, and the next
    cycle installs the capture again."""
    h = harness_for(spark, database, tmp_path)
    usr, new = h.table("usr"), h.table("usr_new")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)")
    drain(h)
    assert capture_problems(h.config, h.engine) == []
    rename = (f"ALTER TABLE {new} RENAME TO usr" if h.dialect != "mariadb" else f"RENAME TABLE {new} TO {usr}")
    application(h, f"CREATE TABLE {new} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), born DATE)",
                f"INSERT INTO {new} SELECT * FROM {usr}")
    application(h, f"DROP TABLE {usr}", rename)
    (problem,) = capture_problems(h.config, h.engine)
    assert "'usr'" in problem and "triggers are gone" in problem
    drain(h)
    assert capture_problems(h.config, h.engine) == []
    application(h, f"UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")
    drain(h)
    assert_mirrored(h, rejects_allowed=False)


def test_a_renamed_table_is_named_by_install_check_and_installing_its_new_name_moves_its_capture(
        spark, database, tmp_path):
    """A renamed table keeps its triggers, which log its changes under the old name, rejected
    there: `install --check` names it; `install --table NEW` drops them for the new name's own,
    in the style they had, so that no change is logged twice."""
    h = harness_for(spark, database, tmp_path)
    usr, members = h.table("usr"), h.table("members")
    h.install("usr", style="row")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)")
    drain(h)
    application(h, f"ALTER TABLE {usr} RENAME TO members" if h.dialect != "mariadb"
                else f"RENAME TABLE {usr} TO {members}")
    (problem,) = capture_problems(h.config, h.engine)
    assert problem.startswith("table 'usr': its capture triggers are on table 'members'"), problem
    assert "`publisher install --table members`" in problem
    application(h, f"UPDATE {members} SET lname = 'Li' WHERE idu = 1")
    assert unpublished_tables(h.config, h.engine) == {"usr": Unpublished.CAPTURE_MOVED}

    install_capture(h.config, h.engine, ["members"], None)
    assert capture_problems(h.config, h.engine) == []
    log = h.table(h.config.event_log.table)
    (last,) = h.db.rows(f"SELECT coalesce(max(record_id), 0) FROM {log}")[0]
    application(h, f"UPDATE {members} SET fname = 'Anne' WHERE idu = 1")
    logged = h.db.rows(f"SELECT table_name, event_type FROM {log} WHERE record_id > {last}")
    assert [(name, int(kind)) for name, kind in logged] == [("members", 6)]


def test_a_table_renamed_while_a_new_one_takes_its_name_keeps_a_capture_of_its_own(spark, database, tmp_path):
    """The new table is installed (by the next cycle, seeing the name's shape change) without
    taking the renamed table's capture away (trigger names are the schema's on SQLite and
    MariaDB) or changing the functions its triggers run (PostgreSQL): the renamed table gets a
    capture of its own first, in the style it had, and no application write fails."""
    h = harness_for(spark, database, tmp_path)
    h.install("usr", style="row")
    usr, old = h.table("usr"), h.table("usr_old")
    application(h, f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', NULL)")
    drain(h)
    application(h, f"ALTER TABLE {usr} RENAME TO usr_old" if h.dialect != "mariadb"
                else f"RENAME TABLE {usr} TO {old}")
    application(h, f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, email VARCHAR(64))")
    drain(h)
    assert capture_problems(h.config, h.engine) == []
    log = h.table(h.config.event_log.table)
    (last,) = h.db.rows(f"SELECT coalesce(max(record_id), 0) FROM {log}")[0]
    application(h, f"INSERT INTO {old} VALUES (2, 'Bo', 'Ng', NULL)", f"INSERT INTO {usr} VALUES (3, 'c@example.com')")
    logged = h.db.rows(f"SELECT table_name, event_type FROM {log} WHERE record_id > {last} ORDER BY record_id")
    assert [(name, int(kind)) for name, kind in logged] == [("usr_old", 5), ("usr", 5)]


def test_postgresql_a_switched_off_capture_stays_off_on_a_table_renamed_while_a_new_one_takes_its_name(
        spark, postgresql_database, tmp_path):
    h = harness_for(spark, postgresql_database, tmp_path)
    usr, old = h.table("usr"), h.table("usr_old")
    application(h, f"ALTER TABLE {usr} DISABLE TRIGGER usr_publisher", f"ALTER TABLE {usr} RENAME TO usr_old",
                f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, email VARCHAR(64))")
    drain(h)
    log = h.table(h.config.event_log.table)
    application(h, f"INSERT INTO {old} VALUES (2, 'Bo', 'Ng', NULL)", f"INSERT INTO {usr} VALUES (3, 'c@example.com')")
    assert [name for (name,) in h.db.rows(f"SELECT table_name FROM {log} ORDER BY record_id")] == ["usr"]


@pytest.mark.parametrize("renames", ["swap", "onto"])
def test_tables_renamed_onto_each_others_names_keep_the_style_each_carries_and_log_once(
        spark, database, tmp_path, renames):
    """Two published tables swap names (or one is renamed away and the other onto its name):
    the next cycle gives each table the capture of its own name, in the style of the triggers
    it carried, and leaves none named for the other table."""
    h = harness_for(spark, database, tmp_path)
    usr, grp, old = h.table("usr"), h.table("grp"), h.table("usr_old")
    application(h, f"CREATE TABLE {grp} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))")
    h.install("usr", style="row")
    h.install("grp", style="field")
    mariadb = h.dialect == "mariadb"
    steps = {"swap": [("usr", "usr_old"), ("grp", "usr"), ("usr_old", "grp")],
             "onto": [("usr", "usr_old"), ("grp", "usr")]}[renames]
    for before, after in steps:
        application(h, f"RENAME TABLE {h.table(before)} TO {h.table(after)}" if mariadb
                    else f"ALTER TABLE {h.table(before)} RENAME TO {after}")
    drain(h)
    assert capture_problems(h.config, h.engine) == []
    log = h.table(h.config.event_log.table)
    (last,) = h.db.rows(f"SELECT coalesce(max(record_id), 0) FROM {log}")[0]
    carried_row = old if renames == "onto" else grp
    application(h, f"INSERT INTO {usr} (idu, fname) VALUES (7, 'x')",
                f"INSERT INTO {carried_row} (idu, fname) VALUES (8, 'y')")
    logged = h.db.rows(f"SELECT table_name, event_type FROM {log} WHERE record_id > {last} ORDER BY record_id")
    other = "usr_old" if renames == "onto" else "grp"
    assert [(name, int(kind)) for name, kind in logged] == [("usr", 1), (other, 5)]


FOLLOWED_TABLE = ("CREATE TABLE {t} (k1 integer, k2 text, v_text text, v_num numeric(10, 2), v_bin bytea, "
                  "v_at timestamptz, v_on boolean, v_arr int[], PRIMARY KEY (k1, k2))")
FOLLOWED_STATEMENTS = (
    "INSERT INTO {t} VALUES (1, 'a', 'x', 1.5, '\\x00ff', '2024-01-01 10:00+02', true, '{{1,2}}')",
    "INSERT INTO {t} (k1, k2) VALUES (2, 'b c')",
    "INSERT INTO {t} VALUES (3, '', 'é', -2, '', '1999-12-31 23:59:59.5-08', false, '{{}}'), "
    "(4, '=+\"', '', 0, '\\x01', NULL, NULL, NULL)",
    "UPDATE {t} SET v_num = 1.50 WHERE k1 = 1",
    "UPDATE {t} SET v_text = 'y', v_bin = NULL, v_arr = '{{2,1}}' WHERE k1 = 1",
    "UPDATE {t} SET v_text = v_text",
    "UPDATE {t} SET k1 = k1 + 10, v_on = NOT v_on WHERE k1 IN (2, 3)",
    "UPDATE {t} SET k2 = upper(k2), v_text = 'z' WHERE k1 <> 4",
    "DELETE FROM {t} WHERE k1 = 1",
    "TRUNCATE {t}",
    "INSERT INTO {t} (k1, k2, v_text) VALUES (7, 'g', 'q')",
    "DELETE FROM {t}",
)


@pytest.mark.parametrize("style", ["field", "row"])
def test_postgresql_followed_capture_logs_what_the_tables_own_capture_logs(style, spark, postgresql_database,
                                                                           tmp_path):
    """The column-blind capture is a second writing of the capture's rules (in SQL, from the
    catalog): the same statements through each must log the same events."""
    h = Harness(spark, postgresql_database, tmp_path, user=PUBLISHER_USER, tables=())
    table, log = h.table("t"), h.table("event_log")
    h.db.execute(FOLLOWED_TABLE.format(t=table))
    h.install("t", style=style)

    def logged() -> list[tuple]:
        for statement in FOLLOWED_STATEMENTS:
            application(h, statement.format(t=table))
        rows = h.db.rows(f"SELECT event_type, table_name, table_key, column_name, old_value, new_value "
                         f"FROM {log} ORDER BY record_id")
        h.db.execute(f"DELETE FROM {log}")
        return rows

    installed = logged()
    application(h, f"ALTER TABLE {table} ADD COLUMN gone integer", f"ALTER TABLE {table} DROP COLUMN gone")
    assert h.db.rows(f"SELECT followed_at IS NOT NULL FROM {h.table('event_log_capture')}") == [(True,)]
    followed = logged()
    assert {row[0] for row in installed} == ({1, 2, 4} if style == "field" else {4, 5, 6})
    assert followed == installed
