"""What MariaDB does unlike PostgreSQL and SQLite, end to end through the real triggers and
cycles: its BOOLEAN, zero dates, collations that call two keys equal, REPLACE and upserts,
and the subscribers it cannot serve."""
from __future__ import annotations

from pathlib import Path

import pytest
from harness import Harness, assert_mirrored, drain

from publisher.cli import main

OTHER_USER = "publisher_app"


@pytest.fixture
def h(spark, cycle_path, mariadb_database, tmp_path) -> Harness:
    harness = Harness(spark, mariadb_database, tmp_path, user=OTHER_USER, path=cycle_path, tables=())
    harness.create_usr()
    harness.create_event_log()
    return harness


def values_of(h: Harness, key: str, attribute: str) -> list[tuple[str | None, str | None]]:
    """(type, text) of every value the documents so far added to `attribute` of the usr `key`."""
    wanted = h.association(key)
    return [
        (value.get("type"), value.text)
        for op in h.published(new_only=False).operations if op.findtext("association") == wanted
        for attr in op if attr.get("attr-name") == attribute
        for value in attr.iter("value") if value.getparent().tag in ("add-attr", "add-value")
    ]


def test_boolean_is_published_as_state_and_another_tinyint_1_value_is_rejected(h: Harness) -> None:
    h.install("usr")
    usr = h.table("usr")
    h.db.execute(f"INSERT INTO {usr} (idu, fname, active) VALUES (1, 'Ann', TRUE)",
                 f"UPDATE {usr} SET active = FALSE WHERE idu = 1")
    drain(h)
    assert values_of(h, "idu=1", "active") == [("state", "true"), ("state", "false")]

    h.db.execute(f"UPDATE {usr} SET active = 5 WHERE idu = 1")
    drain(h)
    (reject,) = h.rejects()
    assert "active" in reject["reason"] and "5" in reject["reason"], reject
    assert list(h.statuses().values())[-1] == "E"


def test_a_zero_date_is_rejected_with_its_reason_and_the_rest_published(h: Harness) -> None:
    h.install("usr")
    with h.engine.begin() as conn:
        conn.exec_driver_sql("SET SESSION sql_mode = ''")  # zero dates allowed, as on older servers
        conn.exec_driver_sql(f"INSERT INTO {h.table('usr')} (idu, fname, born) VALUES (1, 'Ann', '0000-00-00')")
    drain(h)
    (reject,) = h.rejects()
    assert "born" in reject["reason"] and "0000-00-00" in reject["reason"], reject
    assert values_of(h, "idu=1", "fname") == [("string", "Ann")]


