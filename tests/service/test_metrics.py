"""Prometheus metrics: what `publisher run` serves over HTTP while it drains a backlog, what
`publisher stats --prometheus` prints, and the `[metrics]` settings.

The expected values come from the backlog each test logs: the changes it makes through the real
triggers and the rows it writes into the event log by hand.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import TestDatabase
from harness import publisher_run
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event, text

from publisher.cli import main
from publisher.config import STATUS_MODE, ConfigError, PublicationMode
from publisher.config.loading import load_config
from publisher.database import connect
from publisher.service.loop import run_forever
from publisher.service.metrics import PublisherMetrics

OWN_USER = "publisher_app"
"""The publisher's own database user in these tests: the rows logged as it are loopback."""
OLD_TIME = "2020-01-01 12:00:00"
"""The event time of the hand-written rejected row, the oldest N row before the drain."""
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_site(database: TestDatabase, tmp_path: Path, extra: str = "") -> Path:
    """usr with rows 10 and 11 logged before capture, the triggers installed, and a configuration."""
    schema = f'schema = "{database.schema}"\n' if database.schema else ""
    path = tmp_path / "publisher.toml"
    path.write_text(
        f'[database]\nurl = "{database.url}"\n{schema}user = "{OWN_USER}"\n'
        f'[publisher]\npolling_interval = 0.3\n[output]\ndirectory = "{tmp_path / "out"}"\n'
        f'[spark]\nmaster = "local[1]"\n{extra}',
        encoding="utf-8",
    )
    usr = database.qualified("usr")
    database.execute(f"CREATE TABLE {usr} (idu INTEGER PRIMARY KEY, fname VARCHAR(64))",
                     f"INSERT INTO {usr} VALUES (10, 'Ten')", f"INSERT INTO {usr} VALUES (11, 'Eleven')")
    assert main(["install", "-c", str(path), "--table", "usr"]) == 0
    return path


def log_backlog(database: TestDatabase) -> int:
    """Two adds, a modify and a delete through the triggers, a malformed row by `mallory` and a
    row by the publisher's own user; the number of event log rows."""
    usr, log = database.qualified("usr"), database.qualified("event_log")
    database.execute(
        f"INSERT INTO {usr} VALUES (1, 'One')",
        f"INSERT INTO {usr} VALUES (2, 'Two')",
        f"UPDATE {usr} SET fname = 'Ten!' WHERE idu = 10",
        f"DELETE FROM {usr} WHERE idu = 11",
        f"INSERT INTO {log} (status, event_type, event_time, perpetrator, table_name, table_key) "
        f"VALUES ('N', 9, '{OLD_TIME}', 'mallory', 'usr', 'idu=1')",
        f"INSERT INTO {log} (status, event_type, perpetrator, table_name, table_key, column_name, new_value) "
        f"VALUES ('N', 2, '{OWN_USER}', 'usr', 'idu=10', 'fname', 'Loop')",
    )
    return int(database.rows(f"SELECT count(*) FROM {log}")[0][0])


def samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return samples(response.read().decode("utf-8"))
    except (urllib.error.URLError, ConnectionError):
        return None


def age_bounds(text: str) -> tuple[float, float]:
    """The least and greatest age a time of day could have, in whatever zone it was read."""
    at = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    age = (dt.datetime.now(dt.UTC) - at).total_seconds()
    return age - 86400, age + 86400


