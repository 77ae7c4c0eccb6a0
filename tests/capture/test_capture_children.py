"""Capture of logical classes' child tables: a child row is logged as a value of its parent
object's multi-valued attribute, against the parent's table and key, on SQLite, PostgreSQL and
MariaDB."""
from __future__ import annotations

import re

import pytest
from conftest import TestDatabase
from sqlalchemy import inspect

import publisher.capture.install as capture
from publisher.capture.install import CaptureError, install_capture
from publisher.config import ClassConfig, Config, DatabaseConfig, PublisherSettings

CLASSES = {
    "usr": ClassConfig(multi_valued={"phone": "usr_phone.phone"}),
    "acct": ClassConfig(multi_valued={"tag": "acct_tag.tag"}),
}


def make_config(db: TestDatabase, classes: dict[str, ClassConfig] | None = None) -> Config:
    database = DatabaseConfig(url=db.url, schema=db.schema)
    return Config(database=database, classes=CLASSES if classes is None else classes)


def create_tables(db: TestDatabase) -> None:
    """usr with its phones, and acct (key (name, num)) with its tags, whose link columns (owner,
    n) are named otherwise and come in another order in the tags' primary key. usr_phone's key
    is deferrable on PostgreSQL (checked per statement), so that a statement may swap values."""
    q = db.qualified
    deferrable = " DEFERRABLE" if db.dialect == "postgresql" else ""
    db.execute(
        f"CREATE TABLE {q('usr')} (idu integer PRIMARY KEY, fname varchar(64))",
        f"CREATE TABLE {q('usr_phone')} (idu integer NOT NULL REFERENCES {q('usr')} ON DELETE CASCADE, "
        f"phone varchar(32) NOT NULL, kind varchar(16), PRIMARY KEY (idu, phone){deferrable})",
        f"CREATE TABLE {q('acct')} (num integer NOT NULL, note text, name varchar(40) NOT NULL, "
        "PRIMARY KEY (name, num))",
        f"CREATE TABLE {q('acct_tag')} (tag varchar(20) NOT NULL, n integer NOT NULL, owner varchar(40) NOT NULL, "
        f"PRIMARY KEY (tag, n, owner), FOREIGN KEY (owner, n) REFERENCES {q('acct')} (name, num) ON DELETE CASCADE)",
        f"INSERT INTO {q('usr')} VALUES (1, 'Jack'), (2, 'Jill')",
        f"INSERT INTO {q('acct')} VALUES (1, NULL, 'x+y'), (2, NULL, 'z')",
    )


@pytest.fixture
def tables(database: TestDatabase) -> TestDatabase:
    create_tables(database)
    return database


def logged(db: TestDatabase) -> list[tuple]:
    """(event_type, table_name, table_key, column_name, old_value, new_value) by record_id."""
    return db.rows(
        "SELECT event_type, table_name, table_key, column_name, old_value, new_value "
        f"FROM {db.qualified('event_log')} ORDER BY record_id"
    )


def since(db: TestDatabase, *statements: str) -> list[tuple]:
    """The events the statements (one transaction) log."""
    before = len(logged(db))
    db.execute(*statements)
    return logged(db)[before:]


def added(key: str, value: str, table: str = "usr", column: str = "phone") -> tuple:
    return (2, table, key, column, None, value)


def removed(key: str, value: str, table: str = "usr", column: str = "phone") -> tuple:
    return (2, table, key, column, value, None)


def query_back(key: str, table: str = "usr", column: str = "phone") -> tuple:
    return (8, table, key, column, None, None)


def trigger_names(db: TestDatabase, table: str) -> list[str]:
    if db.dialect == "mariadb":
        query = (f"SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '{db.schema}' "
                 f"AND EVENT_OBJECT_TABLE = '{table}' ORDER BY TRIGGER_NAME")
    elif db.dialect == "sqlite":
        query = f"SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = '{table}' ORDER BY name"
    else:
        query = (f"SELECT tgname FROM pg_trigger WHERE tgrelid = '{db.schema}.{table}'::regclass "
                 "AND NOT tgisinternal ORDER BY tgname")
    return [name for (name,) in db.rows(query)]


def nothing_installed(db: TestDatabase, *tables: str) -> bool:
    return not inspect(db.engine).has_table("event_log", schema=db.schema) and not any(
        trigger_names(db, t) for t in tables)


