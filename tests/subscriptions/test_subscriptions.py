"""Subscriptions (seed 002): several subscribers check out one event log at their own pace, each
exactly the events committed since its previous check-out, and never write the status column.

Every test drives the real triggers and the `publisher` command's own functions; the oracle is
the mirror (`publisher verify --subscriber`) and the count of event rows each check-out took.
"""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import TestDatabase
from harness import Published, publisher_run, versions_and_data
from lxml import etree
from sqlalchemy import create_engine, text

from publisher.cli import main
from publisher.config import ConfigError, Reader
from publisher.config.loading import load_config
from publisher.database import connect
from publisher.pipeline.cycle import run_cycle
from publisher.service.checkouts import check_in, check_out
from publisher.service.mirror import verify

OTHER_USER = "publisher_app"


@pytest.fixture
def database(subscriber_database):
    """SQLite and PostgreSQL serve subscribers; MariaDB refuses them (test_mariadb)."""
    return subscriber_database
"""The status mode's own user in these tests: no trigger logs as it, so nothing is loopback."""
USR = "CREATE TABLE {t} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64))"
MEMBER = "CREATE TABLE {t} (idu INTEGER NOT NULL, idg VARCHAR(16) NOT NULL, PRIMARY KEY (idu, idg))"


class Site:
    """A database with usr and a key-only link table under capture, a configuration with the
    given subscriptions and subscribers, and the status mode's output beside them."""

    def __init__(
        self, spark: Any, db: TestDatabase, tmp_path: Path, subscriptions: dict[str, str],
        subscribers: dict[str, str], settings: str = "", path: str = "driver",
    ) -> None:
        self.spark = spark
        self.db = db
        self.root = tmp_path
        schema = f'schema = "{db.schema}"\n' if db.schema else ""
        small = "" if path == "driver" else "small_cycle_events = 0\n"
        text_ = (
            f'[database]\nurl = "{db.url}"\n{schema}user = "{OTHER_USER}"\n'
            f"[publisher]\n{settings}\n"
            f'[output]\ndirectory = "{tmp_path / "status"}"\n'
            f'[spark]\nmaster = "local[2]"\n{small}'
        )
        for name, body in subscriptions.items():
            text_ += f"[subscriptions.{name}]\n{body}\n"
        for name, subscription in subscribers.items():
            text_ += f'[subscribers.{name}]\nsubscription = "{subscription}"\noutput = "{tmp_path / name}"\n'
        self.path = tmp_path / "publisher.toml"
        self.path.write_text(text_, encoding="utf-8")
        self.config = load_config(self.path)
        self.engine = connect(self.config)
        db.execute(USR.format(t=db.qualified("usr")), MEMBER.format(t=db.qualified("member")))
        assert main(["install", "-c", str(self.path), "--table", "usr", "--table", "member"]) == 0

    def change(self, *statements: str) -> None:
        """One transaction."""
        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement.format(usr=self.db.qualified("usr"), member=self.db.qualified("member"))))

    def check_out(self, name: str) -> dict[str, Any]:
        return check_out(self.spark, self.engine, self.config, name).summary()

    def poll(self) -> int:
        """A status-mode cycle; the events it took."""
        return run_cycle(self.spark, self.engine, self.config).events

    def verify(self, name: str | None = None) -> list[str]:
        return [str(d) for d in verify(self.config, self.engine, reader=Reader(name))]

    def operations(self, name: str | None = None) -> list[tuple[str, str, int]]:
        folder = self.root / ("status" if name is None else name)
        names = sorted(p.name for p in folder.glob("*.xml")) if folder.exists() else []
        return Published([etree.parse(str(folder / n)).getroot() for n in names]).describe()

    def events(self) -> int:
        return int(self.db.rows(f"SELECT count(*) FROM {self.db.qualified('event_log')}")[0][0])

    def statuses(self) -> set[str]:
        return {r[0] for r in self.db.rows(f"SELECT status FROM {self.db.qualified('event_log')}")}


ALL = {"all": 'tables = ["usr", "member"]'}


