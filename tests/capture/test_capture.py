"""Tests for publisher.capture.install: the event log DDL and the triggers, on SQLite, PostgreSQL and
MariaDB."""
from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import re

import pytest
from conftest import TestDatabase
from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Executable,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    delete,
    insert,
    inspect,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import JSON

import publisher.capture.install as capture
from publisher.capture.install import CaptureError, event_log_ddl, install_capture, trigger_sql
from publisher.config import Config, DatabaseConfig, EventLogColumns, EventLogConfig
from publisher.databases.postgresql.follow import FOLLOW_FUNCTIONS
from publisher.model.keys import KeyPart, parse_key

BORN = dt.datetime(2024, 1, 2, 3, 4, 5)
BORN_TEXT = {"sqlite": "2024-01-02 03:04:05.000000", "postgresql": "2024-01-02 03:04:05",
             "mariadb": "2024-01-02 03:04:05"}
TRUE_TEXT = {"sqlite": "1", "postgresql": "true", "mariadb": "1"}
FALSE_TEXT = {"sqlite": "0", "postgresql": "false", "mariadb": "0"}


def make_config(db: TestDatabase, event_log: EventLogConfig | None = None) -> Config:
    return Config(
        database=DatabaseConfig(url=db.url, schema=db.schema),
        event_log=event_log or EventLogConfig(),
    )


def create_usr(db: TestDatabase) -> Table:
    metadata = MetaData(schema=db.schema)
    table = Table(
        "usr",
        metadata,
        Column("idu", Integer, primary_key=True, autoincrement=False),
        Column("fname", String(64)),
        Column("lname", String(64)),
        Column("photo", LargeBinary),
        Column("active", Boolean),
        Column("born", DateTime),
    )
    metadata.create_all(db.engine)
    return table


@pytest.fixture
def usr(database: TestDatabase) -> Table:
    return create_usr(database)


def run(db: TestDatabase, *statements: Executable) -> None:
    with db.engine.begin() as conn:
        for statement in statements:
            conn.execute(statement)


def logged(db: TestDatabase, config: Config | None = None) -> list[tuple]:
    """Event log rows by record_id: (type, table, key, column, old, new, status, perpetrator)."""
    config = config or make_config(db)
    c = config.event_log.columns
    return db.rows(
        f"SELECT {c.event_type}, {c.table_name}, {c.table_key}, {c.column_name}, {c.old_value}, "
        f"{c.new_value}, {c.status}, {c.perpetrator} "
        f"FROM {db.qualified(config.event_log.table)} ORDER BY {c.record_id}"
    )


def perpetrator(db: TestDatabase) -> str | None:
    return None if db.dialect == "sqlite" else db.engine.url.username


def ident(db: TestDatabase, name: str) -> str:
    """The name as a quoted identifier: in double quotes, in backticks on MariaDB."""
    return str(db.engine.dialect.identifier_preparer.quote_identifier(name))


def event(
    db: TestDatabase,
    event_type: int,
    key: str,
    column: str | None = None,
    old: str | None = None,
    new: str | None = None,
    table: str = "usr",
) -> tuple:
    return (event_type, table, key, column, old, new, "N", perpetrator(db))


def photo_insert(db: TestDatabase, key: str, data: bytes) -> tuple:
    """SQLite logs a binary column as a field query-back; PostgreSQL and MariaDB log its base64."""
    if db.dialect == "sqlite":
        return event(db, 7, key, "photo")
    return event(db, 1, key, "photo", None, base64.b64encode(data).decode())


def insert_jack(db: TestDatabase, usr: Table, idu: int = 1) -> None:
    run(
        db,
        insert(usr).values(
            idu=idu, fname="Jack", lname="Frost", photo=b"\xaa\xaa", active=True, born=BORN
        ),
    )


