"""`publisher bench --targets` at tiny sizes on PostgreSQL: one run gives every ratio the targets
name, each against a floor measured in it, in the table and in the JSON alike."""
from __future__ import annotations

import json
import re

import pytest
from conftest import DIALECTS, POSTGRES_URL

from publisher.cli import main
from publisher.workshop.bench import targets
from publisher.workshop.bench.targets import TargetsOptions, format_targets_report, run_targets

pytestmark = pytest.mark.skipif("postgresql" not in DIALECTS, reason="measured on PostgreSQL only")

ROWS = (r"cold `poll` process / floor", r"warm drain / floor", r"change tables \+ messages / XDS only, same log",
        r"capture field, s per transaction / no triggers", r"capture row, s per transaction / no triggers",
        r"snapshot --direct of 200 rows / \(COPY \+ write, fsync\)")
TARGETS = (3.0, 3.0, 1.3, 1.3, 1.2, 2.0)
"""The targets issue 60 sets, in the order of the rows."""


@pytest.fixture(scope="module")
def report(spark):
    options = TargetsOptions(url=POSTGRES_URL, rows=200, events=500, query_limit=200, seconds=1, rounds=1,
                             master="local[2]")
    return run_targets(options, spark)


def test_the_table_has_every_measure_with_its_floor_and_their_ratio(report) -> None:
    text = format_targets_report(report)
    number = r"([0-9.e+-]+)"
    for name, target in zip(ROWS, TARGETS, strict=True):
        found = re.search(rf"^{name} +{number} +{number} +{number}x +{number}x +(yes|NO)$", text, re.MULTILINE)
        assert found, f"no row {name!r} in\n{text}"
        seconds, floor, ratio, shown_target = (float(found.group(i)) for i in range(1, 5))
        assert seconds > 0 and floor > 0
        assert ratio == pytest.approx(seconds / floor, rel=0.002, abs=0.0006)
        assert shown_target == target
        assert found.group(5) == ("yes" if seconds / floor <= target else "NO") or abs(seconds / floor - target) < 0.01
    assert re.search(r"machine: \d+ cores, load average [0-9.]+ / [0-9.]+ / [0-9.]+ at the start, "
                     r"[0-9.]+ / [0-9.]+ / [0-9.]+ at the end", text)


def test_the_measures_are_the_runs_own_figures(report) -> None:
    """Each row divides what the sub-benchmarks measured, not figures of their own."""
    d, s = report.drain.summary(), report.snapshot.summary()
    cold, warm, formats, field, row, snapshot = report.measures
    assert cold.seconds == pytest.approx(d["cold"]["seconds"], abs=0.001)
    assert cold.floor_seconds == warm.floor_seconds == pytest.approx(d["floor"]["seconds"], abs=0.001)
    assert warm.seconds == formats.floor_seconds == pytest.approx(d["drain"]["seconds"], abs=0.001)
    assert formats.seconds == pytest.approx(d["formats_beside"]["drain"]["seconds"], abs=0.001)
    assert d["formats_beside"]["drain"]["events"] == d["drain"]["events"] == 500, "the same log, twice"
    tps = {c: v["median_tps"] for c, v in report.capture.summary()["configurations"].items()}
    assert field.ratio == pytest.approx(tps["none"] / tps["field"], rel=0.01)
    assert row.ratio == pytest.approx(tps["none"] / tps["row"], rel=0.01)
    assert snapshot.floor_seconds == pytest.approx(s["floor"]["seconds"] + s["write_floor"]["seconds"], abs=0.002)
    assert s["write_floor"]["bytes_written"] > 0 and s["complete"] is True


def test_the_json_carries_the_same_table(report, monkeypatch, capsys) -> None:
    given = []
    monkeypatch.setattr(targets, "run_targets", lambda options: given.append(options) or report)
    assert main(["bench", "--targets", "--json", "--url", POSTGRES_URL, "--rows", "200", "--events", "500",
                 "--seconds", "1", "--rounds", "1"]) == 0
    assert given == [TargetsOptions(url=POSTGRES_URL, rows=200, events=500, seconds=1, rounds=1)]
    printed = json.loads(capsys.readouterr().out)
    measures = printed["measures"]
    assert [m["measure"] for m in measures] == [m.name for m in report.measures]
    for m in measures:
        assert m["floor_seconds"] > 0 and m["ratio"] == pytest.approx(m["seconds"] / m["floor_seconds"])
        assert m["met"] is (m["ratio"] <= m["target"])
    assert [m["target"] for m in measures] == list(TARGETS)
    machine = printed["machine"]
    assert machine["cores"] > 0 and len(machine["load_at_start"]) == len(machine["load_at_end"]) == 3


@pytest.mark.parametrize(("argv", "why"), [
    (["--targets", "--capture"], "choose one"),
    (["--targets", "--snapshot"], "choose one"),
    (["--targets", "--url", "sqlite:///x.db"], "postgresql only"),
    (["--targets", "--database", "mariadb"], "postgresql only"),
])
def test_targets_bench_refuses_what_it_cannot_measure(capsys, argv: list[str], why: str) -> None:
    assert main(["bench", *argv]) == 2
    assert why in capsys.readouterr().err