def random_changes(site: Site, rng: random.Random, rounds: int) -> list[list[str]]:
    """Transactions of inserts, updates, deletes, delete + re-insert and link changes."""
    present: set[int] = set()
    links: set[tuple[int, str]] = set()
    plan: list[list[str]] = []
    next_id = 1
    for _ in range(rounds):
        transaction: list[str] = []
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            if choice < 0.3 or not present:
                transaction.append(f"INSERT INTO {{usr}} VALUES ({next_id}, 'f{next_id}', NULL)")
                present.add(next_id)
                next_id += 1
                continue
            idu = rng.choice(sorted(present))
            if choice < 0.55:
                column = rng.choice(["fname", "lname"])
                transaction.append(f"UPDATE {{usr}} SET {column} = 'v{rng.randint(0, 9)}' WHERE idu = {idu}")
            elif choice < 0.65:
                transaction.append(f"DELETE FROM {{usr}} WHERE idu = {idu}")
                transaction.append(f"INSERT INTO {{usr}} VALUES ({idu}, 'again', 'x')")
            elif choice < 0.75:
                transaction.append(f"DELETE FROM {{usr}} WHERE idu = {idu}")
                present.discard(idu)
            else:
                link = (idu, rng.choice(["g,1", "g 2", "a=b"]))
                if link in links:
                    transaction.append(f"DELETE FROM {{member}} WHERE idu = {link[0]} AND idg = '{link[1]}'")
                    links.discard(link)
                else:
                    transaction.append(f"INSERT INTO {{member}} VALUES ({link[0]}, '{link[1]}')")
                    links.add(link)
        plan.append(transaction)
    return plan


def test_three_subscribers_at_their_own_pace_get_every_change_once(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, ALL, {"a": "all", "b": "all", "c": "all"})
    rng = random.Random(12)
    taken = {"a": 0, "b": 0, "c": 0}
    for number, transaction in enumerate(random_changes(site, rng, 18), start=1):
        site.change(*transaction)
        site.poll()
        for name, pace in (("a", 1), ("b", 2), ("c", 3)):
            if number % pace == 0:
                taken[name] += site.check_out(name)["events"]
    for name in taken:
        taken[name] += site.check_out(name)["events"]
        assert site.check_out(name)["events"] == 0

    assert taken == dict.fromkeys(taken, site.events())
    for name in taken:
        assert site.verify(name) == [], name
    assert site.verify() == []
    # a checked out when the status mode polled: the same operations, under the same event-ids
    assert site.operations("a") == site.operations()


