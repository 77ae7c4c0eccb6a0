"""MariaDB capture: what the server does unlike PostgreSQL and SQLite (time zones, character
sets, sql_mode, foreign key actions, DDL that commits, name lengths), through the real triggers."""
from __future__ import annotations

import base64
import datetime as dt
import re

import pytest
from conftest import TestDatabase
from sqlalchemy import create_engine, text

from publisher.capture.install import CaptureError, install_capture, triggered_tables
from publisher.config import Config, DatabaseConfig


def make_config(db: TestDatabase) -> Config:
    return Config(database=DatabaseConfig(url=db.url, schema=db.schema))


def logged(db: TestDatabase) -> list[tuple]:
    """(event_type, table_name, table_key, column_name, old_value, new_value) by record_id."""
    return db.rows(
        "SELECT event_type, table_name, table_key, column_name, old_value, new_value "
        f"FROM {db.qualified('event_log')} ORDER BY record_id"
    )


def trigger_names(db: TestDatabase) -> list[str]:
    return [n for (n,) in db.rows(
        f"SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '{db.schema}' "
        "ORDER BY TRIGGER_NAME")]


@pytest.fixture
def db(mariadb_database: TestDatabase) -> TestDatabase:
    return mariadb_database


# --- values ----------------------------------------------------------------------------------------


def test_a_timestamp_is_logged_in_utc_whatever_the_session_time_zone(db: TestDatabase) -> None:
    t = db.qualified("ev")
    db.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, at TIMESTAMP NULL, local DATETIME NULL)")
    install_capture(make_config(db), db.engine, ["ev"])
    with db.engine.begin() as conn:
        conn.exec_driver_sql("SET time_zone = '+05:00'")
        conn.exec_driver_sql(f"INSERT INTO {t} VALUES (1, '2024-01-02 08:00:00', '2024-01-02 08:00:00')")
        assert conn.exec_driver_sql("SELECT @@session.time_zone").scalar_one() == "+05:00"
        conn.exec_driver_sql("SET time_zone = '-03:00'")
        conn.exec_driver_sql(f"UPDATE {t} SET at = '2024-01-02 09:00:00'")
        conn.exec_driver_sql("SET time_zone = '+01:00'")
        conn.exec_driver_sql(f"UPDATE {t} SET at = '2024-01-02 13:00:00'")  # the same instant
        assert conn.exec_driver_sql("SELECT @@session.time_zone").scalar_one() == "+01:00"
    assert logged(db) == [
        (1, "ev", "id=1", "at", None, "2024-01-02 03:00:00"),
        (1, "ev", "id=1", "local", None, "2024-01-02 08:00:00"),
        (2, "ev", "id=1", "at", "2024-01-02 03:00:00", "2024-01-02 12:00:00"),
    ]


def test_a_failing_trigger_gives_the_session_its_time_zone_back(db: TestDatabase) -> None:
    t = db.qualified("ev")
    db.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, at TIMESTAMP NULL)")
    install_capture(make_config(db), db.engine, ["ev"])
    db.execute(f"DROP TABLE {db.qualified('event_log')}")
    with db.engine.connect() as conn:
        conn.exec_driver_sql("SET time_zone = '+05:00'")
        with pytest.raises(Exception, match="event_log"):
            conn.exec_driver_sql(f"INSERT INTO {t} VALUES (1, '2024-01-02 08:00:00')")
        assert conn.exec_driver_sql("SELECT @@session.time_zone").scalar_one() == "+05:00"