def jack_inserted(db: TestDatabase, key: str) -> list[tuple]:
    """SQLite logs the binary column as a query-back after the logged values, so that they make
    one <add>; PostgreSQL and MariaDB log every column in table order."""
    logged = [
        event(db, 1, key, "fname", None, "Jack"),
        event(db, 1, key, "lname", None, "Frost"),
        event(db, 1, key, "active", None, TRUE_TEXT[db.dialect]),
        event(db, 1, key, "born", None, BORN_TEXT[db.dialect]),
    ]
    photo = photo_insert(db, key, b"\xaa\xaa")
    return logged + [photo] if db.dialect == "sqlite" else [*logged[:2], photo, *logged[2:]]


def trigger_names(db: TestDatabase, table: str) -> list[str]:
    if db.dialect == "mariadb":
        query = (
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS "
            f"WHERE TRIGGER_SCHEMA = '{db.schema}' AND EVENT_OBJECT_TABLE = '{table}' ORDER BY TRIGGER_NAME"
        )
    elif db.dialect == "sqlite":
        query = (
            "SELECT name FROM sqlite_master "
            f"WHERE type = 'trigger' AND tbl_name = '{table}' ORDER BY name"
        )
    else:
        query = (
            "SELECT tgname FROM pg_trigger "
            f"WHERE tgrelid = '{db.schema}.{table}'::regclass AND NOT tgisinternal ORDER BY tgname"
        )
    return [name for (name,) in db.rows(query)]


# --- the event log -----------------------------------------------------------------------------


def test_event_log_has_the_fixed_columns_and_a_poll_index(database: TestDatabase) -> None:
    config = make_config(database)
    install_capture(config, database.engine, [])
    inspector = inspect(database.engine)
    columns = inspector.get_columns("event_log", schema=database.schema)
    assert tuple(c["name"] for c in columns) == (*config.event_log.columns.in_order(), "transaction_id")
    required = [c["name"] for c in columns if not c["nullable"] and c["name"] != "record_id"]
    assert required == ["status", "event_type", "event_time", "table_name", "table_key"]
    key = inspector.get_pk_constraint("event_log", schema=database.schema)
    assert key["constrained_columns"] == ["record_id"]
    indexes = {i["name"]: i for i in inspector.get_indexes("event_log", schema=database.schema)}
    poll_index = indexes["event_log_status_idx"]
    if database.dialect == "postgresql":  # only the rows still to publish
        assert poll_index["column_names"] == ["record_id"]
        assert poll_index["dialect_options"]["postgresql_where"] == "(status = 'N'::bpchar)"
    else:
        assert poll_index["column_names"] == ["status", "record_id"]


def test_event_log_defaults(database: TestDatabase) -> None:
    install_capture(make_config(database), database.engine, [])
    event_log = database.qualified("event_log")
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    database.execute(
        f"INSERT INTO {event_log} (event_type, table_name, table_key) VALUES (1, 't', 'k=1')",
        f"INSERT INTO {event_log} (event_type, table_name, table_key) VALUES (1, 't', 'k=2')",
    )
    after = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    rows = database.rows(f"SELECT record_id, status, event_time FROM {event_log} ORDER BY record_id")
    (first, status, logged_at), (second, _, _) = rows
    assert first > 0 and second > first
    assert status == "N"
    if database.dialect == "sqlite":
        logged_at = dt.datetime.strptime(logged_at, "%Y-%m-%d %H:%M:%S.%f")
    if database.dialect != "postgresql":  # UTC, without a zone
        logged_at = logged_at.replace(tzinfo=dt.timezone.utc)
    assert before <= logged_at <= after


def test_renamed_event_log_columns(database: TestDatabase, usr: Table) -> None:
    renamed = EventLogColumns(
        status="state", table_key="objkey", event_type="kind", new_value="val", transaction_id="txn"
    )
    config = make_config(database, EventLogConfig(table="evlog", columns=renamed))
    install_capture(config, database.engine, ["usr"])
    insert_jack(database, usr)
    columns = inspect(database.engine).get_columns("evlog", schema=database.schema)
    assert tuple(c["name"] for c in columns) == (*renamed.in_order(), "txn")
    assert logged(database, config) == jack_inserted(database, "idu=1")
    assert not inspect(database.engine).has_table("event_log", schema=database.schema)