@pytest.mark.parametrize("style", ["field", "row"])
@pytest.mark.parametrize(("old", "new"), [("alice", "Alice"), ("a", "a  "), ("ß", "ss")])
def test_a_key_change_the_collation_calls_no_change_moves_the_object(h: Harness, style: str, old: str,
                                                                      new: str) -> None:
    """utf8mb4_general_ci calls 'alice' and 'Alice' equal, PAD SPACE 'a' and 'a  ', and
    general_ci 'ß' and 's': the object's key text changed all the same."""
    acct = h.table("acct")
    h.db.execute(f"CREATE TABLE {acct} (name VARCHAR(20) PRIMARY KEY, mail VARCHAR(40)) "
                 "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
    h.install("acct", style=style)
    h.db.execute(f"INSERT INTO {acct} VALUES ('{old}', 'a@x')")
    drain(h)
    h.db.execute(f"UPDATE {acct} SET name = '{new}' WHERE name = '{old}'")
    drain(h)
    assert_mirrored(h, rejects_allowed=False)


@pytest.mark.parametrize("style", ["field", "row"])
def test_replace_and_upsert_are_captured(h: Harness, style: str) -> None:
    h.install("usr", style=style)
    usr = h.table("usr")
    h.db.execute(
        f"INSERT INTO {usr} (idu, fname, lname) VALUES (1, 'Ann', 'Lee'), (2, 'Bob', 'Ray')",
        f"REPLACE INTO {usr} (idu, fname) VALUES (1, 'Anne')",
        f"INSERT INTO {usr} (idu, fname) VALUES (2, 'Bo') ON DUPLICATE KEY UPDATE fname = 'Bobby'",
        f"INSERT INTO {usr} (idu, fname) VALUES (3, 'Cy') ON DUPLICATE KEY UPDATE fname = 'Cyrus'",
    )
    drain(h)
    assert_mirrored(h, rejects_allowed=False)
    assert h.db.rows(f"SELECT idu, fname, lname FROM {usr} ORDER BY idu") == [
        (1, "Anne", None), (2, "Bobby", "Ray"), (3, "Cy", None)]


def test_subscribers_are_refused_with_the_reason(mariadb_database, tmp_path: Path, capsys) -> None:
    db = mariadb_database
    db.execute(f"CREATE TABLE {db.qualified('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(20))")
    config = tmp_path / "publisher.toml"
    config.write_text(
        f'[database]\nurl = "{db.url}"\nschema = "{db.schema}"\n[output]\ndirectory = "{tmp_path / "out"}"\n'
        '[subscriptions.hr]\ntables = ["usr"]\n'
        f'[subscribers.vault]\nsubscription = "hr"\noutput = "{tmp_path / "vault"}"\n',
        encoding="utf-8",
    )
    for command in (["install", "-c", str(config), "--table", "usr"],
                    ["poll", "-c", str(config), "--subscriber", "vault"]):
        assert main(command) == 2
        error = capsys.readouterr().err
        assert "subscribers need PostgreSQL or SQLite" in error and "transaction id" in error, error


def test_an_event_log_whose_status_ignores_case_is_refused_with_the_fix(spark, mariadb_database, tmp_path) -> None:
    """A site's own event log in the server's default collation would read its 'n' rows as N."""
    from publisher.config import ConfigError

    h = Harness(spark, mariadb_database, tmp_path, user=OTHER_USER)
    h.create_usr()
    h.create_event_log()
    log = h.table("event_log")
    h.db.execute(f"ALTER TABLE {log} MODIFY status CHAR(1) NOT NULL DEFAULT 'N' COLLATE utf8mb4_general_ci")
    (site_own,) = h.log((5, "usr", "idu=1"), status="n")
    (new,) = h.log((4, "usr", "idu=2"))
    with pytest.raises(ConfigError, match=r"column status has the collation utf8mb4_general_ci.*"
                                          r"MODIFY status char\(1\) COLLATE utf8mb4_bin"):
        h.poll()
    assert h.statuses() == {site_own: "n", new: "N"}

    h.db.execute(f"ALTER TABLE {log} MODIFY status CHAR(1) NOT NULL DEFAULT 'N' COLLATE utf8mb4_bin")
    h.poll()
    assert h.statuses() == {site_own: "n", new: "S"}


def test_requeue_refuses_an_event_log_whose_table_name_ignores_case(mariadb_database, tmp_path: Path, capsys) -> None:
    db = mariadb_database
    log = db.qualified("event_log")
    db.execute(f"CREATE TABLE {log} (record_id BIGINT AUTO_INCREMENT PRIMARY KEY, status CHAR(1) NOT NULL "
               "DEFAULT 'N' COLLATE utf8mb4_bin, event_type INT NOT NULL, event_time DATETIME(6) NOT NULL DEFAULT "
               "(UTC_TIMESTAMP(6)), perpetrator VARCHAR(255), table_name VARCHAR(255) NOT NULL COLLATE "
               "utf8mb4_general_ci, table_key TEXT NOT NULL, column_name VARCHAR(255), old_value TEXT, new_value TEXT)",
               f"INSERT INTO {log} (status, event_type, table_name, table_key) VALUES ('E', 5, 'usr', 'idu=1'), "
               "('E', 5, 'USR', 'idu=2')")
    config = tmp_path / "publisher.toml"
    config.write_text(f'[database]\nurl = "{db.url}"\nschema = "{db.schema}"\n[output]\ndirectory = "{tmp_path}"\n',
                      encoding="utf-8")
    assert main(["requeue", "-c", str(config), "--table", "usr"]) == 2
    assert "column table_name has the collation utf8mb4_general_ci" in capsys.readouterr().err
    assert db.rows(f"SELECT status FROM {log} ORDER BY record_id") == [("E",), ("E",)]
