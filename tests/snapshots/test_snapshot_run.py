"""`publisher.initial_snapshot`: `run` loads a new consumer from the rows the tables already hold,
once, and a snapshot a stop interrupted is continued rather than started again."""
from __future__ import annotations

import subprocess
import sys

import pytest
from harness import Harness, drain, publisher_run
from test_poison import cli_env, site_config, statuses, wait_for

from publisher.config.loading import load_config
from publisher.database import connect
from publisher.service.mirror import check
from publisher.snapshots.snapshot import initial_snapshot, snapshot


class Stop(Exception):
    pass


def stop_in_usr(table, rows, total, seconds):
    """A progress callback that stops a snapshot after its first chunk of usr, as a crash would."""
    if table == "usr":
        raise Stop


def two_tables(spark, database, tmp_path) -> Harness:
    h = Harness(spark, database, tmp_path, user="publisher_app", tables=())
    for name in ("grp", "usr"):
        h.db.execute(f"CREATE TABLE {h.table(name)} (id INTEGER PRIMARY KEY, name VARCHAR(64))",
                     *(f"INSERT INTO {h.table(name)} VALUES ({i}, '{name}{i}')" for i in range(1, 11)))
    h.install("grp", "usr")
    return h


def test_stats_never_shows_a_snapshot_more_done_than_its_total(spark, sqlite_database, tmp_path):
    """Rows inserted ahead of a snapshot while it runs are logged too, past the count it began with."""
    from publisher.service.stats import backlog, format_backlog

    h = two_tables(spark, sqlite_database, tmp_path)

    def insert_ahead(table, rows, total, seconds):
        if table == "usr" and rows == 4:
            h.db.execute(*(f"INSERT INTO {h.table('usr')} VALUES ({i}, 'late{i}')" for i in (11, 12)))

    snapshot(h.config, h.engine, tables=["usr"], chunk_rows=4, progress=insert_ahead)
    report = backlog(h.config, h.engine)
    assert [(s["rows_logged"], s["rows_total"]) for s in report["snapshots"]] == [(12, 10)]
    (line,) = [line for line in format_backlog(report).splitlines() if "for status mode" in line]
    assert line.split("for status mode: ")[1].startswith("12 rows (10 when it began), finished ")


def test_initial_snapshot_is_due_once_for_an_empty_consumer(spark, sqlite_database, tmp_path):
    h = two_tables(spark, sqlite_database, tmp_path)
    first = initial_snapshot(h.config, h.engine, h.output)
    assert first is not None and {n: t.rows for n, t in first.tables.items()} == {"grp": 10, "usr": 10}
    drain(h)
    assert check(h.config, h.engine).differences == []
    assert initial_snapshot(h.config, h.engine, h.output) is None  # done: never again


def test_no_initial_snapshot_for_a_consumer_that_has_documents(spark, sqlite_database, tmp_path):
    h = two_tables(spark, sqlite_database, tmp_path)
    h.db.execute(f"UPDATE {h.table('usr')} SET name = 'x' WHERE id = 1")
    drain(h)
    assert list(h.output.glob("*.xml"))
    assert initial_snapshot(h.config, h.engine, h.output) is None


def test_an_interrupted_initial_snapshot_continues_where_it_stopped(spark, sqlite_database, tmp_path):
    h = two_tables(spark, sqlite_database, tmp_path)
    with pytest.raises(Stop):
        snapshot(h.config, h.engine, chunk_rows=4, progress=stop_in_usr)
    again = initial_snapshot(h.config, h.engine, h.output)
    assert again is not None and list(again.tables) == ["usr"]  # grp was finished
    assert again.tables["usr"].resumed_after == "id=4" and again.tables["usr"].rows == 6
    logged = h.db.rows(f"SELECT table_name, table_key FROM {h.table('event_log')}")
    assert len(logged) == len(set(logged)) == 20
    drain(h)
    assert check(h.config, h.engine).differences == []


@pytest.mark.process
def test_run_with_initial_snapshot_loads_the_rows_from_before_install(sqlite_database, tmp_path):
    database = sqlite_database
    config = site_config(database, tmp_path, publisher="initial_snapshot = true\n")
    usr = database.qualified("usr")
    database.execute(f"DROP TABLE {usr}", f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))",
                     *(f"INSERT INTO {usr} VALUES ({i}, 'before{i}')" for i in range(1, 31)))
    subprocess.run([sys.executable, "-m", "publisher.cli", "install", "-c", str(config), "--table", "usr"],
                   check=True, capture_output=True, env=cli_env())
    assert statuses(database) == {}
    log_path = tmp_path / "run.log"
    loaded = load_config(str(config))
    with publisher_run(config, log_path, cli_env()) as run:
        wait_for(lambda: "initial snapshot for the status mode" in log_path.read_text(), run, log_path)
        wait_for(lambda: not check(loaded, connect(loaded)).differences, run, log_path)
    text = log_path.read_text()
    assert run.returncode == 0, text
    assert "initial snapshot for the status mode: 30 rows of 1 tables, 30 written directly, 0 logged" in text
    assert check(loaded, connect(loaded)).differences == []
    assert "N" not in statuses(database).values()


def test_stats_and_metrics_show_a_snapshot_under_way(spark, sqlite_database, tmp_path):
    from publisher.service.metrics import exposition
    from publisher.service.stats import backlog, format_backlog

    h = two_tables(spark, sqlite_database, tmp_path)
    with pytest.raises(Stop):
        snapshot(h.config, h.engine, chunk_rows=4, progress=stop_in_usr)
    report = backlog(h.config, h.engine)
    shown = {s["table"]: (s["rows_logged"], s["rows_total"], s["finished_at"] is None) for s in report["snapshots"]}
    assert shown == {"grp": (10, 10, False), "usr": (4, 10, True)}
    assert "usr                            for status mode: 4 of 10 rows, under way" in format_backlog(report)
    text = exposition(h.config, h.engine)
    assert 'publisher_snapshot_under_way{subscriber="",table="usr"} 1.0' in text
    assert 'publisher_snapshot_rows_logged{subscriber="",table="usr"} 4.0' in text
    assert 'publisher_snapshot_rows_total{subscriber="",table="usr"} 10.0' in text
    assert 'publisher_snapshot_under_way{subscriber="",table="grp"} 0.0' in text
