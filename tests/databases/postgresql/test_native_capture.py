"""PostgreSQL's native capture (C, `native/postgresql`) against the PL/pgSQL capture, which is its
oracle: the same statements through each, from the application's own connection, must log the
same events; and what only the native capture does: follow a migration with nothing installed
again, and refuse with the reason where the server cannot run it."""
from __future__ import annotations

import pytest
from harness import Harness, drain
from hunting import budget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from publisher.capture.install import CaptureError, capture_problems, install_capture, installed_native
from publisher.config import Config, DatabaseConfig
from publisher.service.mirror import check, verify

PUBLISHER_USER = "publisher_app"

TABLE = ("CREATE TABLE {t} (k1 integer, k2 text, v_text text, v_num numeric(10, 2), v_bin bytea, "
         "v_at timestamptz, v_on boolean, v_arr int[], v_float float8, v_day date, v_ts timestamp, "
         "v_span interval, v_char char(3), v_doc jsonb, v_id uuid, PRIMARY KEY (k1, k2))")
STATEMENTS = (
    "INSERT INTO {t} VALUES (1, 'a', 'x', 1.5, '\\x00ff', '2024-01-01 10:00+02', true, '{{1,2}}', 0.1, "
    "'2024-02-29', '2024-01-01 10:00:00.25', '1 day 02:03:04', 'ab', '{{\"b\": 1, \"a\": [true]}}', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')",
    "INSERT INTO {t} (k1, k2) VALUES (2, 'b c')",
    "INSERT INTO {t} (k1, k2, v_text, v_num, v_bin, v_at, v_on, v_arr, v_float) VALUES "
    "(3, '', 'é', -2, '', '1999-12-31 23:59:59.5-08', false, '{{}}', -1e300), "
    "(4, '=+\"\\,<>;''', '', 0, '\\x01', NULL, NULL, NULL, 'NaN')",
    "UPDATE {t} SET v_num = 1.50 WHERE k1 = 1",
    "UPDATE {t} SET v_text = 'y', v_bin = NULL, v_arr = '{{2,1}}', v_float = 1.0 / 3 WHERE k1 = 1",
    "UPDATE {t} SET v_text = v_text",
    "UPDATE {t} SET v_char = 'ab ' WHERE k1 = 1",
    "UPDATE {t} SET k1 = k1 + 10, v_on = NOT v_on WHERE k1 IN (2, 3)",
    "UPDATE {t} SET k1 = 15 - k1 WHERE k1 IN (12, 13)",
    "UPDATE {t} SET k2 = upper(k2), v_text = 'z' WHERE k1 <> 4",
    "DELETE FROM {t} WHERE k1 = 1",
    "INSERT INTO {t} (k1, k2, v_text) VALUES (1, 'A', 'again')",
    "TRUNCATE {t}",
    "INSERT INTO {t} (k1, k2, v_text, v_span) VALUES (7, 'g', 'q', '-3 years')",
    "DELETE FROM {t}",
)
SESSIONS = {
    "the server's settings": (),
    "settings that write other texts": ("SET LOCAL datestyle = 'SQL, DMY'", "SET LOCAL timezone = 'America/Sao_Paulo'",
                                        "SET LOCAL extra_float_digits = 3", "SET LOCAL intervalstyle = 'sql_standard'"),
}


def harness(spark, database, tmp_path) -> Harness:
    return Harness(spark, database, tmp_path, user=PUBLISHER_USER, tables=())


def application(h: Harness, session: tuple[str, ...], *statements: str) -> None:
    """The application's statements, in one transaction of its own connection and settings."""
    with h.engine.begin() as conn:
        for statement in (*session, *statements):
            conn.execute(text(statement))


def logged(h: Harness, table: str, session: tuple[str, ...], statements: tuple[str, ...]) -> list[tuple]:
    """The events the statements log, each statement in a transaction of its own; the log emptied."""
    log = h.table("event_log")
    for statement in statements:
        application(h, session, statement.format(t=table))
    rows = h.db.rows(f"SELECT event_type, table_name, table_key, column_name, old_value, new_value, perpetrator, "
                     f"status, transaction_id IS NOT NULL, event_time IS NOT NULL FROM {log} ORDER BY record_id")
    h.db.execute(f"DELETE FROM {log}")
    return rows