# --- field style -------------------------------------------------------------------------------


def test_insert_logs_a_type_1_per_non_null_field(database: TestDatabase, usr: Table) -> None:
    install_capture(make_config(database), database.engine, ["usr"])
    insert_jack(database, usr)
    run(database, insert(usr).values(idu=2, lname="Doe", active=False))
    assert logged(database) == jack_inserted(database, "idu=1") + [
        event(database, 1, "idu=2", "lname", None, "Doe"),
        event(database, 1, "idu=2", "active", None, FALSE_TEXT[database.dialect]),
    ]


def test_insert_of_only_nulls_still_logs_the_new_row(database: TestDatabase, usr: Table) -> None:
    install_capture(make_config(database), database.engine, ["usr"])
    run(database, insert(usr).values(idu=3))
    assert logged(database) == [event(database, 1, "idu=3", "fname")]


def test_update_logs_a_type_2_per_changed_field(database: TestDatabase, usr: Table) -> None:
    insert_jack(database, usr)
    install_capture(make_config(database), database.engine, ["usr"])
    run(
        database,
        update(usr).values(fname="John", lname="Frost", active=False),
        update(usr).values(fname="John"),
    )
    assert logged(database) == [
        event(database, 2, "idu=1", "fname", "Jack", "John"),
        event(database, 2, "idu=1", "active", TRUE_TEXT[database.dialect], FALSE_TEXT[database.dialect]),
    ]


def test_update_with_null_sides(database: TestDatabase, usr: Table) -> None:
    run(database, insert(usr).values(idu=1, fname="Jack"))
    install_capture(make_config(database), database.engine, ["usr"])
    run(
        database,
        update(usr).values(fname=None, lname="Frost"),
        update(usr).values(born=BORN),
        update(usr).values(born=None),
    )
    born = BORN_TEXT[database.dialect]
    assert logged(database) == [
        event(database, 2, "idu=1", "fname", "Jack", None),
        event(database, 2, "idu=1", "lname", None, "Frost"),
        event(database, 2, "idu=1", "born", None, born),
        event(database, 2, "idu=1", "born", born, None),
    ]


def test_delete_logs_a_type_4(database: TestDatabase, usr: Table) -> None:
    insert_jack(database, usr)
    install_capture(make_config(database), database.engine, ["usr"])
    run(database, delete(usr))
    assert logged(database) == [event(database, 4, "idu=1")]


def test_key_update_logs_a_delete_of_the_old_key_then_an_insert_of_the_new(
    database: TestDatabase, usr: Table
) -> None:
    insert_jack(database, usr)
    install_capture(make_config(database), database.engine, ["usr"])
    run(database, update(usr).values(idu=7, fname=None))
    expected = [event(database, 4, "idu=1")] + [
        e for e in jack_inserted(database, "idu=7") if e[3] != "fname"
    ]
    assert logged(database) == expected


def test_table_of_key_columns_only_logs_row_events(database: TestDatabase) -> None:
    database.execute(f"CREATE TABLE {database.qualified('tag')} (label VARCHAR(20) PRIMARY KEY)")
    install_capture(make_config(database), database.engine, ["tag"])
    database.execute(
        f"INSERT INTO {database.qualified('tag')} VALUES ('red')",
        f"UPDATE {database.qualified('tag')} SET label = 'blue'",
    )
    assert logged(database) == [
        event(database, 5, "label=red", table="tag"),
        event(database, 4, "label=red", table="tag"),
        event(database, 5, "label=blue", table="tag"),
    ]


# --- row style ---------------------------------------------------------------------------------


def test_row_style(database: TestDatabase, usr: Table) -> None:
    install_capture(make_config(database), database.engine, ["usr"], style="row")
    insert_jack(database, usr)
    run(
        database,
        update(usr).values(fname="John"),
        update(usr).values(fname="John"),
        update(usr).values(idu=2),
        delete(usr),
    )
    assert logged(database) == [
        event(database, 5, "idu=1"),
        event(database, 6, "idu=1"),
        event(database, 4, "idu=1"),
        event(database, 5, "idu=2"),
        event(database, 4, "idu=2"),
    ]