def test_values_of_a_latin1_session_and_columns_are_logged_as_utf8(db: TestDatabase) -> None:
    t = db.qualified("words")
    db.execute(f"CREATE TABLE {t} (k VARCHAR(10) CHARACTER SET latin1 PRIMARY KEY, "
               "l VARCHAR(20) CHARACTER SET latin1, m VARCHAR(20) CHARACTER SET utf8mb3)")
    install_capture(make_config(db), db.engine, ["words"])
    latin1 = create_engine(db.engine.url.update_query_dict({"charset": "latin1"}))
    try:
        with latin1.begin() as conn:
            conn.execute(text(f"INSERT INTO {t} VALUES (:k, :l, :m)"), {"k": "é+", "l": "Grüße", "m": "ça"})
            assert conn.exec_driver_sql("SELECT @@character_set_client").scalar_one() == "latin1"
    finally:
        latin1.dispose()
    assert logged(db) == [
        (1, "words", 'k="é+"', "l", None, "Grüße"),
        (1, "words", 'k="é+"', "m", None, "ça"),
    ]


@pytest.mark.parametrize("style", ["field", "row"])
def test_binary_values_and_a_binary_key_update(db: TestDatabase, style: str) -> None:
    """Base64 on one line (TO_BASE64 breaks lines every 76 characters); a binary key is its
    base64, quoted for its '='; a key update logs the old key's delete, then the new key's insert."""
    t = db.qualified("pic")
    db.execute(f"CREATE TABLE {t} (k VARBINARY(4) PRIMARY KEY, img BLOB)")
    install_capture(make_config(db), db.engine, ["pic"], style)  # type: ignore[arg-type]
    data = bytes(range(256)) * 2
    with db.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {t} VALUES (:k, :img)"), {"k": b"\xaa\xaa", "img": data})
        conn.execute(text(f"UPDATE {t} SET img = :img"), {"img": data + b" "})
        conn.execute(text(f"UPDATE {t} SET img = :img"), {"img": data + b" "})
        conn.execute(text(f"UPDATE {t} SET k = :k"), {"k": b"\xbb\xbb"})
    before, after = base64.b64encode(data).decode(), base64.b64encode(data + b" ").decode()
    assert "\n" not in before and len(before) > 76
    if style == "field":
        assert logged(db) == [
            (1, "pic", 'k="qqo="', "img", None, before),
            (2, "pic", 'k="qqo="', "img", before, after),
            (4, "pic", 'k="qqo="', None, None, None),
            (1, "pic", 'k="u7s="', "img", None, after),
        ]
    else:
        assert logged(db) == [
            (5, "pic", 'k="qqo="', None, None, None),
            (6, "pic", 'k="qqo="', None, None, None),
            (4, "pic", 'k="qqo="', None, None, None),
            (5, "pic", 'k="u7s="', None, None, None),
        ]


def test_trailing_spaces_and_case_are_changes_though_the_collation_ignores_them(db: TestDatabase) -> None:
    t = db.qualified("person")
    db.execute(f"CREATE TABLE {t} (name VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, "
               "nick VARCHAR(20) COLLATE utf8mb4_bin)")
    db.execute(f"INSERT INTO {t} VALUES ('alice', 'al')")
    install_capture(make_config(db), db.engine, ["person"])
    db.execute(f"UPDATE {t} SET nick = 'al '", f"UPDATE {t} SET name = 'Alice'", f"UPDATE {t} SET nick = 'al '")
    assert logged(db) == [
        (2, "person", "name=alice", "nick", "al", "al "),
        (4, "person", "name=alice", None, None, None),
        (1, "person", "name=Alice", "nick", None, "al "),
    ]


def test_every_event_names_the_login_user_and_its_statement(db: TestDatabase) -> None:
    """transaction_id names the statement (no reliable transaction id can be read): its
    connection and its start time in UTC, one for all the rows a slow statement logs, another
    for the next statement of the same transaction."""
    t = db.qualified("t")
    db.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, v VARCHAR(5), w VARCHAR(5))")
    install_capture(make_config(db), db.engine, ["t"])
    with db.engine.begin() as conn:
        session = conn.execute(text("SELECT CONNECTION_ID()")).scalar_one()
        conn.execute(text(f"INSERT INTO {t} SELECT seq, 'a', CONCAT('b', SLEEP(0.01)) FROM seq_1_to_3"))
        conn.execute(text(f"DELETE FROM {t}"))
        started = conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    rows = db.rows(f"SELECT perpetrator, transaction_id FROM {db.qualified('event_log')} ORDER BY record_id")
    assert [perpetrator for perpetrator, _ in rows] == ["root"] * 9
    inserted, deleted = {t for _, t in rows[:6]}, {t for _, t in rows[6:]}
    assert len(inserted) == len(deleted) == 1 and inserted != deleted
    for marker in inserted | deleted:
        connection, moment = marker.split("@")
        assert int(connection) == session
        assert dt.timedelta(0) <= started - dt.datetime.fromisoformat(moment) < dt.timedelta(minutes=1)