@pytest.mark.parametrize("session", SESSIONS, ids=list(SESSIONS))
@pytest.mark.parametrize("style", ["field", "row"])
def test_native_capture_logs_what_the_plpgsql_capture_logs(style, session, spark, postgresql_database, tmp_path):
    h = harness(spark, postgresql_database, tmp_path)
    table = h.table("t")
    h.db.execute(TABLE.format(t=table))
    install_capture(h.config, h.engine, ["t"], style)
    expected = logged(h, table, SESSIONS[session], STATEMENTS)
    install_capture(h.config, h.engine, ["t"], style, native=True)
    assert installed_native(h.config, h.engine) == {"t"}
    assert logged(h, table, SESSIONS[session], STATEMENTS) == expected
    assert {row[0] for row in expected} == ({1, 2, 4} if style == "field" else {4, 5, 6})


@pytest.mark.parametrize("style", ["field", "row"])
def test_native_capture_reads_statements_whose_rows_spill_to_disk(style, spark, postgresql_database, tmp_path):
    """Past work_mem a statement's transition tables are files, read back into memory the reader
    must keep until its next row: thousands of rows updated, renumbered and truncated."""
    h = harness(spark, postgresql_database, tmp_path)
    table = h.table("t")
    h.db.execute(f"CREATE TABLE {table} (k integer PRIMARY KEY, name text, amount integer)")
    small = ("SET LOCAL work_mem = '64kB'",)
    statements = (
        "INSERT INTO {t} SELECT g, repeat('n', g % 50), g FROM generate_series(1, 5000) AS g",
        "UPDATE {t} SET amount = amount + 1, name = CASE WHEN k % 3 = 0 THEN NULL ELSE name END",
        "UPDATE {t} SET k = 10001 - k WHERE k <= 2000",
        "UPDATE {t} SET k = k + 3000 WHERE k BETWEEN 4001 AND 5000",
        "TRUNCATE {t}",
    )
    install_capture(h.config, h.engine, ["t"], style)
    expected = logged(h, table, small, statements)
    install_capture(h.config, h.engine, ["t"], style, native=True)
    assert logged(h, table, small, statements) == expected
    assert len(expected) > 20_000


_KEY_TYPES = {"integer": "k::text", "bigint": "(k * 1000000000000)::text", "text": "'k ' || k",
              "varchar(8)": "'=' || k", "numeric(6, 1)": "(k / 3.0)::numeric(6, 1)::text",
              "date": "(date '2024-01-01' + k)::text",
              "timestamptz": "(timestamptz '2024-01-01 00:00+05' + k * interval '1 hour')::text",
              "uuid": "md5(k::text)::uuid::text", "bytea": "'\\x' || lpad(to_hex(k), 4, '0')",
              "boolean": "(k % 2 = 0)::text"}


@st.composite
def schemas_and_writes(draw):
    """A table with a key of one or two columns of assorted types, and a run of writes to it:
    inserts with NULLs, updates of values and of keys, deletes; `k` numbers the rows."""
    key = draw(st.lists(st.sampled_from(sorted(_KEY_TYPES)), min_size=1, max_size=2, unique=True))
    values = draw(st.lists(st.sampled_from(["text", "integer", "float8", "timestamp", "bytea", "numeric"]),
                           max_size=3))
    writes = draw(st.lists(st.tuples(st.sampled_from(["insert", "update", "every", "rekey", "delete"]),
                                     st.integers(1, 6), st.booleans()), min_size=1, max_size=12))
    session = draw(st.sampled_from(sorted(SESSIONS)))
    return key, values, writes, SESSIONS[session]