# --- field style ---------------------------------------------------------------------------------


def test_field_style_logs_values_added_and_removed_against_the_parent(tables: TestDatabase) -> None:
    db, phone = tables, tables.qualified("usr_phone")
    install_capture(make_config(db), db.engine, ["usr"], "field")
    assert since(db, f"INSERT INTO {phone} VALUES (1, '111', 'home'), (1, '222', 'work')") == [
        added("idu=1", "111"),
        added("idu=1", "222"),
    ]
    assert since(db, f"UPDATE {phone} SET phone = '333' WHERE phone = '111'") == [
        removed("idu=1", "111"),
        added("idu=1", "333"),
    ]
    assert since(db, f"UPDATE {phone} SET idu = 2 WHERE phone = '222'") == [
        removed("idu=1", "222"),
        added("idu=2", "222"),
    ]
    assert since(db, f"UPDATE {phone} SET kind = 'cell'", f"UPDATE {phone} SET phone = phone, idu = idu") == []
    assert since(db, f"DELETE FROM {phone} WHERE phone = '333'") == [removed("idu=1", "333")]


def test_field_style_compound_key_is_spelled_as_the_parent_spells_it(tables: TestDatabase) -> None:
    db, acct, tag = tables, tables.qualified("acct"), tables.qualified("acct_tag")
    install_capture(make_config(db), db.engine, ["acct"], "field")
    assert since(db, f"INSERT INTO {tag} VALUES ('red', 1, 'x+y'), ('a=b', 2, 'z')") == [
        added('name="x+y"+num=1', "red", "acct", "tag"),
        added("name=z+num=2", "a=b", "acct", "tag"),
    ]
    assert since(db, f"UPDATE {tag} SET owner = 'z', n = 2 WHERE tag = 'red'") == [
        removed('name="x+y"+num=1', "red", "acct", "tag"),
        added("name=z+num=2", "red", "acct", "tag"),
    ]
    assert since(db, f"DELETE FROM {tag} WHERE tag = 'a=b'") == [removed("name=z+num=2", "a=b", "acct", "tag")]
    # The parent's own triggers spell its key the same way.
    assert since(db, f"UPDATE {acct} SET note = 'n' WHERE num = 2") == [
        (2, "acct", "name=z+num=2", "note", None, "n"),
    ]


# --- row style -----------------------------------------------------------------------------------


def test_row_style_logs_a_query_back_of_the_attribute_per_parent(tables: TestDatabase) -> None:
    db, phone = tables, tables.qualified("usr_phone")
    install_capture(make_config(db), db.engine, ["usr"], "row")
    assert since(db, f"INSERT INTO {phone} VALUES (1, '111', 'home'), (1, '222', 'work')") == [
        query_back("idu=1"),
        query_back("idu=1"),
    ]
    assert since(db, f"UPDATE {phone} SET phone = '333' WHERE phone = '111'") == [query_back("idu=1")]
    assert since(db, f"UPDATE {phone} SET idu = 2 WHERE phone = '222'") == [
        query_back("idu=1"),
        query_back("idu=2"),
    ]
    assert since(db, f"UPDATE {phone} SET kind = 'cell'", f"UPDATE {phone} SET phone = phone") == []
    assert since(db, f"DELETE FROM {phone} WHERE phone = '333'") == [query_back("idu=1")]


def test_row_style_compound_key(tables: TestDatabase) -> None:
    db, tag = tables, tables.qualified("acct_tag")
    install_capture(make_config(db), db.engine, ["acct"], "row")
    assert since(db, f"INSERT INTO {tag} VALUES ('red', 1, 'x+y')",
                 f"UPDATE {tag} SET owner = 'z', n = 2", f"DELETE FROM {tag}") == [
        query_back('name="x+y"+num=1', "acct", "tag"),
        query_back('name="x+y"+num=1', "acct", "tag"),
        query_back("name=z+num=2", "acct", "tag"),
        query_back("name=z+num=2", "acct", "tag"),
    ]