@pytest.mark.process
def test_run_serves_metrics_that_follow_the_drain(database, tmp_path):
    port = free_port()
    config = make_site(database, tmp_path, f"[metrics]\nport = {port}\n")
    events = log_backlog(database)
    started = time.time()
    log_path = tmp_path / "run.log"
    history: list[Samples] = []
    with publisher_run(config, log_path) as run:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert run.poll() is None, log_path.read_text()
            found = scrape(port)
            if found is not None:
                history.append(found)
                if value(found, "publisher_events_read_total", subscriber="") == events and \
                        value(found, "publisher_waiting_events", subscriber="") == 0:
                    break
            time.sleep(0.2)
    assert history, log_path.read_text()
    first, last = history[0], history[-1]
    assert value(first, "publisher_event_log_rows", status="N", table="usr") == events
    assert value(first, "publisher_waiting_events", subscriber="") == events
    assert value(first, "publisher_events_read_total", subscriber="") == 0
    low, high = age_bounds(OLD_TIME)
    assert low < (value(first, "publisher_lag_seconds", subscriber="") or 0) < high

    assert value(last, "publisher_events_read_total", subscriber="") == events, log_path.read_text()
    assert value(last, "publisher_event_log_rows", status="N", table="usr") is None
    assert value(last, "publisher_waiting_events", subscriber="") == 0
    assert value(last, "publisher_lag_seconds", subscriber="") == 0
    kinds = {kind: value(last, "publisher_operations_total", subscriber="", kind=kind)
             for kind in ("add", "modify", "delete")}
    assert kinds == {"add": 2, "modify": 1, "delete": 1}
    assert value(last, "publisher_acknowledged_rows_total", subscriber="", status="E") == 1
    assert value(last, "publisher_acknowledged_rows_total", subscriber="", status="S") == events - 1
    assert value(last, "publisher_event_log_rows", status="E", table="usr") == 1
    assert value(last, "publisher_rejected_rows", table="usr", perpetrator="mallory") == 1
    assert value(last, "publisher_loopback_rows", table="usr", perpetrator=OWN_USER) == 1
    assert started < (value(last, "publisher_last_success_timestamp_seconds", subscriber="") or 0) <= time.time()
    assert value(last, "publisher_consecutive_failures", subscriber="") == 0
    assert value(last, "publisher_lock_held", subscriber="") == 1
    assert value(last, "publisher_event_log_up") == 1
    assert (value(last, "publisher_cycle_stage_duration_seconds_count", subscriber="", stage="acknowledge") or 0) >= 1
    assert run.returncode == 0, log_path.read_text()


def test_stats_prometheus_prints_the_event_log_before_and_after_a_poll(database, tmp_path, capsys):
    """With a subscriber where the database serves them (MariaDB does not: see test_mariadb)."""
    readers = ("",) if database.dialect == "mariadb" else ("", "vault")
    subscribers = f'[subscriptions.all]\ntables = ["usr"]\n[subscribers.vault]\nsubscription = "all"\n' \
        f'output = "{tmp_path / "vault"}"\n' if "vault" in readers else ""
    config = make_site(database, tmp_path, subscribers)
    events = log_backlog(database)
    capsys.readouterr()

    assert main(["stats", "-c", str(config), "--prometheus"]) == 0
    before = samples(capsys.readouterr().out)
    assert value(before, "publisher_event_log_rows", status="N", table="usr") == events
    assert value(before, "publisher_waiting_events", subscriber="") == events
    assert value(before, "publisher_waiting_events", subscriber="vault") == (events if "vault" in readers else None)
    low, high = age_bounds(OLD_TIME)
    for reader in readers:
        assert low < (value(before, "publisher_lag_seconds", subscriber=reader) or 0) < high
    assert value(before, "publisher_rejected_rows", table="usr", perpetrator="mallory") is None
    assert not any(name.startswith("publisher_events_read") for name, _ in before)

    assert main(["poll", "-c", str(config)]) == 0
    if "vault" in readers:
        assert main(["poll", "-c", str(config), "--subscriber", "vault"]) == 0
    capsys.readouterr()
    assert main(["stats", "-c", str(config), "--prometheus"]) == 0
    after = samples(capsys.readouterr().out)
    assert value(after, "publisher_event_log_rows", status="N", table="usr") is None
    assert value(after, "publisher_event_log_rows", status="S", table="usr") == events - 1
    assert value(after, "publisher_rejected_rows", table="usr", perpetrator="mallory") == 1
    assert value(after, "publisher_loopback_rows", table="usr", perpetrator=OWN_USER) == 1
    for reader in readers:
        assert value(after, "publisher_waiting_events", subscriber=reader) == 0
        assert value(after, "publisher_lag_seconds", subscriber=reader) == 0