# --- table_key ---------------------------------------------------------------------------------

KEY_CASES = [
    ("plain", "name=plain+num=-5"),
    ("two words", "name=two words+num=-5"),
    ("ünï", "name=ünï+num=-5"),
    ("", 'name=""+num=-5'),
    (",", 'name=","+num=-5'),
    (";", 'name=";"+num=-5'),
    ("'", "name=\"'\"+num=-5"),
    ("+", 'name="+"+num=-5'),
    ('"', 'name="\\""+num=-5'),
    ("=", 'name="="+num=-5'),
    ("\\", 'name="\\\\"+num=-5'),
    ("<", 'name="<"+num=-5'),
    (">", 'name=">"+num=-5'),
    (", ; ' + \" = \\ < >", "name=\", ; ' + \\\" = \\\\ < >\"+num=-5"),
    ('a\\"b', 'name="a\\\\\\"b"+num=-5'),
]


def create_acct(db: TestDatabase) -> Table:
    """Key order (name, num) differs from column order, so the key follows the primary key."""
    metadata = MetaData(schema=db.schema)
    table = Table(
        "acct",
        metadata,
        Column("num", Integer, nullable=False),
        Column("note", Text),
        Column("name", String(40), nullable=False),
        PrimaryKeyConstraint("name", "num"),
    )
    metadata.create_all(db.engine)
    return table


def test_compound_key_quotes_exactly_the_values_that_need_it(database: TestDatabase) -> None:
    acct = create_acct(database)
    install_capture(make_config(database), database.engine, ["acct"])
    run(database, *(insert(acct).values(name=name, num=-5, note="x") for name, _ in KEY_CASES))
    keys = [key for (_, _, key, *_rest) in logged(database)]
    assert keys == [expected for _, expected in KEY_CASES]
    for (name, _), key in zip(KEY_CASES, keys):
        assert parse_key(key) == (KeyPart("name", name), KeyPart("num", "-5"))


def test_compound_key_update_logs_both_keys(database: TestDatabase) -> None:
    acct = create_acct(database)
    run(database, insert(acct).values(name="a+b", num=1, note="x"))
    install_capture(make_config(database), database.engine, ["acct"])
    run(database, update(acct).values(num=2), update(acct).values(note="y"), delete(acct))
    assert logged(database) == [
        event(database, 4, 'name="a+b"+num=1', table="acct"),
        event(database, 1, 'name="a+b"+num=2', "note", None, "x", table="acct"),
        event(database, 2, 'name="a+b"+num=2', "note", "x", "y", table="acct"),
        event(database, 4, 'name="a+b"+num=2', table="acct"),
    ]


def test_identifiers_that_need_quoting(database: TestDatabase) -> None:
    order = database.qualified(ident(database, "order"))
    database.execute(f"CREATE TABLE {order} ({ident(database, 'Id')} INTEGER PRIMARY KEY, "
                     f"{ident(database, 'group')} VARCHAR(10))")
    config = make_config(database, EventLogConfig(table="select"))
    install_capture(config, database.engine, ["order"])
    database.execute(f"INSERT INTO {order} VALUES (4, 'g')")
    rows = database.rows(
        "SELECT event_type, table_name, table_key, column_name, new_value "
        f"FROM {database.qualified(ident(database, 'select'))}"
    )
    assert rows == [(1, "order", "Id=4", "group", "g")]


# --- binary values -----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"\xaa\xaa", bytes(range(256)) * 2], ids=["short", "long"])
def test_postgresql_logs_binary_as_base64_on_one_line(
    postgresql_database: TestDatabase, data: bytes
) -> None:
    db = postgresql_database
    usr = create_usr(db)
    install_capture(make_config(db), db.engine, ["usr"])
    changed = data + b"\x00"
    run(db, insert(usr).values(idu=1, photo=data), update(usr).values(photo=changed))
    before, after = base64.b64encode(data).decode(), base64.b64encode(changed).decode()
    assert logged(db) == [
        event(db, 1, "idu=1", "photo", None, before),
        event(db, 2, "idu=1", "photo", before, after),
    ]