def test_an_update_of_several_values_of_one_object(tables: TestDatabase) -> None:
    """PostgreSQL logs an UPDATE per statement: one query-back per object it changed; SQLite's
    and MariaDB's row triggers log one per row."""
    db, phone = tables, tables.qualified("usr_phone")
    db.execute(f"INSERT INTO {phone} VALUES (1, 'a', NULL), (1, 'b', NULL), (2, 'c', NULL)")
    install_capture(make_config(db), db.engine, ["usr"], "row")
    suffixed = "CONCAT(phone, 'x')" if db.dialect == "mariadb" else "phone || 'x'"
    events = since(db, f"UPDATE {phone} SET phone = {suffixed}")
    if db.dialect == "postgresql":
        assert events == [query_back("idu=1"), query_back("idu=2")]
    else:
        assert events == [query_back("idu=1"), query_back("idu=1"), query_back("idu=2")]
    install_capture(make_config(db), db.engine, ["usr"], "field")
    events = since(db, f"UPDATE {phone} SET phone = upper(phone) WHERE idu = 1")
    if db.dialect == "postgresql":
        assert events == [removed("idu=1", "ax"), removed("idu=1", "bx"), added("idu=1", "AX"), added("idu=1", "BX")]
    else:
        assert events == [removed("idu=1", "ax"), added("idu=1", "AX"), removed("idu=1", "bx"), added("idu=1", "BX")]


# --- PostgreSQL specifics ------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["field", "row"])
def test_postgresql_a_swap_of_values_logs_nothing(postgresql_database: TestDatabase, style: str) -> None:
    """Paired by their whole identity, the old and new rows of a swap are the same set."""
    db = postgresql_database
    create_tables(db)
    phone = db.qualified("usr_phone")
    db.execute(f"INSERT INTO {phone} VALUES (1, 'a', 'home'), (1, 'b', 'work')")
    install_capture(make_config(db), db.engine, ["usr"], style)  # type: ignore[arg-type]
    assert since(db, f"UPDATE {phone} SET phone = CASE phone WHEN 'a' THEN 'b' WHEN 'b' THEN 'a' END") == []
    assert db.rows(f"SELECT phone, kind FROM {phone} ORDER BY phone") == [("a", "work"), ("b", "home")]


@pytest.mark.parametrize(("style", "expected"), [
    ("field", [(4, "usr", "idu=2", None, None, None), removed("idu=2", "222"), removed("idu=2", "333")]),
    ("row", [(4, "usr", "idu=2", None, None, None), query_back("idu=2"), query_back("idu=2")]),
])
def test_postgresql_a_cascaded_delete_logs_the_children_removal(
    postgresql_database: TestDatabase, style: str, expected: list[tuple]
) -> None:
    """A foreign key's cascade runs its DELETE with the triggers it fires queued behind the
    outer statement's: the parent's delete is logged first, then its values' removal."""
    db = postgresql_database
    create_tables(db)
    phone, usr = db.qualified("usr_phone"), db.qualified("usr")
    db.execute(f"INSERT INTO {phone} VALUES (1, '111', NULL), (2, '222', NULL), (2, '333', NULL)")
    install_capture(make_config(db), db.engine, ["usr"], style)  # type: ignore[arg-type]
    assert since(db, f"DELETE FROM {usr} WHERE idu = 2") == expected


def test_postgresql_child_capture_follows_its_row_trigger(postgresql_database: TestDatabase) -> None:
    db = postgresql_database
    create_tables(db)
    phone = db.qualified("usr_phone")
    install_capture(make_config(db), db.engine, ["usr"])
    db.execute(f"INSERT INTO {phone} VALUES (1, 'a', NULL)")
    assert since(db, f"ALTER TABLE {phone} DISABLE TRIGGER usr_phone_publisher",
                 f"UPDATE {phone} SET phone = 'b'", f"INSERT INTO {phone} VALUES (2, 'c', NULL)") == []
    assert since(db, f"ALTER TABLE {phone} ENABLE TRIGGER usr_phone_publisher",
                 f"UPDATE {phone} SET phone = 'd' WHERE idu = 1") == [removed("idu=1", "b"), added("idu=1", "d")]


def test_postgresql_binary_values_are_logged_as_base64(postgresql_database: TestDatabase) -> None:
    db = postgresql_database
    create_tables(db)
    photo = db.qualified("usr_photo")
    usr = db.qualified("usr")
    db.execute(f"CREATE TABLE {photo} (idu integer REFERENCES {usr}, img bytea, PRIMARY KEY (idu, img))")
    classes = {"usr": ClassConfig(multi_valued={"photo": "usr_photo.img"})}
    install_capture(make_config(db, classes), db.engine, ["usr"])
    assert since(db, f"INSERT INTO {photo} VALUES (1, '\\xaaaa'::bytea)", f"DELETE FROM {photo}") == [
        added("idu=1", "qqo=", column="photo"),
        removed("idu=1", "qqo=", column="photo"),
    ]