def test_stats_prometheus_fails_like_stats_when_the_event_log_cannot_be_read(tmp_path, capsys):
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "none.db"}"\n', encoding="utf-8")
    assert main(["stats", "-c", str(path), "--prometheus"]) == 1
    captured = capsys.readouterr()
    assert "no such table: event_log" in captured.err and "publisher_event_log_up" not in captured.out


@pytest.mark.parametrize("setting", ["port = -1", "port = 65536", 'port = "9464"', "port = true",
                                     'port = 9464\naddress = " "'])
def test_a_bad_metrics_setting_names_its_key(tmp_path, setting):
    path = tmp_path / "publisher.toml"
    path.write_text(f"[metrics]\n{setting}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^metrics\.(port|address): "):
        load_config(path, environ={})


def test_metrics_are_off_unless_a_port_is_set(tmp_path):
    assert load_config(None, environ={}).metrics.port == 0
    config = load_config(None, environ={"PUBLISHER_METRICS_PORT": "9464"})
    assert (config.metrics.port, config.metrics.address) == (9464, "127.0.0.1")


def test_run_on_a_port_in_use_exits_2_naming_the_setting(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        path = tmp_path / "publisher.toml"
        path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n'
                        f"[metrics]\nport = {taken.getsockname()[1]}\n", encoding="utf-8")
        assert main(["install", "-c", str(path)]) == 0
        assert main(["run", "-c", str(path)]) == 2
    assert "metrics.port: cannot serve metrics on 127.0.0.1:" in capsys.readouterr().err


def test_failures_count_up_until_a_cycle_succeeds(tmp_path):
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n[publisher]\npolling_interval = 0.01\n'
                    f'[output]\ndirectory = "{tmp_path}"\n', encoding="utf-8")
    assert main(["install", "-c", str(path)]) == 0
    config = load_config(path, environ={})
    metrics = PublisherMetrics(config, connect(config))
    reader = metrics.reader(STATUS_MODE)
    stop = threading.Event()
    seen: list[float | None] = []

    class Idle:
        idle, events, windows = True, 0, ()

        def summary(self) -> dict[str, int]:
            return {}

    def cycle(*_: object) -> Idle:
        seen.append(metrics.registry.get_sample_value("publisher_consecutive_failures", {"subscriber": ""}))
        if len(seen) <= 3:
            raise OSError("output away")
        stop.set()
        return Idle()

    run_forever(None, None, config, stop, cycle, tmp_path, reader)  # type: ignore[arg-type]
    assert seen == [0, 1, 2, 3]
    assert metrics.registry.get_sample_value("publisher_consecutive_failures", {"subscriber": ""}) == 0
    assert metrics.registry.get_sample_value("publisher_last_success_timestamp_seconds", {"subscriber": ""}) > 0


def test_a_cycle_counts_its_operations_by_kind_on_either_path(spark, cycle_path, database, tmp_path):
    from lxml import etree

    from publisher.pipeline.cycle import run_cycle

    path = make_site(database, tmp_path)
    small = "0" if cycle_path == "spark" else "20000"
    config = load_config(path, environ={}, overrides=[f"spark.small_cycle_events={small}"])
    log_backlog(database)
    result = run_cycle(spark, connect(config), config)
    assert result.distributed == (cycle_path == "spark")
    assert result.operation_kinds == {"add": 2, "modify": 1, "delete": 1}
    tags = [element.tag for name in result.files
            for element in etree.parse(str(tmp_path / "out" / name)).find("input")]
    assert {kind: tags.count(kind) for kind in ("add", "modify", "delete")} == result.operation_kinds


