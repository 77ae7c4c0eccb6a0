"""A poison row never halts the log: a row a stage fails on, twice the same way, is isolated by
bisecting the window, rejected, and the rest published; `poll` says such a failure in one line
and `run` keeps serving.

The poison is injected: PUBLISHER_POISON_RECORD_IDS makes the reading of those rows fail
(`failpoints.check_poisoned`), wherever they are read.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DIALECTS, TestDatabase, on_each_database_in_turn
from harness import Harness, publisher_run
from sqlalchemy.exc import OperationalError

from publisher import failpoints
from publisher.errors import StageFailedError
from publisher.outputs.cycle_files import WINDOW_FILE
from publisher.pipeline.poison import FAILURE_FILE, is_row_failure, narrow

OWN_USER = "publisher_app"


def poison(monkeypatch: pytest.MonkeyPatch, *record_ids: int) -> None:
    monkeypatch.setenv(failpoints.POISON_ENV, ",".join(str(r) for r in record_ids))
    failpoints._poisoned.cache_clear()


@pytest.fixture(autouse=True)
def _clean_poison():
    yield
    failpoints._poisoned.cache_clear()


def adds(h: Harness, *idus: int) -> list[int]:
    return h.log(*((1, "usr", f"idu={idu}", "fname", None, f"name {idu}") for idu in idus))


def test_narrowing_finds_each_failing_row_and_rows_that_fail_only_together():
    tried: list[list[int]] = []

    def fails_with(bad: set[int]):
        def fails(ids):
            tried.append(list(ids))
            return bool(bad.intersection(ids))
        return fails

    assert narrow(list(range(1, 101)), fails_with({37})) == [37]
    assert len(tried) <= 2 * 7
    assert narrow(list(range(1, 101)), fails_with({3, 98})) == [3, 98]
    together = narrow([1, 2, 3, 4], lambda ids: {2, 3} <= set(ids))
    assert together == [1, 2, 3, 4]


def test_only_a_row_stage_failing_on_its_own_is_taken_for_a_poison_row():
    assert is_row_failure(StageFailedError("read_and_classify", "ArrowInvalid: straddling object"))
    assert not is_row_failure(StageFailedError("write", "ValueError: bad"))
    away = StageFailedError("resolve", "could not connect to server")
    assert not is_row_failure(away)
    try:
        raise StageFailedError("read_and_classify", "x") from OperationalError("SELECT", {}, Exception("gone"))
    except StageFailedError as exc:
        assert not is_row_failure(exc)
    # the COPY read's own driver, and the machine: none of them is a row's doing
    import psycopg
    for cause in (psycopg.OperationalError("terminating connection"), MemoryError()):
        try:
            raise StageFailedError("read_and_classify", type(cause).__name__) from cause
        except StageFailedError as exc:
            assert not is_row_failure(exc), cause
    for text in ("out of memory", "deadlock detected", "canceling statement due to conflict with recovery"):
        assert not is_row_failure(StageFailedError("resolve", text)), text


def test_a_row_that_fails_its_stage_twice_is_isolated_and_the_window_publishes(spark, database, tmp_path, monkeypatch):
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = adds(h, 1, 2, 3, 4, 5)
    bad = ids[2]
    poison(monkeypatch, bad)
    with pytest.raises(StageFailedError, match=rf"stage read_and_classify: .*record_id {bad}"):
        h.poll()
    assert set(h.statuses().values()) == {"N"}
    assert (h.output / FAILURE_FILE).exists() and (h.output / WINDOW_FILE).exists()

    result = h.poll()
    assert result.isolation is not None and result.isolation.record_ids == (bad,)
    assert result.statuses == {"S": 4, "E": 1} and result.rejected == 1
    assert h.statuses() == {rid: "E" if rid == bad else "S" for rid in ids}
    (line,) = h.rejects()
    assert line["record_id"] == bad and line["table_key"] == "idu=3"
    assert "stage read_and_classify failed on this row twice" in line["reason"]
    assert f"record_id {bad}" in line["reason"]
    published = {association for _, association, _ in h.published().describe()}
    assert published == {h.association(f"idu={n}") for n in (1, 2, 4, 5)}
    assert not (h.output / FAILURE_FILE).exists() and not (h.output / WINDOW_FILE).exists()
    assert h.poll().idle


def test_a_failure_that_differs_the_second_time_is_not_isolated(spark, sqlite_database, tmp_path, monkeypatch):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    first, second = adds(h, 1, 2)
    poison(monkeypatch, first)
    with pytest.raises(StageFailedError):
        h.poll()
    poison(monkeypatch, second)
    with pytest.raises(StageFailedError, match=f"record_id {second}"):
        h.poll()
    assert set(h.statuses().values()) == {"N"} and h.rejects() == []


def test_a_window_whose_every_row_fails_is_isolated_whole_and_the_log_goes_on(spark, sqlite_database, tmp_path,
                                                                               monkeypatch):
    """One statement's rows carrying one bad value make such a window: holding it back would halt
    the log for good, since a kept window takes no new row."""
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = adds(h, 1, 2, 3)
    poison(monkeypatch, *ids)
    with pytest.raises(StageFailedError, match=f"record_id {ids[0]}"):
        h.poll()
    assert h.poll().isolation.record_ids == tuple(ids)
    assert h.statuses() == {rid: "E" for rid in ids}
    (later,) = adds(h, 4)
    assert h.poll().statuses == {"S": 1}
    assert h.statuses()[later] == "S"


def test_an_environment_failure_while_bisecting_marks_nothing(spark, sqlite_database, tmp_path, monkeypatch):
    """A trial that fails because the database went away says nothing of its rows: the isolation
    ends with nothing marked, and the next cycle (the row's failure still remembered) isolates the
    poison row alone."""
    from publisher.pipeline import cycle

    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    ids = adds(h, *range(1, 9))
    poison(monkeypatch, ids[2])
    with pytest.raises(StageFailedError):
        h.poll()
    real = cycle._read_and_resolve
    calls = []

    def blip(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            gone = OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly"))
            raise StageFailedError("read_and_classify", "server closed the connection unexpectedly") from gone
        return real(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(cycle, "_read_and_resolve", blip)
        with pytest.raises(StageFailedError, match="server closed"):
            h.poll()
    assert set(h.statuses().values()) == {"N"} and h.rejects() == []
    assert h.poll().isolation.record_ids == (ids[2],)
    assert h.statuses() == {rid: "E" if rid == ids[2] else "S" for rid in ids}


def test_a_subscriber_skips_a_poison_row_into_its_rejects(spark, subscriber_database, tmp_path, monkeypatch):
    from test_subscriptions import ALL, Site

    site = Site(spark, subscriber_database, tmp_path, ALL, {"hr": "all"})
    site.change("INSERT INTO {usr} VALUES (1, 'a', NULL)")
    site.change("INSERT INTO {usr} VALUES (2, 'b', NULL)")
    site.change("INSERT INTO {usr} VALUES (3, 'c', NULL)")
    log = subscriber_database.qualified("event_log")
    rows = subscriber_database.rows(f"SELECT record_id, table_key FROM {log} ORDER BY record_id")
    bad = next(rid for rid, key in rows if key == "idu=2")
    poison(monkeypatch, bad)
    with pytest.raises(StageFailedError):
        site.check_out("hr")
    summary = site.check_out("hr")
    assert summary["events"] == len(rows)
    keys = {association.split(",")[0] for _, association, _ in site.operations("hr")}
    assert keys == {"idu=1", "idu=3"}
    rejects = (tmp_path / "hr" / "rejects.jsonl").read_text(encoding="utf-8")
    assert f'"record_id": {bad}' in rejects and "failed on this row twice" in rejects
    assert site.statuses() == {"N"}, "a subscriber writes no status"
    assert site.check_out("hr")["events"] == 0


def site_config(database: TestDatabase, tmp_path: Path, publisher: str = "", spark: str = "") -> Path:
    """usr under capture and a configuration publishing it."""
    schema = f'schema = "{database.schema}"\n' if database.schema else ""
    path = tmp_path / "publisher.toml"
    path.write_text(
        f'[database]\nurl = "{database.url}"\n{schema}user = "{OWN_USER}"\n'
        f'[publisher]\npolling_interval = 0.3\n{publisher}[output]\ndirectory = "{tmp_path / "out"}"\n'
        f'[spark]\nmaster = "local[1]"\n{spark}',
        encoding="utf-8",
    )
    database.execute(f"CREATE TABLE {database.qualified('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))")
    subprocess.run([sys.executable, "-m", "publisher.cli", "install", "-c", str(path), "--table", "usr"],
                   check=True, capture_output=True, env=cli_env())
    return path


def cli_env(**extra: str) -> dict[str, str]:
    """The code under test, where PYTHONPATH does not name it already."""
    root = str(Path(__file__).parents[2])
    path = os.environ.get("PYTHONPATH") or root
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path, **extra}


def insert(database: TestDatabase, *idus: int) -> list[int]:
    """Rows inserted through the triggers; the record_ids they logged."""
    log = database.qualified("event_log")
    before = database.rows(f"SELECT coalesce(max(record_id), 0) FROM {log}")[0][0]
    database.execute(*(f"INSERT INTO {database.qualified('usr')} VALUES ({i}, 'n{i}')" for i in idus))
    return [int(r[0]) for r in database.rows(f"SELECT record_id FROM {log} WHERE record_id > {before} "
                                              "ORDER BY record_id")]


def statuses(database: TestDatabase) -> dict[int, str]:
    rows = database.rows(f"SELECT record_id, status FROM {database.qualified('event_log')}")
    return {int(rid): status for rid, status in rows}


@pytest.mark.parametrize(("database", "path"), [(d, "driver") for d in DIALECTS]
                         + on_each_database_in_turn([("spark",)], first="postgresql"), indirect=["database"])
@pytest.mark.process
def test_poll_says_a_stage_failure_in_one_line_and_the_next_poll_isolates_the_row(database, tmp_path, path):
    small = "" if path == "driver" else "small_cycle_events = 0\n"
    config = site_config(database, tmp_path, spark=small)
    ids = insert(database, 1, 2, 3)
    bad = ids[1]
    env = cli_env(**{failpoints.POISON_ENV: str(bad)})
    poll = [sys.executable, "-m", "publisher.cli", "poll", "-c", str(config)]
    first = subprocess.run(poll, capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in first.stderr.splitlines() if line.strip()]
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    assert len(lines) == 1 and lines[0].startswith("publisher: cycle failed in stage read_and_classify: ")
    assert lines[0].endswith(f"injected failure reading record_id {bad}")
    assert set(statuses(database).values()) == {"N"}

    second = subprocess.run(poll, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr
    assert f"row {bad} isolated: stage read_and_classify failed on it twice" in second.stderr
    assert statuses(database) == {rid: "E" if rid == bad else "S" for rid in ids}


@pytest.mark.process
def test_run_isolates_a_poison_row_once_and_keeps_serving(database, tmp_path):
    from test_metrics import free_port, scrape, value

    port = free_port()
    config = site_config(database, tmp_path)
    with config.open("a", encoding="utf-8") as handle:
        handle.write(f"[metrics]\nport = {port}\n")
    ids = insert(database, 1, 2, 3)
    bad = ids[0]
    log_path = tmp_path / "run.log"
    with publisher_run(config, log_path, cli_env(**{failpoints.POISON_ENV: str(bad)})) as run:
        wait_for(lambda: "N" not in statuses(database).values(), run, log_path)
        assert statuses(database) == {rid: "E" if rid == bad else "S" for rid in ids}
        later = insert(database, 4)
        wait_for(lambda: all(statuses(database)[rid] == "S" for rid in later), run, log_path)
        wait_for(lambda: scrape(port) is not None, run, log_path)
        found = scrape(port) or {}
        assert value(found, "publisher_isolated_rows_total", subscriber="") == 1
        assert value(found, "publisher_acknowledged_rows_total", subscriber="", status="E") == 1
    text = log_path.read_text()
    assert run.returncode == 0, text
    assert "Traceback" not in text
    assert text.count("isolated: stage read_and_classify failed on it twice") == 1, text
    failed = [line for line in text.splitlines() if "cycle failed" in line]
    assert len(failed) == 1 and f"record_id {bad}" in failed[0] and "retrying in" in failed[0], text


def wait_for(condition, run: subprocess.Popen, log_path: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert run.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.3)


def event_ids(output: Path) -> list[tuple[str, int]]:
    from lxml import etree

    documents = [etree.parse(str(p)).getroot() for p in sorted(output.glob("*.xml"))]
    return [(op.findtext("association").split(",")[0], int(op.get("event-id")))
            for doc in documents for op in doc.find("input")]


@pytest.mark.process
def test_a_crash_after_isolating_repeats_exactly_the_other_rows(database, tmp_path, monkeypatch):
    """The kept window's promise holds across an isolation: the repeat takes the rows the
    crashed try took, less the isolated one, which is rejected and acknowledged once."""
    from test_crash import crash_at

    config = site_config(database, tmp_path)
    ids = insert(database, 1, 2, 3, 4)
    bad = ids[1]
    monkeypatch.setenv(failpoints.POISON_ENV, str(bad))
    poll = [sys.executable, "-m", "publisher.cli", "poll", "-c", str(config)]
    assert subprocess.run(poll, capture_output=True, env=cli_env(), timeout=300).returncode == 1
    crash_at("before_acknowledge", config, tmp_path / "markers")
    assert statuses(database) == {rid: "E" if rid == bad else "N" for rid in ids}
    first_try = event_ids(tmp_path / "out")
    assert {key for key, _ in first_try} == {"idu=1", "idu=3", "idu=4"}
    (later,) = insert(database, 5)

    repeat = subprocess.run(poll, capture_output=True, text=True, env=cli_env(), timeout=300)
    assert repeat.returncode == 0, repeat.stderr
    assert statuses(database) == {**{rid: "E" if rid == bad else "S" for rid in ids}, later: "N"}
    assert event_ids(tmp_path / "out") == first_try + first_try
    rejects = (tmp_path / "out" / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(rejects) == 1 and f'"record_id": {bad}' in rejects[0]
    assert subprocess.run(poll, capture_output=True, env=cli_env(), timeout=300).returncode == 0
    assert statuses(database)[later] == "S"
