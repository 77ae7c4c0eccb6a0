"""What an operator sees: no Spark or JVM start-up chatter, one warning at start about tables the
event log names that are not published, one log line per active cycle, as text or JSON."""
from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from publisher.cli import main

CHATTER = (
    "NativeCodeLoader",
    "Using Spark's default log4j profile",
    "Setting default log level",
    "sc.setLogLevel",
    "Using incubator modules",
    "jdk.incubator.vector",
    "WARN Utils",
    "Closing down clientserver connection",
)
ENV = {**os.environ, "PYSPARK_PYTHON": sys.executable}


def config_file(tmp_path: Path, publisher: str = "", spark: str = "") -> Path:
    database = tmp_path / "ops.db"
    path = tmp_path / "publisher.toml"
    path.write_text(
        f'[database]\nurl = "sqlite:///{database}"\nschema = "indirect"\n'
        f'[output]\ndirectory = "{tmp_path / "out"}"\n'
        f'[publisher]\n{publisher}\n[spark]\nmaster = "local[2]"\n{spark}\n',
        encoding="utf-8",
    )
    change(tmp_path, "CREATE TABLE usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64))",
           "CREATE TABLE grp (name VARCHAR(64) PRIMARY KEY, descr VARCHAR(64))")
    return path


def change(tmp_path: Path, *statements: str, **values: str) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'ops.db'}")
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement), values)
    engine.dispose()


def log_by_hand(tmp_path: Path, table: str, key: str) -> None:
    change(tmp_path, "INSERT INTO event_log (status, event_type, table_name, table_key, column_name, new_value) "
                     f"VALUES ('N', 1, '{table}', '{key}', 'descr', 'x')")


def publisher(*arguments: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "publisher.cli", *arguments], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def assert_no_chatter(err: str) -> None:
    for line in err.splitlines():
        assert not any(noise in line for noise in CHATTER), line


@pytest.mark.process
def test_demo_prints_no_spark_or_jvm_chatter(tmp_path):
    done = publisher("demo", "--directory", str(tmp_path / "demo"))
    assert done.returncode == 0, done.stderr
    assert '<add class-name="usr"' in done.stdout
    assert_no_chatter(done.stderr)
    assert done.stderr.strip() == ""


@pytest.mark.process
def test_install_and_a_spark_poll_print_no_chatter_and_warn_once_about_unpublished_tables(tmp_path):
    config = str(config_file(tmp_path, 'tables = ["usr"]', "small_cycle_events = 0"))
    installed = publisher("install", "-c", config, "--table", "usr")
    assert installed.returncode == 0, installed.stderr
    assert_no_chatter(installed.stderr)
    change(tmp_path, "INSERT INTO usr VALUES (1, 'Jack')")
    log_by_hand(tmp_path, "grp", "name=a")
    log_by_hand(tmp_path, "audit", "id=1")

    polled = publisher("poll", "-c", config)
    assert polled.returncode == 0, polled.stderr
    assert json.loads(polled.stdout)["path"] == "spark"
    assert_no_chatter(polled.stderr)
    warnings = [line for line in polled.stderr.splitlines() if "not published" in line]
    assert len(warnings) == 1, polled.stderr
    assert unpublished_listed(polled.stderr) == ["'audit': does not exist", "'grp': not in publisher.tables"]


def unpublished_listed(err: str) -> list[str]:
    """The tables the start-up warning lists, one per line below it."""
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if "not published" in line)
    return [line.strip() for line in itertools.takewhile(lambda line: line.startswith("  "), lines[start + 1:])]


@pytest.mark.process
def test_the_unpublished_tables_are_quoted_one_a_line_and_a_missing_one_does_not_exist(tmp_path):
    config = str(config_file(tmp_path))
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    hostile = "person; DROP TABLE role; --"
    log_by_hand(tmp_path, "grp", "name=a")
    change(tmp_path, "INSERT INTO event_log (status, event_type, table_name, table_key, column_name, new_value) "
                     "VALUES ('N', 1, :table, 'id=1', 'descr', 'x')", table=hostile)
    polled = publisher("poll", "-c", config)
    assert polled.returncode == 0, polled.stderr
    assert unpublished_listed(polled.stderr) == ["'grp': has no publisher triggers", f"{hostile!r}: does not exist"]
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    reasons = {r["table_name"]: r["reason"] for r in rejected}
    assert reasons[hostile] == f"table {hostile!r} does not exist in the database"

    log_by_hand(tmp_path, "grp", "name=b")
    polled = publisher("poll", "-c", config)
    (warning,) = [line for line in polled.stderr.splitlines() if "not published" in line]
    assert warning.endswith("new rows of the event log name table 'grp', which is not published "
                            "(has no publisher triggers): a cycle marks them E")