def test_the_dashboard_and_the_metrics_reference_name_only_metrics_that_are_served(tmp_path):
    import json
    import re

    from prometheus_client import generate_latest

    root = Path(__file__).parents[2]
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n', encoding="utf-8")
    assert main(["install", "-c", str(path)]) == 0
    config = load_config(path, environ={})
    metrics = PublisherMetrics(config, connect(config))
    metrics.reader(STATUS_MODE)
    triggerless = dataclasses.replace(config, publisher=dataclasses.replace(
        config.publisher, publication_mode=PublicationMode.TRIGGERLESS, tables=("usr",)))
    served = set()
    for registry in (metrics.registry, PublisherMetrics(triggerless, connect(config)).registry):
        families = list(text_string_to_metric_families(generate_latest(registry).decode()))
        served |= {family.name + ("_total" if family.type == "counter" else "") for family in families
                   if not family.name.endswith("_created")}
    dashboard = json.loads((root / "examples" / "grafana-dashboard.json").read_text(encoding="utf-8"))
    assert {"datasource"} == {v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"}
    expressions = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    named = set(re.findall(r"publisher_\w+", expressions))
    assert {re.sub(r"_bucket$", "", name) for name in named} <= served
    table = (root / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    assert set(re.findall(r"^\| `(publisher_\w+)`", table, re.MULTILINE)) == served


def collected(collector: Any) -> Samples:
    """One scrape of the collector's gauges."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in collector.collect() for s in family.samples}


def test_a_burst_of_scrapes_reads_the_event_log_once_until_the_cache_time_passes(database, tmp_path, monkeypatch):
    from publisher.service import metrics as metrics_module

    config = load_config(make_site(database, tmp_path), environ={})
    events = log_backlog(database)
    collector = metrics_module.EventLogCollector(config, connect(config))
    statements: list[str] = []
    event.listen(collector.engine, "before_cursor_execute",
                 lambda _conn, _cursor, statement, *_: statements.append(statement))
    real_read = metrics_module.read_groups

    def slow_read(*args: object) -> object:
        time.sleep(0.3)  # every scrape of the burst arrives while the first one reads
        return real_read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_module, "read_groups", slow_read)
    start = threading.Barrier(8)
    answers: list[Samples] = []

    def one_scrape() -> None:
        start.wait()
        answers.append(collected(collector))

    threads = [threading.Thread(target=one_scrape) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 8
    assert len([s for s in statements if "GROUP BY" in s.upper()]) == 1
    assert all(answer == answers[0] for answer in answers)
    assert value(answers[0], "publisher_event_log_up") == 1
    assert value(answers[0], "publisher_waiting_events", subscriber="") == events

    # past the cache time a scrape reads again, and sees what changed meanwhile
    database.execute(f"UPDATE {database.qualified('event_log')} SET status = 'S'")
    monkeypatch.setattr(metrics_module, "EVENT_LOG_CACHE_SECONDS", 0.0)
    later = collected(collector)
    assert len([s for s in statements if "GROUP BY" in s.upper()]) == 2
    assert value(later, "publisher_waiting_events", subscriber="") == 0


def test_scrapes_use_no_connection_of_the_cycles_pool(tmp_path):
    from sqlalchemy.pool import NullPool

    from publisher.service.metrics import EventLogCollector

    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n', encoding="utf-8")
    assert main(["install", "-c", str(path)]) == 0
    config = load_config(path, environ={})
    engine = connect(config)
    checked_out: list[object] = []
    event.listen(engine, "checkout", lambda *args: checked_out.append(args))
    collector = EventLogCollector(config, engine)
    assert isinstance(collector.engine.pool, NullPool)
    assert value(collected(collector), "publisher_event_log_up") == 1
    assert checked_out == []


def test_an_unreadable_event_log_is_logged_once_when_it_starts_and_once_when_it_ends(tmp_path, caplog, monkeypatch):
    import logging

    from publisher.service import metrics as metrics_module

    monkeypatch.setattr(metrics_module, "EVENT_LOG_CACHE_SECONDS", 0.0)  # every scrape reads
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n', encoding="utf-8")
    config = load_config(path, environ={})
    collector = metrics_module.EventLogCollector(config, connect(config))  # no event_log table yet

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics:")]

    with caplog.at_level(logging.INFO, logger="publisher"):
        for _ in range(5):
            assert value(collected(collector), "publisher_event_log_up") == 0
        assert len(said()) == 1 and "no such table" in said()[0]
        assert main(["install", "-c", str(path)]) == 0
        for _ in range(3):
            assert value(collected(collector), "publisher_event_log_up") == 1
        assert len(said()) == 2 and "can be read again" in said()[1]
        with connect(config).begin() as conn:
            conn.execute(text("DROP TABLE event_log"))
        for _ in range(3):
            assert value(collected(collector), "publisher_event_log_up") == 0
    assert len(said()) == 3 and "cannot read the event log" in said()[2]


def test_last_success_is_absent_until_a_cycle_succeeds(tmp_path):
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n', encoding="utf-8")
    config = load_config(path, environ={})
    metrics = PublisherMetrics(config, connect(config))
    reader = metrics.reader(STATUS_MODE)
    reader.lock_held(False)  # a standby waiting for the lock
    labels = {"subscriber": ""}
    assert metrics.registry.get_sample_value("publisher_last_success_timestamp_seconds", labels) is None
    assert metrics.registry.get_sample_value("publisher_consecutive_failures", labels) == 0
    before = time.time()

    class Idle:
        windows = ()

    reader.cycle_succeeded(Idle())
    assert before <= (metrics.registry.get_sample_value("publisher_last_success_timestamp_seconds", labels) or 0)


def port_is_free(port: int) -> bool:
    """Whether a server could listen on the port now (SO_REUSEADDR, as servers set it: the
    closed connections of the scrapes wait out TIME_WAIT, a bound socket does not let go)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
        return True


def test_the_metrics_server_closes_its_port_when_run_ends_by_an_error(tmp_path, monkeypatch):
    import publisher.service.loop as loop

    port = free_port()
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n[output]\ndirectory = "{tmp_path}"\n'
                    f"[metrics]\nport = {port}\n", encoding="utf-8")
    assert main(["install", "-c", str(path)]) == 0
    served: list[Samples | None] = []

    def fail(_: object) -> None:
        served.append(scrape(port))
        raise RuntimeError("no signal handlers here")

    monkeypatch.setattr(loop, "install_stop_handlers", fail)
    with pytest.raises(RuntimeError, match="no signal handlers"):
        main(["run", "-c", str(path)])
    assert served and served[0] is not None  # it was serving when run failed
    assert scrape(port) is None
    assert port_is_free(port)


def test_the_metrics_server_stops_and_frees_the_port_however_its_block_ends(tmp_path):
    from publisher.config import MetricsConfig

    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "sqlite:///{tmp_path / "m.db"}"\n', encoding="utf-8")
    config = load_config(path, environ={})
    metrics = PublisherMetrics(config, connect(config))
    port = free_port()
    with pytest.raises(KeyboardInterrupt):
        with metrics.serving(MetricsConfig(port=port, address="127.0.0.1")):
            assert scrape(port) is not None
            raise KeyboardInterrupt
    assert port_is_free(port)
    with metrics.serving(MetricsConfig(port=port, address="127.0.0.1")):  # the same port again
        assert scrape(port) is not None
    assert port_is_free(port)


LOOPBACK = {" Publisher_App ": 1, "publisher_app\t": 2, "\u00a0PUBLISHER_app": 1, "publi\u017fher_app": 1,
            "publisher_app\u2003": 1}
"""Perpetrators that are the publisher's own user once stripped of whitespace (a tab, a no-break
space, an em space) and case-folded (the long s folds to s), with how many S rows each logs."""
NOT_LOOPBACK = {"publisher_app2": 1, "publisher app": 1, "mallory": 2, "publisher_\u00e4pp": 1}


def test_loopback_rows_are_counted_as_a_cycle_classifies_them(database, tmp_path):
    from publisher.service.metrics import EventLogCollector

    config = load_config(make_site(database, tmp_path), environ={})
    log = database.qualified("event_log")
    with database.engine.begin() as conn:
        for perpetrator, count in {**LOOPBACK, **NOT_LOOPBACK}.items():
            for _ in range(count):
                conn.execute(text(f"INSERT INTO {log} (status, event_type, perpetrator, table_name, table_key) "
                                  "VALUES ('S', 4, :who, 'usr', 'idu=1')"), {"who": perpetrator})
    found = collected(EventLogCollector(config, connect(config)))
    loopback = {dict(labels)["perpetrator"]: n for (name, labels), n in found.items()
                if name == "publisher_loopback_rows"}
    assert loopback == LOOPBACK