# --- names and sql_mode -----------------------------------------------------------------------------


def test_names_needing_quotes_installed_under_any_sql_mode(db: TestDatabase) -> None:
    """Installed by a session with ANSI_QUOTES, NO_BACKSLASH_ESCAPES and PIPES_AS_CONCAT, the
    triggers log what they log under the default sql_mode: backticks, no backslash literal, CONCAT."""
    t = db.qualified("`order`")
    db.execute(f"CREATE TABLE {t} (`Select` VARCHAR(20) PRIMARY KEY, `a\\b 'c'` VARCHAR(20), `x``y` INTEGER)")
    modes = "ANSI_QUOTES,NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT"
    odd = create_engine(db.engine.url, connect_args={"init_command": f"SET SESSION sql_mode = '{modes}'"})
    try:
        install_capture(make_config(db), odd, ["order"])
    finally:
        odd.dispose()
    with db.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {t} VALUES (:k, 'v', 3)"), {"k": 'a\\"b'})
        conn.execute(text(f"UPDATE {t} SET `Select` = 'plain'"))
    assert logged(db) == [
        (1, "order", 'Select="a\\\\\\"b"', "a\\b 'c'", None, "v"),
        (1, "order", 'Select="a\\\\\\"b"', "x`y", None, "3"),
        (4, "order", 'Select="a\\\\\\"b"', None, None, None),
        (1, "order", "Select=plain", "a\\b 'c'", None, "v"),
        (1, "order", "Select=plain", "x`y", None, "3"),
    ]


def test_a_name_ansi_quotes_would_misread_is_refused(db: TestDatabase) -> None:
    db.execute(f"CREATE TABLE {db.qualified('q')} (id INTEGER PRIMARY KEY, `say \"hi\"` VARCHAR(20))")
    ansi = create_engine(db.engine.url, connect_args={"init_command": "SET SESSION sql_mode = 'ANSI_QUOTES'"})
    try:
        with pytest.raises(CaptureError, match="table 'q': column .*say.* was misread .*ANSI_QUOTES"):
            install_capture(make_config(db), ansi, ["q"])
    finally:
        ansi.dispose()
    install_capture(make_config(db), db.engine, ["q"])
    db.execute(f"INSERT INTO {db.qualified('q')} VALUES (1, 'x')")
    assert logged(db) == [(1, "q", "id=1", 'say "hi"', None, "x")]


def test_long_table_names_keep_their_triggers_apart(db: TestDatabase) -> None:
    """Trigger names are at most 64 characters: `<table>_publisher_<suffix>` of a long table
    is cut and marked with a digest, so two tables sharing a long prefix keep theirs."""
    names = ["t" * 50 + "ü" * 12 + "a", "t" * 50 + "ü" * 12 + "b"]
    for name in names:
        db.execute(f"CREATE TABLE {db.qualified('`' + name + '`')} (id INTEGER PRIMARY KEY, v VARCHAR(5))")
    config = make_config(db)
    install_capture(config, db.engine, names)
    install_capture(config, db.engine, names)
    triggers = trigger_names(db)
    assert len(triggers) == 6 and all(len(n) <= 64 for n in triggers)
    assert triggered_tables(config, db.engine) == tuple(names)
    for name in names:
        db.execute(f"INSERT INTO {db.qualified('`' + name + '`')} VALUES (1, 'a')")
    assert logged(db) == [(1, name, "id=1", "v", None, "a") for name in names]