def test_sqlite_logs_binary_as_field_query_back(sqlite_database: TestDatabase) -> None:
    db = sqlite_database
    usr = create_usr(db)
    install_capture(make_config(db), db.engine, ["usr"])
    run(
        db,
        insert(usr).values(idu=1, fname="Jack", photo=b"\xaa\xaa"),
        update(usr).values(photo=b"\xbb\xbb"),
        update(usr).values(photo=b"\xbb\xbb"),
        update(usr).values(photo=None),
        insert(usr).values(idu=2, photo=b"\xcc"),
        insert(usr).values(idu=3),
    )
    assert logged(db) == [
        event(db, 1, "idu=1", "fname", None, "Jack"),
        event(db, 7, "idu=1", "photo"),
        event(db, 8, "idu=1", "photo"),
        event(db, 8, "idu=1", "photo"),
        event(db, 5, "idu=2"),  # no value logged, one read back: the row read back (`insert_row_operation`)
        event(db, 7, "idu=2", "photo"),
        event(db, 1, "idu=3", "fname"),  # no value at all: a type 1 without one
    ]


def test_sqlite_refuses_a_binary_key(sqlite_database: TestDatabase) -> None:
    sqlite_database.execute("CREATE TABLE blobkey (k BLOB PRIMARY KEY, v TEXT)")
    with pytest.raises(CaptureError, match="'blobkey'.*'k'"):
        trigger_sql(make_config(sqlite_database), sqlite_database.engine, "blobkey", "field")


# --- perpetrator and PostgreSQL specifics ------------------------------------------------------


def test_perpetrator_is_the_login_user_and_null_on_sqlite(
    database: TestDatabase, usr: Table
) -> None:
    install_capture(make_config(database), database.engine, ["usr"])
    run(database, insert(usr).values(idu=1, fname="Jack"))
    perpetrators = {p for *_, p in logged(database)}
    if database.dialect == "postgresql":
        assert perpetrators == {database.engine.url.username}
        assert perpetrators == {database.rows("SELECT session_user")[0][0]}
    elif database.dialect == "mariadb":
        assert perpetrators == {database.engine.url.username}
        assert perpetrators == {database.rows("SELECT USER()")[0][0].split("@")[0]}
    else:
        assert perpetrators == {None}


def test_postgresql_logs_iso_date_times_whatever_the_session_datestyle(
    postgresql_database: TestDatabase,
) -> None:
    db = postgresql_database
    usr = create_usr(db)
    install_capture(make_config(db), db.engine, ["usr"])
    with db.engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL datestyle = 'German, DMY'")
        conn.execute(insert(usr).values(idu=1, born=BORN))
    assert logged(db) == [event(db, 1, "idu=1", "born", None, "2024-01-02 03:04:05")]


def test_postgresql_json_columns_compare_as_text(postgresql_database: TestDatabase) -> None:
    db = postgresql_database
    metadata = MetaData(schema=db.schema)
    doc = Table("doc", metadata, Column("id", Integer, primary_key=True), Column("body", JSON))
    metadata.create_all(db.engine)
    install_capture(make_config(db), db.engine, ["doc"])
    run(
        db,
        insert(doc).values(id=1, body={"a": 1}),
        update(doc).values(body={"a": 2}),
        update(doc).values(body={"a": 2}),
    )
    assert logged(db) == [
        event(db, 1, "id=1", "body", None, '{"a": 1}', table="doc"),
        event(db, 2, "id=1", "body", '{"a": 1}', '{"a": 2}', table="doc"),
    ]


# --- installing --------------------------------------------------------------------------------