def _statements(key: list[str], values: list[str], writes) -> tuple[str, ...]:
    columns = [f"k{i}" for i in range(len(key))] + [f"v{i}" for i in range(len(values))]
    value_of = {"text": "'v' || {k}", "integer": "{k} * 7", "float8": "{k} / 7.0", "timestamp":
                "timestamp '2024-01-01' + {k} * interval '1 minute'", "bytea": "decode(md5({k}::text), 'hex')",
                "numeric": "{k} * 1.10"}
    statements = []
    for verb, k, nulls in writes:
        keys = [f"({_KEY_TYPES[t].replace('k', str(k))})::{t}" for t in key]
        vals = ["NULL" if nulls else f"({value_of[t].format(k=k)})::{t}" for t in values]
        match = " AND ".join(f"k{i} = {v}" for i, v in enumerate(keys))
        if verb == "insert":
            statements.append(f"INSERT INTO {{t}} ({', '.join(columns)}) VALUES ({', '.join(keys + vals)}) "
                              f"ON CONFLICT DO NOTHING")
        elif verb == "update" and values:
            statements.append(f"UPDATE {{t}} SET {', '.join(f'v{i} = {v}' for i, v in enumerate(vals))} WHERE {match}")
        elif verb == "every" and values:  # one statement, many rows: some change, some do not
            statements.append(f"UPDATE {{t}} SET {', '.join(f'v{i} = {v}' for i, v in enumerate(vals))}")
        elif verb == "rekey":
            other = [f"({_KEY_TYPES[t].replace('k', str(k + 10))})::{t}" for t in key]
            sets = ", ".join(f"k{i} = {v}" for i, v in enumerate(other))
            statements.append(f"UPDATE {{t}} SET {sets} WHERE {match} AND NOT EXISTS (SELECT FROM {{t}} WHERE "
                              f"{' AND '.join(f'k{i} = {v}' for i, v in enumerate(other))})")
        else:
            statements.append(f"DELETE FROM {{t}} WHERE {match}")
    return (*statements, "UPDATE {t} SET k0 = k0", "DELETE FROM {t}")  # an UPDATE that changes nothing


@settings(max_examples=budget(20), suppress_health_check=list(HealthCheck))
@given(case=schemas_and_writes(), style=st.sampled_from(["field", "row"]))
def test_native_capture_equals_the_plpgsql_capture_on_generated_tables(case, style, postgresql_database):
    """Keys of one or two columns of assorted types (each spelled as its table_key spells it),
    values with NULLs, key changes and deletes: both captures log the same events."""
    key, values, writes, session = case
    db = postgresql_database
    config = Config(database=DatabaseConfig(url=db.url, schema=db.schema))
    table, log = f"{db.schema}.t", f"{db.schema}.event_log"
    with db.engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        columns = [f"k{i} {t} NOT NULL" for i, t in enumerate(key)] + [f"v{i} {t}" for i, t in enumerate(values)]
        keys = ", ".join(f"k{i}" for i in range(len(key)))
        conn.execute(text(f"CREATE TABLE {table} ({', '.join(columns)}, PRIMARY KEY ({keys}))"))
    statements = _statements(key, values, writes)

    def run() -> list[tuple]:
        for statement in statements:  # each in a transaction of its own, as an application's
            with db.engine.begin() as conn:
                for setting in session:
                    conn.execute(text(setting))
                conn.execute(text(statement.format(t=table)))
        with db.engine.begin() as conn:
            rows = conn.execute(text(f"SELECT event_type, table_key, column_name, old_value, new_value "
                                     f"FROM {log} ORDER BY record_id")).all()
            conn.execute(text(f"DELETE FROM {log}"))
        return [tuple(r) for r in rows]

    install_capture(config, db.engine, ["t"], style)
    expected = run()
    install_capture(config, db.engine, ["t"], style, native=True)
    assert run() == expected


def test_native_capture_follows_a_migration_with_nothing_installed_again(spark, postgresql_database, tmp_path):
    h = harness(spark, postgresql_database, tmp_path)
    usr = h.table("usr")
    h.db.execute(f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), born DATE)")
    install_capture(h.config, h.engine, ["usr"], "field", native=True)
    application(h, (), f"INSERT INTO {usr} VALUES (1, 'Ann', 'Lee', '1990-01-01'), (2, 'Bo', 'Ng', NULL)")
    drain(h)
    application(
        h, (),
        f"ALTER TABLE {usr} DROP COLUMN lname",
        f"ALTER TABLE {usr} RENAME COLUMN fname TO given",
        f"ALTER TABLE {usr} ADD COLUMN email text",
        f"UPDATE {usr} SET given = 'Anne', email = 'ann@example.com' WHERE idu = 1",
        f"INSERT INTO {usr} (idu, given, email) VALUES (3, 'Cy', 'cy@example.com')",
        f"DELETE FROM {usr} WHERE idu = 2",
    )
    fields = h.db.rows(f"SELECT event_type, table_key, column_name, new_value FROM {h.table('event_log')} "
                       f"WHERE status = 'N' ORDER BY record_id")
    assert fields == [(2, "idu=1", "given", "Anne"), (2, "idu=1", "email", "ann@example.com"),
                      (1, "idu=3", "given", "Cy"), (1, "idu=3", "email", "cy@example.com"), (4, "idu=2", None, None)]
    assert capture_problems(h.config, h.engine) == []  # nothing for a deployment pipeline to install
    triggers = f"SELECT oid FROM pg_trigger WHERE tgrelid = '{usr}'::regclass ORDER BY oid"
    before = h.db.rows(triggers)
    drain(h)
    assert h.db.rows(triggers) == before  # the cycle recorded the new shape and left the triggers alone
    recorded = h.db.rows(f"SELECT columns FROM {h.table('event_log_capture')}")
    assert recorded == [("idu (key), given, born, email",)]
    assert installed_native(h.config, h.engine) == {"usr"}
    assert "E" not in set(h.statuses().values()), h.rejects()
    # The consumer keeps the values of the columns dropped and renamed, which verify says apart as
    # retired; on the table's columns it equals the table.
    found = check(h.config, h.engine)
    assert found.differences == [] and set(found.retired) == {("usr", "lname"), ("usr", "fname")}


