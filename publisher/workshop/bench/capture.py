"""`publisher bench --capture`: what the capture triggers cost the application's own statements.

An application table of four columns (an integer key, a text, an integer and a timestamp) is
seeded with `ROWS` rows, and `CLIENTS` clients run one transaction after another for a fixed
time: two UPDATEs of existing keys, the INSERT of a new key and the DELETE of an old one. Each
client owns the keys `slot * CLIENTS + client + 1` and keeps a window of `ROWS / CLIENTS` slots:
its t-th transaction updates two slots of the window [t, t + window), inserts slot t + window
and deletes slot t. So every UPDATE finds its row, no INSERT collides, no two clients lock one
row, and the table keeps its size.

The mix runs without triggers, with field-style capture and with row-style capture, installed
by `install_capture` as `publisher install` does; the three alternate, round after round, in a
rotating order, and each run starts from a fresh table and an emptied event log. Each database
runs it its own way (its workshop's mix: a benchmark client's scripts, or Python threads, one
connection each). A failed
transaction stops the benchmark: it would make the transactions per second lie.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from publisher.databases.workbench import Workbench
from publisher.workshop.bench.capture_mix import (
    CLIENTS,
    CONFIGURATIONS,
    NATIVE,
    ROWS,
    CaptureBenchError,
    Configuration,
    Run,
    Target,
)
from publisher.workshop.databases import mixing, named, native_capture

SCHEMA = "capture_bench"
"""The schema (a database, where the server has no schemas inside one) the benchmark creates and drops."""


@dataclass(frozen=True)
class CaptureOptions:
    database: str | None = None
    """The database's name; None: the first in the registry with concurrent writers."""
    url: str | None = None
    seconds: int = 20
    rounds: int = 3
    schema: str = SCHEMA

    @property
    def mixed(self) -> Workbench:
        """The database the mix runs on."""
        return named(self.database) if self.database is not None else mixing()[0]

    @property
    def database_url(self) -> str:
        return self.url or str(self.mixed.bench_url)


@dataclass(frozen=True)
class CaptureReport:
    options: CaptureOptions
    runs: tuple[Run, ...]

    @property
    def configurations(self) -> tuple[Configuration, ...]:
        """What was measured, in the order of the first round."""
        return tuple(dict.fromkeys(c for c in (*CONFIGURATIONS, *NATIVE) if self.runs_of(c)))

    def runs_of(self, configuration: Configuration) -> list[Run]:
        return [r for r in self.runs if r.configuration == configuration]

    def median_tps(self, configuration: Configuration) -> float:
        return round(statistics.median(r.tps for r in self.runs_of(configuration)), 1)

    def events(self, configuration: Configuration) -> int:
        return sum(r.events for r in self.runs_of(configuration))

    def events_per_transaction(self, configuration: Configuration) -> float:
        transactions = sum(r.transactions for r in self.runs_of(configuration))
        return round(self.events(configuration) / transactions, 2) if transactions else 0.0

    def slowdown(self, style: Configuration) -> float:
        """How many times slower than without triggers: the median tps shown, divided."""
        return round(self.median_tps("none") / self.median_tps(style), 2)

    def summary(self) -> dict[str, Any]:
        return {
            "database": self.options.mixed.name,
            "seconds": self.options.seconds,
            "rounds": self.options.rounds,
            "clients": CLIENTS,
            "rows": ROWS,
            "configurations": {c: self._configuration(c) for c in self.configurations},
            "slowdown": {c: self.slowdown(c) for c in self.configurations if c != "none"},
        }

    def _configuration(self, configuration: Configuration) -> dict[str, Any]:
        return {
            "median_tps": self.median_tps(configuration),
            "events": self.events(configuration),
            "events_per_transaction": self.events_per_transaction(configuration),
            "runs": [r.summary() for r in self.runs_of(configuration)],
        }


def format_capture_report(report: CaptureReport) -> str:
    options = report.options
    lines = [
        f"capture cost on {options.mixed.name}: {CLIENTS} clients, {options.rounds} round(s) of {options.seconds} s, "
        f"{ROWS} rows; each transaction: 2 UPDATEs, 1 INSERT, 1 DELETE",
        f"{'configuration':<14}{'median tps':>12}{'slowdown':>10}{'events/tx':>11}   tps per round",
    ]
    for configuration in report.configurations:
        slowdown = 1.0 if configuration == "none" else report.slowdown(configuration)
        rounds = " ".join(f"{r.tps:.1f}" for r in report.runs_of(configuration))
        lines.append(
            f"{configuration:<14}{report.median_tps(configuration):>12.1f}{slowdown:>9.2f}x"
            f"{report.events_per_transaction(configuration):>11.2f}   {rounds}"
        )
    lines.append("slowdown: median tps without triggers / median tps with the style's triggers")
    if native_capture(options.mixed) and not report.runs_of("native-field"):
        lines.append("native capture not measured: its library is not installed on the server (`make native`)")
    return "\n".join(lines)


def run_capture_bench(options: CaptureOptions) -> CaptureReport:
    target = _target(options)
    runs = []
    with target.schema():
        configurations = target.configurations()
        for round_number in range(1, options.rounds + 1):
            for configuration in rotated(configurations, round_number - 1):
                runs.append(target.measure(configuration, round_number, options.seconds))
    return CaptureReport(options, tuple(runs))


def rotated(configurations: tuple[Configuration, ...], by: int) -> tuple[Configuration, ...]:
    """Each round starts with another configuration, so none always runs on a warmer server."""
    by %= len(configurations)
    return configurations[by:] + configurations[:by]


def _target(options: CaptureOptions) -> Target:
    mix = options.mixed.capture_mix()
    if mix is None:
        raise CaptureBenchError(f"{options.mixed.name} has no concurrent writers to measure")
    return Target(options.database_url, options.schema, mix)