def test_dry_run_returns_the_sql_and_creates_nothing(database: TestDatabase, usr: Table) -> None:
    statements = install_capture(make_config(database), database.engine, ["usr"], dry_run=True)
    assert statements == event_log_ddl(make_config(database), database.engine) + capture.capture_ddl(
        make_config(database), database.engine
    ) + trigger_sql(make_config(database), database.engine, "usr", "field")
    assert any("CREATE TABLE IF NOT EXISTS" in s for s in statements)
    creates = sum(re.match(r"CREATE (OR REPLACE )?TRIGGER", s) is not None for s in statements)
    assert creates == 3
    assert not inspect(database.engine).has_table("event_log", schema=database.schema)
    assert trigger_names(database, "usr") == []
    run(database, insert(usr).values(idu=1, fname="Jack"))


def test_installing_twice_leaves_one_set_of_triggers(database: TestDatabase, usr: Table) -> None:
    config = make_config(database)
    install_capture(config, database.engine, ["usr"])
    install_capture(config, database.engine, ["usr"])
    expected = (
        ["usr_publisher", "usr_publisher_trunc", "usr_publisher_upd"]
        if database.dialect == "postgresql"
        else ["usr_publisher_del", "usr_publisher_ins", "usr_publisher_upd"]
    )
    assert trigger_names(database, "usr") == expected
    run(database, insert(usr).values(idu=1, fname="Jack"))
    assert logged(database) == [event(database, 1, "idu=1", "fname", None, "Jack")]


def test_reinstalling_in_another_style_replaces_the_triggers(database: TestDatabase, usr: Table) -> None:
    config = make_config(database)
    install_capture(config, database.engine, ["usr"], style="field")
    install_capture(config, database.engine, ["usr"], style="row")
    run(database, insert(usr).values(idu=1, fname="Jack"))
    assert logged(database) == [event(database, 5, "idu=1")]


def test_install_runs_in_one_transaction(
    database: TestDatabase, usr: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = capture.trigger_sql

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        return real(*args, **kwargs) + ["SELECT * FROM no_such_table_anywhere"]

    monkeypatch.setattr(capture, "trigger_sql", failing)
    with pytest.raises(Exception, match="no_such_table_anywhere"):
        install_capture(make_config(database), database.engine, ["usr"])
    assert not inspect(database.engine).has_table("event_log", schema=database.schema)
    assert trigger_names(database, "usr") == []


def test_table_names_match_ignoring_case(database: TestDatabase, usr: Table) -> None:
    install_capture(make_config(database), database.engine, ["USR"])
    run(database, insert(usr).values(idu=1, fname="Jack"))
    assert logged(database) == [event(database, 1, "idu=1", "fname", None, "Jack")]


# --- errors ------------------------------------------------------------------------------------


def test_missing_table_is_an_error_that_names_it(database: TestDatabase, usr: Table) -> None:
    with pytest.raises(CaptureError, match="'nosuch' does not exist"):
        install_capture(make_config(database), database.engine, ["usr", "nosuch"])
    assert not inspect(database.engine).has_table("event_log", schema=database.schema)
    assert trigger_names(database, "usr") == []


def test_table_without_primary_key_is_an_error_that_names_it(database: TestDatabase) -> None:
    database.execute(f"CREATE TABLE {database.qualified('nokey')} (a INTEGER, b TEXT)")
    with pytest.raises(CaptureError, match="'nokey' has no primary key"):
        install_capture(make_config(database), database.engine, ["nokey"])


def test_view_is_an_error(database: TestDatabase, usr: Table) -> None:
    view, usr_name = database.qualified("view_usr"), database.qualified("usr")
    database.execute(f"CREATE VIEW {view} AS SELECT idu AS pk_idu FROM {usr_name}")
    with pytest.raises(CaptureError, match="'view_usr' is a view"):
        trigger_sql(make_config(database), database.engine, "view_usr", "field")


def test_unknown_style_is_an_error(database: TestDatabase, usr: Table) -> None:
    with pytest.raises(CaptureError, match="unknown capture style 'column' for table 'usr'"):
        trigger_sql(make_config(database), database.engine, "usr", "column")  # type: ignore[arg-type]
    with pytest.raises(CaptureError, match="unknown capture style 'column'"):
        install_capture(make_config(database), database.engine, [], style="column")  # type: ignore[arg-type]


def test_config_can_be_derived_with_replace(database: TestDatabase, usr: Table) -> None:
    base = make_config(database)
    config = dataclasses.replace(base, event_log=dataclasses.replace(base.event_log, table="log2"))
    install_capture(config, database.engine, ["usr"])
    run(database, insert(usr).values(idu=1, lname="Doe"))
    assert logged(database, config) == [event(database, 1, "idu=1", "lname", None, "Doe")]


UNNAMEABLE_KEY_COLUMNS = ["a=b", "a,b", "a+b", "a;b", "a'b", 'a"b', "a\\b", "a<b", "a>b", " a", "a "]


@pytest.mark.parametrize("column", UNNAMEABLE_KEY_COLUMNS)
def test_a_key_column_a_table_key_cannot_name_is_refused(database: TestDatabase, column: str) -> None:
    """Installed, such a table logged keys no table_key parses: every event was E."""
    if database.dialect == "mariadb" and column.endswith(" "):  # no such table can exist there
        with pytest.raises(sa_exc.DatabaseError, match="Incorrect column name"):
            database.execute(f"CREATE TABLE {database.qualified('odd')} ({ident(database, column)} INTEGER)")
        return
    database.execute(f"CREATE TABLE {database.qualified('odd')} ({ident(database, column)} INTEGER PRIMARY KEY, "
                     f"{ident(database, column + '2')} TEXT)")
    why = "leading or trailing spaces" if column != column.strip() else "it holds"
    with pytest.raises(CaptureError, match=f"table 'odd': key column {re.escape(repr(column))} cannot be named "
                                           f"in a table_key: .*{why}"):
        install_capture(make_config(database), database.engine, ["odd"])
    assert not inspect(database.engine).has_table("event_log", schema=database.schema)
    assert trigger_names(database, "odd") == []


def test_a_value_column_of_any_name_is_accepted(database: TestDatabase) -> None:
    table = database.qualified("odd")
    database.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, {ident(database, 'a=b, c')} TEXT)")
    install_capture(make_config(database), database.engine, ["odd"])
    database.execute(f"INSERT INTO {table} VALUES (1, 'x')")
    assert logged(database) == [event(database, 1, "id=1", "a=b, c", None, "x", table="odd")]