def test_native_capture_is_switched_off_with_its_row_trigger(spark, postgresql_database, tmp_path):
    h = harness(spark, postgresql_database, tmp_path)
    usr = h.table("usr")
    h.db.execute(f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname text)")
    install_capture(h.config, h.engine, ["usr"], "row", native=True)
    application(h, (), f"INSERT INTO {usr} VALUES (1, 'a')", f"ALTER TABLE {usr} DISABLE TRIGGER usr_publisher",
                f"UPDATE {usr} SET fname = 'b'", f"TRUNCATE {usr}", f"ALTER TABLE {usr} ENABLE TRIGGER usr_publisher",
                f"INSERT INTO {usr} VALUES (2, 'c')")
    assert h.db.rows(f"SELECT event_type, table_key FROM {h.table('event_log')} ORDER BY record_id") == [
        (5, "idu=1"), (5, "idu=2")]


def test_native_capture_keeps_the_application_going_when_the_event_log_is_renamed_back(spark, postgresql_database,
                                                                                      tmp_path):
    """The function finds the event log by name at each call, never by a remembered id: an event
    log dropped and created again (a restore) is written, not an old one."""
    h = harness(spark, postgresql_database, tmp_path)
    usr, log = h.table("usr"), h.table("event_log")
    h.db.execute(f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname text)")
    install_capture(h.config, h.engine, ["usr"], "row", native=True)
    application(h, (), f"INSERT INTO {usr} VALUES (1, 'a')")
    h.db.execute(f"ALTER TABLE {log} RENAME TO event_log_old")
    install_capture(h.config, h.engine, [], "row")  # the event log again, empty
    application(h, (), f"INSERT INTO {usr} VALUES (2, 'b')")
    assert h.db.rows(f"SELECT table_key FROM {log}") == [("idu=2",)]


def test_install_native_refuses_where_the_database_cannot_run_it(spark, sqlite_database, tmp_path):
    h = harness(spark, sqlite_database, tmp_path)
    h.db.execute("CREATE TABLE usr (idu INTEGER PRIMARY KEY, fname text)")
    with pytest.raises(CaptureError, match="the native capture is PostgreSQL's; sqlite has the SQL capture only"):
        install_capture(h.config, h.engine, ["usr"], "field", native=True)


@pytest.mark.parametrize("style", ["field", "row"])
def test_native_capture_of_a_key_only_table_and_values_of_megabytes(style, spark, postgresql_database, tmp_path):
    h = harness(spark, postgresql_database, tmp_path)
    grant, doc = h.table("grant_"), h.table("doc")
    h.db.execute(f"CREATE TABLE {grant} (who text, role text, PRIMARY KEY (who, role))",
                 f"CREATE TABLE {doc} (id bigint PRIMARY KEY, body text, blob bytea)")
    statements = (
        f"INSERT INTO {grant} VALUES ('ann', 'admin'), ('bo', 'a,b')",
        f"UPDATE {grant} SET role = 'user' WHERE who = 'ann'",
        f"DELETE FROM {grant} WHERE who = 'bo'",
        f"INSERT INTO {grant} VALUES ('bo', 'a,b')",
        f"INSERT INTO {doc} VALUES (1, repeat('x', 3000000), decode(repeat('00ff', 1500000), 'hex'))",
        f"UPDATE {doc} SET body = body || 'y', blob = NULL",
        f"DELETE FROM {doc}",
        f"DELETE FROM {grant}",
    )
    install_capture(h.config, h.engine, ["grant_", "doc"], style)
    expected = logged(h, "", (), statements)
    install_capture(h.config, h.engine, ["grant_", "doc"], style, native=True)
    assert logged(h, "", (), statements) == expected
    assert max(len(row[5] or "") for row in expected) == (4_000_000 if style == "field" else 0)