# --- refused, and undone ----------------------------------------------------------------------------


REFUSED = {
    "bits": ("CREATE TABLE {s}.bits (id INTEGER PRIMARY KEY, flags BIT(8))",
             "table 'bits': column 'flags' is of BIT type"),
    "spot": ("CREATE TABLE {s}.spot (id INTEGER PRIMARY KEY, at POINT)",
             "table 'spot': column 'at' is of an unknown"),
    "cascaded": ("CREATE TABLE {s}.cascaded (id INTEGER PRIMARY KEY, o INTEGER REFERENCES {s}.owner (id) "
                 "ON DELETE CASCADE)",
                 "table 'cascaded': foreign key .* to 'owner' has ON DELETE CASCADE, whose changes fire no trigger"),
    "nulled": ("CREATE TABLE {s}.nulled (id INTEGER PRIMARY KEY, o INTEGER, "
               "FOREIGN KEY (o) REFERENCES {s}.owner (id) ON UPDATE SET NULL)",
               "table 'nulled': foreign key .* to 'owner' has ON UPDATE SET NULL"),
}


@pytest.mark.parametrize("table", REFUSED)
def test_what_no_trigger_can_log_is_refused_and_nothing_installed(db: TestDatabase, table: str) -> None:
    ddl, message = REFUSED[table]
    db.execute(f"CREATE TABLE {db.qualified('owner')} (id INTEGER PRIMARY KEY)", ddl.format(s=db.schema))
    with pytest.raises(CaptureError, match=message):
        install_capture(make_config(db), db.engine, ["owner", table])
    assert trigger_names(db) == []
    assert db.rows(f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db.schema}' "
                   "AND TABLE_NAME = 'event_log'") == []


def test_a_child_moved_by_its_parents_key_update_cascade_is_refused(db: TestDatabase) -> None:
    from publisher.config import ClassConfig

    q = db.qualified
    db.execute(f"CREATE TABLE {q('usr')} (idu INTEGER PRIMARY KEY)",
               f"CREATE TABLE {q('usr_phone')} (idu INTEGER NOT NULL, phone VARCHAR(20) NOT NULL, "
               f"PRIMARY KEY (idu, phone), FOREIGN KEY (idu) REFERENCES {q('usr')} (idu) ON UPDATE CASCADE)")
    config = Config(database=DatabaseConfig(url=db.url, schema=db.schema),
                    classes={"usr": ClassConfig(multi_valued={"phone": "usr_phone.phone"})})
    with pytest.raises(CaptureError, match="table 'usr_phone': foreign key .* to 'usr' has ON UPDATE CASCADE"):
        install_capture(config, db.engine, ["usr"])
    assert trigger_names(db) == []


def test_a_failed_reinstall_puts_the_earlier_triggers_back(db: TestDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    """DDL commits on its own on MariaDB: a failure part way undoes the statements run before it."""
    import publisher.capture.install as capture

    t = db.qualified("t")
    db.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, v VARCHAR(5))")
    install_capture(make_config(db), db.engine, ["t"], "row")
    real = capture.trigger_sql
    monkeypatch.setattr(capture, "trigger_sql", lambda *a, **k: real(*a, **k) + ["SELECT * FROM no_such_table"])
    with pytest.raises(Exception, match="no_such_table"):
        install_capture(make_config(db), db.engine, ["t"], "field")
    assert trigger_names(db) == ["t_publisher_del", "t_publisher_ins", "t_publisher_upd"]
    db.execute(f"INSERT INTO {t} VALUES (1, 'a')")
    assert logged(db) == [(5, "t", "id=1", None, None, None)]