def test_postgresql_refuses_tables_an_update_could_pass_by(postgresql_database: TestDatabase) -> None:
    """The UPDATE trigger is a statement trigger, which fires for the table a statement names
    only: not for a partition updated through its parent, nor a parent's rows updated in a
    partition or an inheritance child."""
    db = postgresql_database
    s = db.schema
    db.execute(
        f"CREATE TABLE {s}.parted (id integer PRIMARY KEY, v text) PARTITION BY RANGE (id)",
        f"CREATE TABLE {s}.part1 PARTITION OF {s}.parted FOR VALUES FROM (0) TO (100)",
        f"CREATE TABLE {s}.base (id integer PRIMARY KEY, v text)",
        f"CREATE TABLE {s}.kid (w text) INHERITS ({s}.base)",
        f"ALTER TABLE {s}.kid ADD PRIMARY KEY (id)",
    )
    config = make_config(db)
    refusals = {
        "parted": "'parted' cannot be captured: it is partitioned",
        "part1": "'part1' cannot be captured: it is a partition of 'parted'",
        "base": "'base' cannot be captured: it has inheritance children",
        "kid": "'kid' cannot be captured: it inherits from 'base'",
    }
    for table, message in refusals.items():
        with pytest.raises(CaptureError, match=message):
            install_capture(config, db.engine, [table])
    assert not inspect(db.engine).has_table("event_log", schema=s)