def test_native_capture_writes_renamed_event_log_columns_and_its_indexes(spark, postgresql_database, tmp_path):
    """The event log's columns are found by their configured names at each call; the index that
    finds a check-out's events (an expression index) gets its entries; the cycle publishes it all."""
    from publisher.capture.install import subscription_ddl
    from publisher.config import EventLogColumns

    renamed = EventLogColumns(status="state", table_key="objkey", event_type="kind", new_value="val",
                              transaction_id="txn")
    h = Harness(spark, postgresql_database, tmp_path, user=PUBLISHER_USER, tables=(), columns=renamed)
    usr, log = h.table("usr"), h.table("event_log")
    h.db.execute(f"CREATE TABLE {usr} (idu integer PRIMARY KEY, fname text, born date)")
    install_capture(h.config, h.engine, ["usr"], "field", native=True)
    h.db.execute(*subscription_ddl(h.config, h.engine))
    application(h, ("SET LOCAL datestyle = 'German'",), f"INSERT INTO {usr} VALUES (1, 'Ann', '1990-02-01')",
                f"INSERT INTO {usr} VALUES (2, NULL, NULL)", f"UPDATE {usr} SET born = born + 1")
    application(h, (), f"DELETE FROM {usr} WHERE idu = 2")
    assert h.db.rows(f"SELECT kind, objkey, column_name, val FROM {log} ORDER BY record_id") == [
        (1, "idu=1", "fname", "Ann"), (1, "idu=1", "born", "1990-02-01"), (1, "idu=2", "fname", None),
        (2, "idu=1", "born", "1990-02-02"), (4, "idu=2", None, None)]
    (transactions,) = h.db.rows(f"SELECT count(DISTINCT txn) FROM {log}")
    assert transactions == (2,)
    index = h.db.rows("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = "
                      f"'{log}'::regclass AND indexprs IS NOT NULL")
    assert len(index) == 1
    with h.engine.begin() as conn:  # the expression index finds every row it should
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        found = conn.execute(text(f"SELECT count(*) FROM {log} WHERE txn IS NOT NULL")).scalar_one()
    assert found == 5
    drain(h)
    assert "N" not in set(h.statuses().values())
    assert verify(h.config, h.engine) == []


def test_a_logical_class_keeps_plpgsql_capture_on_its_child_tables(spark, postgresql_database, tmp_path):
    from publisher.config import ClassConfig

    h = harness(spark, postgresql_database, tmp_path)
    h.config = Config(database=h.config.database, event_log=h.config.event_log, publisher=h.config.publisher,
                      output=h.config.output, spark=h.config.spark,
                      classes={"usr": ClassConfig(multi_valued={"phone": "usr_phone.phone"})})
    usr, phone = h.table("usr"), h.table("usr_phone")
    h.db.execute(f"CREATE TABLE {usr} (idu integer PRIMARY KEY, fname text)",
                 f"CREATE TABLE {phone} (idu integer NOT NULL REFERENCES {usr} ON DELETE CASCADE, "
                 f"phone text NOT NULL, PRIMARY KEY (idu, phone))")
    install_capture(h.config, h.engine, ["usr"], "field", native=True)
    assert installed_native(h.config, h.engine) == {"usr"}
    application(h, (), f"INSERT INTO {usr} VALUES (1, 'Ann')", f"INSERT INTO {phone} VALUES (1, '555')",
                f"DELETE FROM {usr}")
    assert h.db.rows(f"SELECT event_type, table_name, table_key, column_name, old_value, new_value "
                     f"FROM {h.table('event_log')} ORDER BY record_id") == [
        (1, "usr", "idu=1", "fname", None, "Ann"), (2, "usr", "idu=1", "phone", None, "555"),
        (4, "usr", "idu=1", None, None, None), (2, "usr", "idu=1", "phone", "555", None)]