def test_a_failed_install_leaves_what_other_sessions_made_meanwhile(db: TestDatabase,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import publisher.capture.install as capture

    db.execute(f"CREATE TABLE {db.qualified('t')} (id INTEGER PRIMARY KEY, v VARCHAR(5))")
    real = capture.trigger_sql
    monkeypatch.setattr(capture, "trigger_sql",
                        lambda *a, **k: real(*a, **k) + ["DO SLEEP(1)", "SELECT * FROM no_such_table"])

    def bystander() -> None:
        time.sleep(0.4)
        db.execute(f"CREATE TABLE {db.qualified('event_log_lock_owner')} (name VARCHAR(64) PRIMARY KEY)")

    other = threading.Thread(target=bystander)
    other.start()
    with pytest.raises(Exception, match="no_such_table"):
        install_capture(make_config(db), db.engine, ["t"])
    other.join()
    tables = {name for (name,) in db.rows(
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db.schema}'")}
    assert tables == {"t", "event_log_lock_owner"}  # its own event log undone, the other session's table kept
    assert trigger_names(db) == []


def test_install_dry_run_prints_a_script_the_mariadb_client_runs(db: TestDatabase, tmp_path) -> None:
    """Trigger bodies hold ';', so the script sets a DELIMITER the command-line client knows;
    what the client installs from it logs what `install` itself would."""
    import shutil
    import subprocess
    import sys

    db.execute(f"CREATE TABLE {db.qualified('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(20), photo BLOB)")
    config = tmp_path / "publisher.toml"
    config.write_text(f'[database]\nurl = "{db.url}"\nschema = "{db.schema}"\n', encoding="utf-8")
    script = subprocess.run(
        [sys.executable, "-m", "publisher.cli", "install", "-c", str(config), "--table", "usr", "--dry-run"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert script.startswith("DELIMITER //\n") and script.rstrip().endswith("DELIMITER ;")
    assert triggered_tables(make_config(db), db.engine) == ()  # a dry run installs nothing
    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "the MariaDB command-line client is part of the server's installation"
    subprocess.run([client, "-uroot", "-h127.0.0.1", db.schema], input=script, text=True, check=True)
    assert triggered_tables(make_config(db), db.engine) == ("usr",)
    db.execute(f"INSERT INTO {db.qualified('usr')} VALUES (1, 'Ann', X'00FF')")
    assert logged(db) == [(1, "usr", "idu=1", "fname", None, "Ann"), (1, "usr", "idu=1", "photo", None, "AP8=")]


def test_installing_again_while_the_table_changes_loses_no_change(db: TestDatabase) -> None:
    """DDL commits on its own: a DROP then a CREATE would let changes in between go unlogged.
    MariaDB replaces each trigger in one statement."""
    import threading

    t = db.qualified("r")
    db.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, v INTEGER)", f"INSERT INTO {t} VALUES (1, 0)")
    install_capture(make_config(db), db.engine, ["r"])
    stop = threading.Event()
    updates = 0

    def change() -> None:
        nonlocal updates
        while not stop.is_set():
            db.execute(f"UPDATE {t} SET v = v + 1")
            updates += 1

    changing = threading.Thread(target=change)
    changing.start()
    try:
        for _ in range(15):
            install_capture(make_config(db), db.engine, ["r"])
    finally:
        stop.set()
        changing.join()
    assert updates > 15
    assert len([row for row in logged(db) if row[0] == 2]) == updates


@pytest.mark.parametrize("column_type", ["BIGINT", "VARCHAR(32)"])
def test_an_event_log_that_cannot_hold_the_statement_id_is_refused_before_any_trigger(
    db: TestDatabase, column_type: str
) -> None:
    """A site's own (or an older) event log whose transaction_id takes no statement id would make
    every write of the application fail once the triggers log one: install says so instead."""
    log, doc = db.qualified("event_log"), db.qualified("doc")
    db.execute(
        f"CREATE TABLE {log} (record_id BIGINT AUTO_INCREMENT PRIMARY KEY, status CHAR(1) COLLATE utf8mb4_bin "
        "NOT NULL DEFAULT 'N', event_type INT NOT NULL, event_time DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6), "
        "perpetrator VARCHAR(255), table_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, table_key LONGTEXT NOT NULL, "
        f"column_name VARCHAR(255), old_value LONGTEXT, new_value LONGTEXT, transaction_id {column_type})",
        f"CREATE TABLE {doc} (id INTEGER PRIMARY KEY, title VARCHAR(20))",
    )
    refused = rf"'transaction_id' is {re.escape(column_type.lower())}.*MODIFY transaction_id"
    with pytest.raises(CaptureError, match=refused):
        install_capture(make_config(db), db.engine, ["doc"])
    assert trigger_names(db) == []
    db.execute(f"ALTER TABLE {log} MODIFY transaction_id VARCHAR(64)")
    install_capture(make_config(db), db.engine, ["doc"])
    db.execute(f"INSERT INTO {doc} VALUES (1, 'a')")
    assert [row[1:3] for row in logged(db)] == [("doc", "id=1")]


def test_a_long_binary_value_is_logged_as_a_field_query_back(db: TestDatabase, spark, tmp_path, monkeypatch) -> None:
    """A binary value longer than the triggers log (its base64 would cost the application's
    write time that grows with the square of its length) logs a 7 or an 8 instead of a 1 or a
    2, and a new row that logs no value but one read back a 5 (an `<add>` here, as
    `insert_row_operation` says); the publisher reads them back, and the consumer ends with the
    table's values."""
    from harness import Harness, assert_mirrored, drain
    from test_cycle_features import OTHER_USER

    from publisher.config import InsertRowOperation
    from publisher.databases.mariadb import capture as mariadb

    monkeypatch.setattr(mariadb, "LOGGED_BINARY_BYTES", 100)
    t = db.qualified("pic")
    db.execute(f"CREATE TABLE {t} (k INT PRIMARY KEY, img BLOB, note VARCHAR(20))")
    h = Harness(spark, db, tmp_path, user=OTHER_USER, tables=(),  # not the writes' user (loopback)
                insert_row_operation=InsertRowOperation.ADD)
    install_capture(h.config, db.engine, ["pic"], "field")
    edge, long, short = b"e" * 100, b"L" * 101, b"s" * 50
    with db.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {t} VALUES (1, :img, 'a')"), {"img": edge})
        conn.execute(text(f"INSERT INTO {t} VALUES (2, :img, 'b')"), {"img": long})
        conn.execute(text(f"UPDATE {t} SET img = :img WHERE k = 1"), {"img": long})
        conn.execute(text(f"UPDATE {t} SET img = :img WHERE k = 2"), {"img": short})
        conn.execute(text(f"UPDATE {t} SET img = :img, note = 'c' WHERE k = 2"), {"img": edge})
        conn.execute(text(f"INSERT INTO {t} VALUES (3, :img, NULL)"), {"img": long})
    b64 = {value: base64.b64encode(value).decode() for value in (edge, short)}
    assert logged(db) == [
        (1, "pic", "k=1", "img", None, b64[edge]),
        (1, "pic", "k=1", "note", None, "a"),
        (1, "pic", "k=2", "note", None, "b"),
        (7, "pic", "k=2", "img", None, None),
        (8, "pic", "k=1", "img", None, None),
        (8, "pic", "k=2", "img", None, None),
        (2, "pic", "k=2", "img", b64[short], b64[edge]),
        (2, "pic", "k=2", "note", "b", "c"),
        (5, "pic", "k=3", None, None, None),  # no value logged, one read back: the row read back, an <add>
        (7, "pic", "k=3", "img", None, None),
    ]
    drain(h)
    assert_mirrored(h, rejects_allowed=False)
    first = {}
    for tag, association, _ in h.published(new_only=False).describe():
        first.setdefault(association.split(",")[0], tag)
    assert first == {"k=1": "add", "k=2": "add", "k=3": "add"}