def test_postgresql_update_capture_follows_the_row_trigger(postgresql_database: TestDatabase) -> None:
    """Dropping or disabling `usr_publisher`, the trigger that puts the table on the published
    list, switches the table's capture off: the UPDATE statement trigger logs nothing either."""
    db = postgresql_database
    usr = create_usr(db)
    install_capture(make_config(db), db.engine, ["usr"])
    table = db.qualified("usr")
    run(db, insert(usr).values(idu=1, fname="Jack"))
    db.execute(f"ALTER TABLE {table} DISABLE TRIGGER usr_publisher", f"UPDATE {table} SET fname = 'John'",
               f"INSERT INTO {table} (idu) VALUES (2)")
    db.execute(f"ALTER TABLE {table} ENABLE TRIGGER usr_publisher", f"UPDATE {table} SET lname = 'Doe' WHERE idu = 1")
    db.execute(f"DROP TRIGGER usr_publisher ON {table}", f"UPDATE {table} SET lname = 'Roe'")
    assert logged(db) == [
        event(db, 1, "idu=1", "fname", None, "Jack"),
        event(db, 2, "idu=1", "lname", None, "Doe"),
    ]


def test_postgresql_long_table_names_keep_their_triggers_and_functions_apart(
    postgresql_database: TestDatabase,
) -> None:
    """PostgreSQL cuts names at 63 bytes. Cut there, a table's two triggers or two functions
    would have one name, and two long tables sharing a prefix one function, the second install
    capturing the first table's changes as the second's."""
    db = postgresql_database
    names = ["t" * 40 + "ü" * 11 + "a", "t" * 40 + "ü" * 11 + "b"]
    for name in names:
        db.execute(f'CREATE TABLE {db.schema}."{name}" (id integer PRIMARY KEY, v text)')
    config = make_config(db)
    install_capture(config, db.engine, names)
    install_capture(config, db.engine, names)
    assert [len(trigger_names(db, f'"{name}"')) for name in names] == [3, 3]
    assert capture.triggered_tables(config, db.engine) == tuple(names)
    functions = db.rows(f"SELECT count(*) FROM pg_proc WHERE pronamespace = '{db.schema}'::regnamespace")
    assert functions == [(1 + len(FOLLOW_FUNCTIONS) + 2 * len(names),)]
    for name in names:
        table = f'{db.schema}."{name}"'
        db.execute(f"INSERT INTO {table} VALUES (1, 'a')", f"UPDATE {table} SET v = 'b'", f"DELETE FROM {table}")
    assert logged(db) == [
        e
        for name in names
        for e in (
            event(db, 1, "id=1", "v", None, "a", table=name),
            event(db, 2, "id=1", "v", "a", "b", table=name),
            event(db, 4, "id=1", table=name),
        )
    ]


def test_postgresql_logs_canonical_texts_and_leaves_the_sessions_own_settings(
    postgresql_database: TestDatabase,
) -> None:
    """A session whose settings would write other texts gets the capture's only while a capture
    function logs: the events carry the texts query-back reads, and the session keeps its own."""
    db = postgresql_database
    table = db.qualified("ev")
    db.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, at timestamptz, span interval, "
               "ratio double precision, day date)")
    install_capture(make_config(db), db.engine, ["ev"])
    foreign = {"DateStyle": "SQL, DMY", "TimeZone": "America/New_York", "IntervalStyle": "sql_standard",
               "extra_float_digits": "0"}
    with db.engine.begin() as conn:
        for name, value in foreign.items():
            conn.exec_driver_sql(f"SET LOCAL {name} = '{value}'")
        conn.exec_driver_sql(f"INSERT INTO {table} VALUES (1, '2024-01-02 03:04:05+00', '1 day 02:03:04', "
                             "0.30000000000000004, '2024-01-02')")
        conn.exec_driver_sql(f"UPDATE {table} SET ratio = 0.5, day = '2024-01-03' WHERE id = 1")
        kept = {name: conn.exec_driver_sql(f"SHOW {name}").scalar_one() for name in foreign}
    assert kept == foreign
    assert db.rows(f"SELECT column_name, old_value, new_value FROM {db.qualified('event_log')} ORDER BY record_id") == [
        ("at", None, "2024-01-02 03:04:05+00"),
        ("span", None, "1 day 02:03:04"),
        ("ratio", None, "0.30000000000000004"),
        ("day", None, "2024-01-02"),
        ("ratio", "0.30000000000000004", "0.5"),
        ("day", "2024-01-02", "2024-01-03"),
    ]