# --- SQLite specifics ----------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["field", "row"])
def test_sqlite_binary_values_are_logged_as_query_backs(sqlite_database: TestDatabase, style: str) -> None:
    """SQLite has no base64: a BLOB value is read back by the publisher, in both styles."""
    db = sqlite_database
    create_tables(db)
    db.execute("CREATE TABLE usr_photo (idu integer REFERENCES usr, img BLOB, PRIMARY KEY (idu, img))")
    classes = {"usr": ClassConfig(multi_valued={"photo": "usr_photo.img"})}
    install_capture(make_config(db, classes), db.engine, ["usr"], style)  # type: ignore[arg-type]
    assert since(
        db,
        "INSERT INTO usr_photo VALUES (1, x'aaaa')",
        "UPDATE usr_photo SET img = x'bbbb'",
        "UPDATE usr_photo SET img = x'bbbb'",
        "UPDATE usr_photo SET idu = 2",
        "DELETE FROM usr_photo",
    ) == [
        query_back("idu=1", column="photo"),
        query_back("idu=1", column="photo"),
        query_back("idu=1", column="photo"),
        query_back("idu=2", column="photo"),
        query_back("idu=2", column="photo"),
    ]


def test_sqlite_rows_without_a_parent_key_or_value_log_nothing(sqlite_database: TestDatabase) -> None:
    """SQLite allows NULL in a key column; such a row is no value of any object."""
    db = sqlite_database
    db.execute("CREATE TABLE usr (idu integer PRIMARY KEY, fname text)",
               "CREATE TABLE usr_phone (idu integer, phone text, PRIMARY KEY (idu, phone))")
    install_capture(make_config(db), db.engine, ["usr"])
    assert since(db, "INSERT INTO usr_phone VALUES (NULL, 'a'), (1, NULL)",
                 "UPDATE usr_phone SET idu = 1 WHERE phone = 'a'", "DELETE FROM usr_phone WHERE phone IS NULL") == [
        added("idu=1", "a"),
    ]


# --- installing ----------------------------------------------------------------------------------


def test_triggered_tables_do_not_list_child_tables(tables: TestDatabase) -> None:
    db = tables
    config = make_config(db)
    install_capture(config, db.engine, ["usr", "acct"])
    assert trigger_names(db, "usr_phone") and trigger_names(db, "acct_tag")
    assert capture.triggered_tables(config, db.engine) == ("acct", "usr")
    assert capture.published_tables(config, db.engine).names == ("acct", "usr")
    configured = Config(database=config.database, classes=CLASSES,
                        publisher=PublisherSettings(tables=("usr", "USR_PHONE", "acct")))
    assert capture.published_tables(configured, db.engine).names == ("usr", "acct")


def test_naming_a_child_installs_its_triggers_as_a_child(tables: TestDatabase) -> None:
    db = tables
    config = make_config(db)
    install_capture(config, db.engine, ["USR_PHONE"])
    assert trigger_names(db, "usr") == [] and trigger_names(db, "acct_tag") == []
    assert trigger_names(db, "usr_phone")
    assert capture.triggered_tables(config, db.engine) == ()
    assert since(db, f"INSERT INTO {db.qualified('usr_phone')} VALUES (1, '111', NULL)",
                 f"UPDATE {db.qualified('usr')} SET fname = 'John'") == [added("idu=1", "111")]


def test_dry_run_shows_the_children_statements_and_installs_nothing(tables: TestDatabase) -> None:
    db = tables
    statements = install_capture(make_config(db), db.engine, ["usr"], dry_run=True)
    assert sum(re.match(r"CREATE (OR REPLACE )?TRIGGER", s) is not None for s in statements) == 2 * 3
    assert any("usr_phone_publisher" in s for s in statements)
    named_too = install_capture(make_config(db), db.engine, ["usr_phone", "usr"], dry_run=True)
    assert sorted(named_too) == sorted(statements)  # a child named with its class: installed once
    assert nothing_installed(db, "usr", "usr_phone")