def test_stats_lists_the_unpublished_tables(tmp_path, capsys):
    config = str(config_file(tmp_path))
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    change(tmp_path, "INSERT INTO usr VALUES (1, 'Jack')")
    log_by_hand(tmp_path, "grp", "name=a")
    capsys.readouterr()

    assert main(["stats", "-c", config, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["unpublished_tables"] == {"grp": "has no publisher triggers"}

    assert main(["stats", "-c", config]) == 0
    shown = capsys.readouterr().out
    heading, *listed = shown.split("not published", 1)[1].splitlines()
    unpublished = [line.split() for line in listed if line.startswith("  ")]
    assert unpublished == [["'grp'", "has", "no", "publisher", "triggers"]]


def test_stats_lists_nothing_when_every_table_is_published(tmp_path, capsys):
    config = str(config_file(tmp_path, 'tables = ["USR", "grp"]'))
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    change(tmp_path, "INSERT INTO usr VALUES (1, 'Jack')")
    log_by_hand(tmp_path, "Grp", "name=a")
    capsys.readouterr()
    assert main(["stats", "-c", config, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unpublished_tables"] == {}
    assert main(["stats", "-c", config]) == 0
    assert "not published" not in capsys.readouterr().out


def run_until(tmp_path: Path, config: str, inserts: list[str], *options: str) -> str:
    """`publisher run` at a short interval: each insert once the previous one is published, then
    some idle cycles, then SIGTERM; returns its stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "publisher.cli", "run", "-c", config, *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )
    out = tmp_path / "out"
    try:
        for number, statement in enumerate(inserts, start=1):
            change(tmp_path, statement)
            deadline = time.monotonic() + 120
            while len(list(out.glob("*.xml"))) < number:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "nothing published within 120 s"
                time.sleep(0.2)
        time.sleep(2)  # several idle cycles at the 0.2 s interval
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    return err


INSERTS = [f"INSERT INTO usr VALUES ({n}, 'user {n}')" for n in (1, 2, 3)]


@pytest.mark.process
def test_run_warns_once_and_logs_one_text_line_per_active_cycle(tmp_path):
    config = str(config_file(tmp_path, "polling_interval = 0.2"))
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    log_by_hand(tmp_path, "grp", "name=a")
    err = run_until(tmp_path, config, INSERTS)
    assert_no_chatter(err)
    warnings = [line for line in err.splitlines() if "not published" in line]
    assert len(warnings) == 1, err
    assert "WARNING" in warnings[0] and "table 'grp', which is not published (has no publisher triggers)" in warnings[0]
    cycles = [line for line in err.splitlines() if " INFO cycle {" in line]
    assert 3 <= len(cycles) <= 4, err  # the grp row may be taken with the first insert, or before it
    summaries = [json.loads(line.split(" INFO cycle ", 1)[1]) for line in cycles]
    assert all(s["events"] > 0 for s in summaries)
    assert sum(s["events"] for s in summaries) == 4
    assert sum(s["statuses"].get("E", 0) for s in summaries) == 1


@pytest.mark.process
def test_run_logs_json_lines_and_says_nothing_when_every_table_is_published(tmp_path):
    config = str(config_file(tmp_path, "polling_interval = 0.2"))
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    change(tmp_path, "INSERT INTO usr VALUES (9, 'before the start')")
    err = run_until(tmp_path, config, INSERTS[:2], "--log-format", "json")
    lines = [json.loads(line) for line in err.splitlines()]
    assert lines, err
    for line in lines:
        assert {"time", "level", "message"} <= line.keys()
        assert line["time"].endswith("+00:00")
    assert not [line for line in lines if line["level"] == "WARNING"], err
    cycles = [line for line in lines if line["message"] == "cycle"]
    assert len(cycles) == 2, err
    assert all(c["level"] == "INFO" and c["path"] == "driver" and c["documents"] == 1 for c in cycles)
    assert sum(c["events"] for c in cycles) == 3
    assert any(line["message"] == "stopped" for line in lines)


def test_why_a_table_is_not_published_is_an_enum_shown_as_its_text(tmp_path, capsys):
    from publisher.config.loading import load_config
    from publisher.database import connect
    from publisher.service.stats import Unpublished, format_backlog, unpublished_tables

    path = config_file(tmp_path, 'tables = ["usr"]')
    assert main(["install", "-c", str(path), "--table", "usr"]) == 0
    log_by_hand(tmp_path, "grp", "name=a")
    config = load_config(path, environ={})
    found = unpublished_tables(config, connect(config))
    assert found == {"grp": Unpublished.NOT_CONFIGURED} and isinstance(found["grp"], Unpublished)
    capsys.readouterr()
    assert main(["stats", "-c", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unpublished_tables"] == {"grp": "not in publisher.tables"}
    shown = format_backlog({"event_log": "event_log", "statuses": {}, "new_by_table": {}, "subscribers": {},
                            "unpublished_tables": found, "oldest_new_event_time": None})
    assert "grp" in shown and shown.rstrip().endswith("not in publisher.tables")


def log_as(tmp_path: Path, perpetrator: str, *keys: str) -> None:
    for key in keys:
        change(tmp_path, "INSERT INTO event_log (status, event_type, perpetrator, table_name, table_key, column_name, "
                         "new_value) VALUES ('N', 1, :perpetrator, 'usr', :key, 'fname', 'x')",
               perpetrator=perpetrator, key=key)


def waiting(tmp_path: Path) -> int:
    """The event log's N rows."""
    engine = create_engine(f"sqlite:///{tmp_path / 'ops.db'}")
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM event_log WHERE status = 'N'")).scalar_one())
    finally:
        engine.dispose()


def config_as_app(tmp_path: Path, publisher: str = "") -> str:
    """A configuration whose publisher's own database user is `app`."""
    path = config_file(tmp_path, publisher)
    path.write_text(path.read_text(encoding="utf-8").replace("[database]\n", '[database]\nuser = "app"\n'),
                    encoding="utf-8")
    return str(path)


LOOPBACK_ADVICE = ("give the publisher a database user of its own (database.user and the URL's user), or set "
                   "publisher.allow_loopback = true to publish the application's changes")


def test_a_poll_that_passes_over_every_row_as_loopback_says_so_and_stats_counts_them(tmp_path, capsys):
    config = config_as_app(tmp_path)
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    log_as(tmp_path, "app", "idu=1", "idu=2")
    capsys.readouterr()
    assert main(["poll", "-c", config]) == 0
    polled = capsys.readouterr()
    assert json.loads(polled.out)["loopback"] == 2
    assert polled.err == ("publisher: warning: 2 rows (every row the cycle read) passed over as loopback, marked S "
                          "and published nowhere: their perpetrator 'app' equals database.user = 'app'. If the "
                          f"application writes as this user, {LOOPBACK_ADVICE}\n")

    log_as(tmp_path, "app", "idu=3")
    log_as(tmp_path, "alice", "idu=4")
    assert main(["poll", "-c", config]) == 0
    assert "loopback" not in capsys.readouterr().err  # not every row: said by run over its cycles, not here

    assert main(["stats", "-c", config, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["loopback_by_table"] == {"usr": 3}
    assert main(["stats", "-c", config]) == 0
    shown = capsys.readouterr().out.split("passed over as loopback", 1)[1].splitlines()
    assert [line.split() for line in shown[1:]] == [["'usr'", "3"]]


def test_loopback_names_the_connections_user_when_database_user_is_not_set():
    from publisher.config.loading import load_config
    from publisher.database import connect
    from publisher.service.loopback import loopback_said, own_user_said

    config = load_config(None, environ={}, overrides=['database.url="postgresql://app@localhost/idm"'])
    engine = connect(config)
    assert own_user_said(config, engine) == ("database.user is not set: changes logged by the connection's user "
                                             "'app' are taken as the publisher's own (loopback) and not published")
    assert loopback_said(config, engine, {"app": 1, " APP": 2}, "of 5 read").startswith(
        "3 rows (of 5 read) passed over as loopback, marked S and published nowhere: their perpetrator ' APP', 'app' "
        "equals database.user, which is not set, so the connection's user 'app' is taken.")
    allowed = load_config(None, environ={}, overrides=['database.url="postgresql://app@localhost/idm"',
                                                       "publisher.allow_loopback=true"])
    assert own_user_said(allowed, connect(allowed)) is None
    sqlite = load_config(None, environ={}, overrides=['database.url="sqlite:///x.db"'])
    assert own_user_said(sqlite, connect(sqlite)) is None


@pytest.mark.process
def test_run_says_at_once_what_it_starts_and_how_long_the_start_took_and_when_most_rows_loop_back(tmp_path):
    config = config_as_app(tmp_path, "polling_interval = 0.2")
    assert main(["install", "-c", config, "--table", "usr"]) == 0
    process = subprocess.Popen([sys.executable, "-m", "publisher.cli", "run", "-c", config],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        log_as(tmp_path, "alice", "idu=1")
        log_as(tmp_path, "app", "idu=2", "idu=3")
        deadline = time.monotonic() + 120
        while waiting(tmp_path):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        log_as(tmp_path, "app", "idu=4")
        time.sleep(2)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    lines = err.splitlines()
    assert lines[0].endswith(f"INFO starting: configuration {config}, database sqlite:///{tmp_path / 'ops.db'}, "
                             "for the status mode; Spark starts before the first cycle")
    (first,) = [line for line in lines if "the first cycle starts" in line]
    seconds = float(first.rsplit("starts, ", 1)[1].split(" s ")[0])
    assert 0 < seconds < 300 and first.endswith(" s after the start")
    warnings = [line for line in lines if "passed over as loopback" in line]
    assert len(warnings) == 1, err
    assert re.search(r"WARNING 2 rows \(of 3 read by the last [123] cycles?\) passed over as loopback, marked S and "
                     r"published nowhere: their perpetrator 'app' equals database.user = 'app'\.", warnings[0]), err
    assert warnings[0].endswith(LOOPBACK_ADVICE)