@pytest.mark.parametrize("native", [False, True], ids=["plpgsql", "native"])
@pytest.mark.parametrize("switch_off", ["ALTER TABLE {t} DISABLE TRIGGER usr_publisher",
                                        "DROP TRIGGER usr_publisher ON {t}"], ids=["disabled", "dropped"])
def test_a_migration_leaves_a_switched_off_capture_off(native, switch_off, spark, postgresql_database, tmp_path):
    """The cycle that follows a migration makes the table's triggers anew (PL/pgSQL) or records
    its shape (native): either way a capture switched off stays off."""
    h = harness(spark, postgresql_database, tmp_path)
    usr, log = h.table("usr"), h.table("event_log")
    h.db.execute(f"CREATE TABLE {usr} (idu integer PRIMARY KEY, fname text, lname text)")
    install_capture(h.config, h.engine, ["usr"], "field", native=native)
    application(h, (), switch_off.format(t=usr), f"ALTER TABLE {usr} DROP COLUMN lname",
                f"ALTER TABLE {usr} ADD COLUMN email text")
    drain(h)
    application(h, (), f"INSERT INTO {usr} VALUES (1, 'Ann', 'ann@example.com')", f"UPDATE {usr} SET fname = 'Bo'")
    assert h.db.rows(f"SELECT count(*) FROM {log}") == [(0,)]
    assert capture_problems(h.config, h.engine) == []


def test_native_capture_fails_the_statement_naming_an_event_log_column_it_cannot_find(spark, postgresql_database,
                                                                                     tmp_path):
    """An event log altered behind the capture's back: the statement fails saying what is wrong,
    rather than a row being logged without its table_key."""
    h = harness(spark, postgresql_database, tmp_path)
    usr, log = h.table("usr"), h.table("event_log")
    h.db.execute(f"CREATE TABLE {usr} (idu integer PRIMARY KEY, fname text)")
    install_capture(h.config, h.engine, ["usr"], "row", native=True)
    h.db.execute(f"ALTER TABLE {log} RENAME COLUMN table_key TO object_key")
    with pytest.raises(Exception, match='the event log "[^"]+"."event_log" has no column "table_key"'):
        application(h, (), f"INSERT INTO {usr} VALUES (1, 'a')")
    assert h.db.rows(f"SELECT count(*) FROM {usr}") == [(0,)]


def test_install_check_names_native_tables_whose_library_the_server_cannot_load(spark, postgresql_database, tmp_path,
                                                                              monkeypatch):
    """After a server upgrade without `make native`, every write to a native table fails: a
    deployment pipeline's `install --check` says so (here: a library name the server has not)."""
    import publisher.databases.postgresql.native as native

    h = harness(spark, postgresql_database, tmp_path)
    h.db.execute(f"CREATE TABLE {h.table('usr')} (idu integer PRIMARY KEY, fname text)")
    install_capture(h.config, h.engine, ["usr"], "row", native=True)
    assert capture_problems(h.config, h.engine) == []
    monkeypatch.setattr(native, "NATIVE_LIBRARY", "publisher_capture_of_another_release")
    (problem,) = capture_problems(h.config, h.engine)
    assert problem.startswith("table(s) 'usr': every write fails, the server cannot run their native capture: ")
    assert 'could not access file "publisher_capture_of_another_release"' in problem


def test_a_renamed_table_installed_under_its_new_name_keeps_the_native_capture(spark, postgresql_database, tmp_path):
    h = harness(spark, postgresql_database, tmp_path)
    h.db.execute(f"CREATE TABLE {h.table('n')} (id INTEGER PRIMARY KEY, v TEXT)")
    install_capture(h.config, h.engine, ["n"], "row", native=True)
    h.db.execute(f"ALTER TABLE {h.table('n')} RENAME TO n2")
    install_capture(h.config, h.engine, ["n2"], None, native=None)
    assert installed_native(h.config, h.engine) == {"n2"}
    assert capture_problems(h.config, h.engine) == []
    application(h, (), f"INSERT INTO {h.table('n2')} VALUES (1, 'x')")
    assert h.db.rows(f"SELECT table_name, event_type FROM {h.table('event_log')}") == [("n2", 5)]