def test_a_class_without_children_installs_as_a_plain_table(tables: TestDatabase) -> None:
    db = tables
    classes = {"usr": ClassConfig()}
    install_capture(make_config(db, classes), db.engine, ["usr"])
    assert trigger_names(db, "usr_phone") == []
    assert since(db, f"UPDATE {db.qualified('usr')} SET fname = 'John' WHERE idu = 1") == [
        (2, "usr", "idu=1", "fname", "Jack", "John"),
    ]


# --- errors --------------------------------------------------------------------------------------


ERRORS = {
    "usr_nosuch.phone": r"classes\.usr\.multi_valued\.bad: child table 'usr_nosuch' does not exist",
    "usr_phone.nosuch": r"classes\.usr\.multi_valued\.bad: table 'usr_phone' has no column 'nosuch'",
    "usr_alias.alias": r"classes\.usr\.multi_valued\.bad: the primary key of 'usr_alias' is \(idu, alias, note\)",
    "usr_mail.mail": r"classes\.usr\.multi_valued\.bad: usr_mail\.idu \(VARCHAR\(10\)\) holds usr\.idu "
                     r"\(INTEGER\), whose values a table_key spells otherwise",
}


@pytest.mark.parametrize("spec", ERRORS)
def test_a_bad_child_is_an_error_that_names_it_and_installs_nothing(tables: TestDatabase, spec: str) -> None:
    """Missing child table, missing value column, a child key other than (links, value), a
    link column of another value type than the key it holds."""
    db, q = tables, tables.qualified
    text = "varchar(40)" if db.dialect == "mariadb" else "text"  # MariaDB keys no TEXT column
    db.execute(
        f"CREATE TABLE {q('usr_alias')} (idu integer REFERENCES {q('usr')}, alias {text}, note {text}, "
        "PRIMARY KEY (idu, alias, note))",
        f"CREATE TABLE {q('usr_mail')} (idu varchar(10), mail {text}, PRIMARY KEY (idu, mail))",
    )
    classes = {**CLASSES, "usr": ClassConfig(multi_valued={"bad": spec})}
    for named in (["acct", "usr"], [spec.split(".")[0]]):
        with pytest.raises(CaptureError, match=ERRORS[spec]):
            install_capture(make_config(db, classes), db.engine, named)
    assert nothing_installed(db, "usr", "usr_phone", "acct", "acct_tag", "usr_alias", "usr_mail")


def test_naming_one_child_checks_that_child_only(tables: TestDatabase) -> None:
    db = tables
    classes = {"usr": ClassConfig(multi_valued={"phone": "usr_phone.phone", "bad": "usr_nosuch.x"})}
    with pytest.raises(CaptureError, match="usr_nosuch"):
        install_capture(make_config(db, classes), db.engine, ["usr"])
    install_capture(make_config(db, classes), db.engine, ["usr_phone"])
    assert since(db, f"INSERT INTO {db.qualified('usr_phone')} VALUES (1, '111', NULL)") == [added("idu=1", "111")]


def test_a_renamed_child_table_is_named_with_the_class_to_install(tables: TestDatabase) -> None:
    """Its triggers went with it and still log its rows against the parent: the remedy is the
    class's configuration, then the class's install."""
    from publisher.capture.install import capture_problems

    db = tables
    config = make_config(db, {"usr": ClassConfig(multi_valued={"phone": "usr_phone.phone"})})
    install_capture(config, db.engine, ["usr"])
    rename = "RENAME TABLE {old} TO {new}" if db.dialect == "mariadb" else "ALTER TABLE {old} RENAME TO usr_tel"
    db.execute(rename.format(old=db.qualified("usr_phone"), new=db.qualified("usr_tel")))
    stale, moved = capture_problems(config, db.engine)
    assert stale.startswith("table 'usr': capture installed for columns") and "'usr_phone' does not exist" in stale
    assert [moved] == [
        "table 'usr_phone': its capture triggers are on table 'usr_tel' (renamed?), where they still log its rows "
        "as values of usr.phone: name 'usr_tel' in classes.usr.multi_valued.phone, then "
        "`publisher install --table usr`"]
    assert since(db, f"INSERT INTO {db.qualified('usr_tel')} VALUES (1, '111', NULL)") == [added("idu=1", "111")]