def test_a_subscriber_never_writes_the_status_column(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, ALL, {"a": "all"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')", "INSERT INTO {member} VALUES (1, 'g')")
    site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")

    summary = site.check_out("a")

    assert summary["events"] == site.events() == 4
    assert summary["statuses"] == {"S": 4}
    assert site.statuses() == {"N"}
    assert site.poll() == 4, "the status mode still has every row to publish"


def test_a_transaction_open_across_two_check_outs_is_delivered_once_after_it_commits(
    spark, postgresql_database, tmp_path
):
    site = Site(spark, postgresql_database, tmp_path, ALL, {"a": "all"})
    late = create_engine(postgresql_database.url)
    try:
        with late.connect() as open_session:
            open_session.execute(text(f"INSERT INTO {postgresql_database.qualified('usr')} VALUES (1, 'early', 'x')"))
            site.change("INSERT INTO {usr} VALUES (2, 'later', 'y')")

            first = site.check_out("a")
            assert first["events"] == 2, "only the committed transaction's two events"
            assert [op[1].split(",")[0] for op in site.operations("a")] == ["idu=2"]

            open_session.commit()
        second = site.check_out("a")
        third = site.check_out("a")
    finally:
        late.dispose()

    assert second["events"] == 2 and third["events"] == 0
    ids = [event_id for _, _, event_id in site.operations("a")]
    assert ids[1] < ids[0], "the late transaction's lower record_ids came in the second check-out"
    assert site.verify("a") == []


def test_checked_in_changes_go_to_every_subscriber_but_the_one_that_checked_them_in(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, ALL, {"vault": "all", "hr": "all"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    with check_in(site.engine, site.config, "vault") as conn:
        conn.execute(text(f"INSERT INTO {database.qualified('usr')} VALUES (2, 'Bob', 'Ray')"))
        conn.execute(text(f"UPDATE {database.qualified('usr')} SET fname = 'Anna' WHERE idu = 1"))
    assert main(["checkin", "-c", str(site.path), "--subscriber", "vault",
                 "-e", f"DELETE FROM {database.qualified('usr')} WHERE idu = 2"]) == 0
    site.change("UPDATE {usr} SET lname = 'Li' WHERE idu = 1")

    vault, hr = site.check_out("vault"), site.check_out("hr")

    assert hr["events"] == site.events() == 7
    assert vault["events"] == 3, "its own insert, update and delete are not returned to it"
    assert [(tag, event_id) for tag, _, event_id in site.operations("vault")] == [("add", 1), ("modify", 7)]
    assert site.verify("hr") == []


def test_a_failed_check_in_records_nothing(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, ALL, {"vault": "all", "hr": "all"})
    with pytest.raises(Exception, match="(?i)unique|constraint"), check_in(site.engine, site.config, "vault") as conn:
        conn.execute(text(f"INSERT INTO {database.qualified('usr')} VALUES (1, 'Ann', 'Lee')"))
        conn.execute(text(f"INSERT INTO {database.qualified('usr')} VALUES (1, 'Ann', 'Lee')"))
    assert site.events() == 0
    assert database.rows(f"SELECT count(*) FROM {database.qualified('event_log_checkin')}") == [(0,)]


def test_a_check_out_spans_windows_of_query_limit_events_on_spark(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, ALL, {"a": "all"}, settings="query_limit = 4", path="spark")
    for transaction in random_changes(site, random.Random(5), 12):
        site.change(*transaction)

    summary = site.check_out("a")

    assert summary["events"] == site.events()
    assert summary["windows"] >= site.events() // 8
    assert site.check_out("a")["events"] == 0
    assert site.verify("a") == []


def test_a_column_subscription_publishes_only_its_columns(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, {"names": 'tables = ["usr"]\ncolumns = { usr = ["FNAME"] }'},
                {"a": "names"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')", "INSERT INTO {member} VALUES (1, 'g')")
    site.change("UPDATE {usr} SET lname = 'Li' WHERE idu = 1")
    site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")

    summary = site.check_out("a")

    assert summary["events"] == site.events() == 5, "every event is checked out, the untracked ones pass"
    attributes = {a.get("attr-name") for doc in (tmp_path / "a").glob("*.xml")
                  for a in etree.parse(str(doc)).iter("add-attr", "modify-attr")}
    assert attributes == {"fname"}
    assert [tag for tag, _, _ in site.operations("a")] == ["add", "modify"]
    assert site.verify("a") == []


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_an_object_inserted_with_values_in_untracked_columns_only_is_published_without_them(
        spark, database, tmp_path, path):
    """An insert logs its columns' values as type 1 events; where the subscription tracks none
    of them, the object's insert is still published, as an <add> with no attribute."""
    site = Site(spark, database, tmp_path, {"names": 'tables = ["usr"]\ncolumns = { usr = ["fname"] }'},
                {"a": "names"}, path=path)
    site.change("INSERT INTO {usr} VALUES (1, NULL, 'Lee')", "INSERT INTO {usr} VALUES (2, 'Bo', 'Ng')")
    site.change("DELETE FROM {usr} WHERE idu = 1", "INSERT INTO {usr} VALUES (1, NULL, 'Li')")

    site.check_out("a")

    assert site.verify("a") == []
    assert [(tag, key.split(",")[0]) for tag, key, _ in site.operations("a")] == [
        ("add", "idu=1"), ("add", "idu=2"), ("delete", "idu=1"), ("add", "idu=1")]
    attributes = {a.get("attr-name") for doc in (tmp_path / "a").glob("*.xml")
                  for a in etree.parse(str(doc)).iter("add-attr", "modify-attr")}
    assert attributes == {"fname"}


def test_a_check_out_describes_a_mid_backlog_migration_by_the_version_of_each_side(spark, database, tmp_path):
    """A check-out's window ends where the table's shape changes, as the status mode's does."""
    site = Site(spark, database, tmp_path, ALL, {"a": "all"})
    site.path.write_text(site.path.read_text(encoding="utf-8") + "[subscribers.a.formats.messages]\n"
                         "enabled = true\nexternal_schema_id = true\n", encoding="utf-8")
    site.config = load_config(site.path)
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    site.change("ALTER TABLE {usr} ADD COLUMN email VARCHAR(64)")
    site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")
    assert site.check_out("a")["events"] == 3
    site.change("UPDATE {usr} SET email = 'a@example.com' WHERE idu = 1")
    assert site.check_out("a")["events"] == 1
    if database.dialect == "sqlite":  # its capture follows the migration at the check-out's first cycle
        expected = [(1, [(1, "Ann", "Lee"), (1, "Anne", None)]), (2, [(1, None, None, "a@example.com")])]
    else:  # PostgreSQL's follows it at once
        expected = [(1, [(1, "Ann", "Lee")]), (2, [(1, "Anne", None, None), (1, None, None, "a@example.com")])]
    assert [(version, rows) for version, _, rows in versions_and_data(tmp_path / "a")] == expected
    assert site.verify("a") == []


def test_a_delete_subscription_sees_deletes_only(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, {"gone": 'tables = ["usr", "member"]\noperations = ["delete"]'},
                {"a": "gone"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')", "INSERT INTO {usr} VALUES (2, 'Bob', NULL)")
    site.change("UPDATE {usr} SET lname = 'Li' WHERE idu = 1", "DELETE FROM {usr} WHERE idu = 2")

    site.check_out("a")

    assert [(tag, key.split(",")[0]) for tag, key, _ in site.operations("a")] == [("delete", "idu=2")]


def test_subscription_settings_are_checked(tmp_path):
    def load(body: str) -> None:
        path = tmp_path / "c.toml"
        path.write_text(body, encoding="utf-8")
        load_config(path)

    with pytest.raises(ConfigError, match=r"subscribers.v.subscription: expected a \[subscriptions.NAME\] \(hr\)"):
        load('[subscriptions.hr]\ntables = ["usr"]\n[subscribers.v]\nsubscription = "nope"\noutput = "o"\n')
    with pytest.raises(ConfigError, match="subscriptions.hr.tables: expected the tables it tracks"):
        load("[subscriptions.hr]\ntables = []\n")
    with pytest.raises(ConfigError, match="subscriptions.hr.operations: expected some of 'insert'"):
        load('[subscriptions.hr]\ntables = ["usr"]\noperations = ["upsert"]\n')
    with pytest.raises(ConfigError, match="subscriptions.hr.columns.grp: not one of the subscription's tables"):
        load('[subscriptions.hr]\ntables = ["usr"]\ncolumns = { grp = ["a"] }\n')
    with pytest.raises(ConfigError, match="subscriptions.hr.tables: 'usr' is named twice"):
        load('[subscriptions.hr]\ntables = ["usr", "USR"]\n')
    with pytest.raises(ConfigError, match="subscribers.v.output: 'out' is also output.directory"):
        load('[subscriptions.hr]\ntables = ["usr"]\n[subscribers.v]\nsubscription = "hr"\noutput = "out"\n')
    with pytest.raises(ConfigError, match=r"subscribers.w.output: .* is also subscribers.v.output"):
        load('[subscriptions.hr]\ntables = ["usr"]\n[subscribers.v]\nsubscription = "hr"\noutput = "x"\n'
             '[subscribers.w]\nsubscription = "hr"\noutput = "./x"\n')
    broker = 'broker = "nats://127.0.0.1:4222"\nenabled = true\n'
    with pytest.raises(ConfigError, match=r"subscribers.v.formats.messages.broker_subject: 'publisher' is also "
                                          r"output.messages.broker_subject; every reader sends to subjects of its own"):
        load(f'[output.messages]\n{broker}[subscriptions.hr]\ntables = ["usr"]\n[subscribers.v]\n'
             f'subscription = "hr"\noutput = "x"\n[subscribers.v.formats.messages]\n{broker}')
    with pytest.raises(ConfigError, match=r"subscribers: expected a table of named entries"):
        load('subscribers = 3\n')


def test_a_subscription_naming_what_the_database_does_not_publish_is_refused(spark, database, tmp_path, capsys):
    site = Site(spark, database, tmp_path, {"bad": 'tables = ["usr"]\ncolumns = { usr = ["nickname"] }'},
                {"a": "bad"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    capsys.readouterr()
    assert main(["install", "-c", str(site.path), "--table", "usr"]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        "publisher: warning: subscriber a cannot check out until this is put right: subscriptions.bad.columns.usr: "
        "table usr has no column 'nickname' (it has idu, fname, lname)")

    assert main(["poll", "-c", str(site.path), "--subscriber", "a"]) == 2
    assert "subscriptions.bad.columns.usr: table usr has no column 'nickname'" in capsys.readouterr().err
    assert main(["poll", "-c", str(site.path), "--subscriber", "zed"]) == 2
    assert "--subscriber zed: no [subscribers.zed] in the configuration (a)" in capsys.readouterr().err


def test_install_creates_the_state_tables(spark, database, tmp_path, capsys):
    site = Site(spark, database, tmp_path, ALL, {"a": "all"})
    assert main(["install", "-c", str(site.path), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "event_log_subscriber" in shown and "event_log_checkin" in shown
    if database.dialect == "postgresql":  # made by the install; not stated again, it would lock the event log
        assert database.rows(f"SELECT count(*) FROM pg_indexes WHERE schemaname = '{database.schema}' "
                             "AND indexname = 'event_log_transaction_idx'") == [(1,)]
        assert "event_log_transaction_idx" not in shown
    assert database.rows(f"SELECT count(*) FROM {database.qualified('event_log_subscriber')}") == [(0,)]


@pytest.mark.parametrize("failpoint", ["write", "before_acknowledge", "acknowledge"])
def test_a_kill_before_the_check_out_commits_publishes_the_same_operations_again(
    spark, database, tmp_path, failpoint
):
    from test_crash import crash_at

    site = Site(spark, database, tmp_path, ALL, {"a": "all", "b": "all"}, settings="batch_size = 2")
    for transaction in random_changes(site, random.Random(3), 6):
        site.change(*transaction)
    crash_at(failpoint, site.path, tmp_path / "markers", "--subscriber", "a")
    before = site.operations("a")

    again = site.check_out("a")

    operations = site.operations("a")
    assert before and operations[: len(before)] == before
    republished = operations[len(before):]
    assert again["events"] == site.events()
    assert republished[: len(before)] == before, "the same operations under the same event-ids"
    if failpoint != "write":
        assert republished == before
    assert site.check_out("a")["events"] == 0
    assert site.verify("a") == []
    assert site.check_out("b")["events"] == site.events()


def remaining(site: Site) -> list[int]:
    return [int(r[0]) for r in site.db.rows(f"SELECT record_id FROM {site.db.qualified('event_log')} ORDER BY 1")]


def test_purge_never_removes_what_a_subscriber_still_needs(spark, database, tmp_path, capsys):
    site = Site(spark, database, tmp_path, ALL, {"a": "all", "b": "all"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    site.poll()
    site.check_out("a")

    assert main(["purge", "-c", str(site.path)]) == 0
    assert remaining(site) == [1, 2], "b never checked out: it may need every row"
    assert "b never checked out" in capsys.readouterr().err

    site.check_out("b")
    site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")
    site.check_out("a")
    site.poll()
    assert main(["purge", "-c", str(site.path)]) == 0
    assert remaining(site) == [3], "b has not checked out the update"

    site.change("DELETE FROM {usr} WHERE idu = 1")
    assert main(["purge", "-c", str(site.path)]) == 0
    assert remaining(site) == [3, 4], "the status mode has not processed the delete"

    without_b = site.path.read_text(encoding="utf-8").split("[subscribers.b]")[0]
    site.path.write_text(without_b, encoding="utf-8")
    site.check_out("a")
    site.poll()
    assert main(["purge", "-c", str(site.path)]) == 0
    assert remaining(site) == [], "a removed subscriber holds nothing back"


def test_purge_keeps_a_transaction_a_subscriber_has_not_seen_commit(spark, postgresql_database, tmp_path):
    site = Site(spark, postgresql_database, tmp_path, ALL, {"a": "all"}, settings="status_mode = false")
    late = create_engine(postgresql_database.url)
    try:
        with late.connect() as open_session:
            open_session.execute(text(f"INSERT INTO {postgresql_database.qualified('usr')} VALUES (1, 'early', 'x')"))
            site.change("INSERT INTO {usr} VALUES (2, 'later', 'y')")
            site.check_out("a")
            open_session.commit()
        assert main(["purge", "-c", str(site.path)]) == 0
        assert remaining(site) == [1, 2], "only the transaction a checked out went"
        site.check_out("a")
        assert main(["purge", "-c", str(site.path)]) == 0
        assert remaining(site) == []
    finally:
        late.dispose()


def test_delete_processed_rows_waits_for_the_subscribers(spark, database, tmp_path):
    site = Site(spark, database, tmp_path, ALL, {"a": "all"}, settings="delete_processed_rows = true")
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    site.poll()
    assert site.statuses() == {"S"} and remaining(site) == [1, 2], "a has not checked them out"

    site.check_out("a")
    site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")
    site.poll()
    assert remaining(site) == [3], "what a checked out went with the next acknowledgement"

    site.check_out("a")
    assert site.verify("a") == []


def test_stats_shows_each_subscriber(spark, database, tmp_path, capsys):
    import json

    site = Site(spark, database, tmp_path, ALL, {"a": "all", "b": "all"})
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    site.check_out("a")
    site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")
    site.poll()

    assert main(["stats", "-c", str(site.path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["subscribers"]
    assert {name: (s["waiting"], s["holding_back"], s["last_check_out"] is None) for name, s in report.items()} == {
        "a": (1, 1, False), "b": (3, 3, True),
    }
    assert report["b"]["oldest_waiting_age_seconds"] >= 0
    assert main(["stats", "-c", str(site.path)]) == 0
    shown = capsys.readouterr().out
    assert "subscriber b (subscription all):\n  waiting 3 events, the oldest of" in shown
    assert "last check-out: never" in shown and "holds back retention: yes, 3 rows" in shown


def test_run_serves_every_subscriber_and_one_failing_stops_no_other(spark, database, tmp_path):
    import time

    site = Site(spark, database, tmp_path, {**ALL, "bad": 'tables = ["usr"]\ncolumns = { usr = ["nickname"] }'},
                {"a": "all", "broken": "bad"}, settings="polling_interval = 0.3")
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')")
    log_path = tmp_path / "run.log"
    with publisher_run(site.path, log_path) as run:
        deadline = time.monotonic() + 120
        while not (site.operations("a") and site.operations()) and time.monotonic() < deadline:
            assert run.poll() is None, log_path.read_text()
            time.sleep(0.3)
        site.change("UPDATE {usr} SET fname = 'Anne' WHERE idu = 1")
        while len(site.operations("a")) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert len(site.operations("a")) == 2, log_path.read_text()
    log = log_path.read_text()
    assert "subscriber broken stopped: subscriptions.bad.columns.usr: table usr has no column 'nickname'" in log
    assert run.returncode == 1, log
    assert site.verify("a") == [] and site.verify() == []


def test_a_subscriber_before_install_is_told_to_install(spark, database, tmp_path, capsys):
    site = Site(spark, database, tmp_path, ALL, {"a": "all"})
    site.db.execute(f"DROP TABLE {database.qualified('event_log_subscriber')}")

    for command in (["poll", "--subscriber", "a"], ["checkin", "--subscriber", "a", "-e", "SELECT 1"],
                    ["stats"], ["purge"]):
        assert main([command[0], "-c", str(site.path), *command[1:]]) == 2, command
        assert "event_log_subscriber does not exist" in capsys.readouterr().err


def test_checkin_runs_a_file_of_statements_as_one_transaction(spark, database, tmp_path, capsys):
    site = Site(spark, database, tmp_path, ALL, {"vault": "all", "hr": "all"})
    usr = database.qualified("usr")
    script = tmp_path / "changes.sql"
    script.write_text(f"INSERT INTO {usr} VALUES (1, 'semi;colon', 'it''s');\n"
                      f"UPDATE {usr}\n   SET lname = 'a;b' WHERE idu = 1;\n", encoding="utf-8")
    assert main(["checkin", "-c", str(site.path), "--subscriber", "vault", "-f", str(script)]) == 0
    script.write_text(f"INSERT INTO {usr} VALUES (2, 'x', 'y');\nINSERT INTO {usr} VALUES (2, 'dup', 'y');\n",
                      encoding="utf-8")
    assert main(["checkin", "-c", str(site.path), "--subscriber", "vault", "-f", str(script)]) == 1
    assert "failed, nothing was changed or checked in:" in capsys.readouterr().err
    assert main(["checkin", "-c", str(site.path), "--subscriber", "vault", "-f", str(tmp_path / "none.sql")]) == 2
    assert "none.sql" in capsys.readouterr().err

    assert database.rows(f"SELECT idu, fname, lname FROM {usr}") == [(1, "semi;colon", "a;b")]
    assert site.check_out("vault")["events"] == 0
    assert site.check_out("hr")["events"] == site.events() == 3
    assert site.verify("hr") == []


def test_record_ids_out_of_commit_order_are_still_checked_out(spark, postgresql_database, tmp_path):
    """A sequence with a cache gives each session a block of ids: a transaction begun after a
    check-out can log ids below the ones that check-out saw."""
    site = Site(spark, postgresql_database, tmp_path, ALL, {"a": "all"})
    site.db.execute(f"ALTER TABLE {postgresql_database.qualified('event_log')} ALTER COLUMN record_id SET CACHE 50")
    early, late = create_engine(postgresql_database.url), create_engine(postgresql_database.url)
    usr = postgresql_database.qualified("usr")
    try:
        with early.connect() as first, late.connect() as second:
            first.execute(text(f"INSERT INTO {usr} VALUES (1, 'first block', NULL)"))
            first.commit()
            second.execute(text(f"INSERT INTO {usr} VALUES (2, 'second block', NULL)"))
            second.commit()
            assert site.check_out("a")["events"] == 2
            first.execute(text(f"UPDATE {usr} SET fname = 'again from the first block' WHERE idu = 1"))
            first.commit()
        ids = [int(r[0]) for r in site.db.rows(f"SELECT record_id FROM {site.db.qualified('event_log')} ORDER BY 1")]
        assert ids[1] < ids[2], "the update took an id below the check-out's highest"
        assert site.check_out("a")["events"] == 1
    finally:
        early.dispose()
        late.dispose()
    assert site.verify("a") == []


def test_a_sqlite_event_log_that_reuses_ids_is_refused(spark, sqlite_database, tmp_path, capsys):
    site = Site(spark, sqlite_database, tmp_path, ALL, {"a": "all"})
    site.db.execute("DROP TABLE event_log", "CREATE TABLE event_log (record_id INTEGER PRIMARY KEY, status CHAR(1), "
                    "event_type INTEGER, event_time TIMESTAMP, perpetrator TEXT, table_name TEXT, table_key TEXT, "
                    "column_name TEXT, old_value TEXT, new_value TEXT, transaction_id TEXT)")

    assert main(["poll", "-c", str(site.path), "--subscriber", "a"]) == 2
    assert "record_id is not AUTOINCREMENT" in capsys.readouterr().err


def test_a_check_out_repeated_with_another_query_limit_takes_the_same_window(spark, database, tmp_path, monkeypatch):
    """A window written and not acknowledged is kept: a publisher started again with another
    query_limit (a deployment, the soak) repeats it under the same event-ids, instead of cutting
    the events anew, which gave an operation an event-id the consumer had never seen for a change
    it had applied (a second <add> of an object)."""
    from publisher.subscriptions import checkout

    site = Site(spark, database, tmp_path, ALL, {"a": "all"}, settings="query_limit = 100")
    site.change("INSERT INTO {usr} VALUES (1, 'Ann', 'Lee')", "INSERT INTO {usr} VALUES (2, 'Bo', 'Ng')")
    site.check_out("a")
    site.change("UPDATE {usr} SET fname = 'Di' WHERE idu = 2")
    site.change("UPDATE {usr} SET lname = 'Oz' WHERE idu = 2")
    site.change("DELETE FROM {usr} WHERE idu = 1")
    site.change("INSERT INTO {usr} VALUES (1, 'Cy', 'Oz')")
    first = len(site.operations("a"))

    def lost(*args, **kwargs):
        raise ConnectionError("the database went away before the check-out advanced")

    with monkeypatch.context() as patched:
        patched.setattr(checkout.CheckOutState, "advance", lost)
        with pytest.raises(Exception, match="went away"):
            site.check_out("a")
    tried = site.operations("a")[first:]
    assert tried
    site.config = dataclasses.replace(site.config, publisher=dataclasses.replace(site.config.publisher, query_limit=1))
    while site.check_out("a")["events"]:
        pass
    repeated = site.operations("a")[first + len(tried):]
    assert repeated == tried, "the same operations under the same event-ids"
    assert site.verify("a") == []
