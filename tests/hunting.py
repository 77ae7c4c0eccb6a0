"""How the property tests run: a fixed, derandomized set of examples in CI, or a hunt.

`PUBLISHER_PROPERTY_EXAMPLES=n` turns every property into a hunt of n random examples. A hunt
keeps what it finds in a Hypothesis example database (`PUBLISHER_HUNT_DATABASE`, by default
`.hypothesis/hunts` under the directory pytest runs in), so a failure found once is tried
first by the next run of the same test and replays, shrunk, as often as needed; and a failing
example prints Hypothesis's reproduction blob (`@reproduce_failure(...)`) beside the case's
DDL and statements. `--hypothesis-seed=N` repeats a whole hunt.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

HUNT = int(os.environ.get("PUBLISHER_PROPERTY_EXAMPLES", "0"))
"""Random examples per property; 0 (CI): each property's own fixed, derandomized count (`budget`)."""

PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
"""Without the explain phase, which traces every line the publisher runs and slows each run
several times over; the printed case says more than its line numbers would."""


def hunt_database() -> DirectoryBasedExampleDatabase:
    return DirectoryBasedExampleDatabase(os.environ.get("PUBLISHER_HUNT_DATABASE", str(Path(".hypothesis/hunts"))))


def load_profile() -> None:
    """One profile for every property of the suite, loaded by the conftest before any test
    module: no deadline (a property is no timing test, and a loaded CI machine made one fail),
    no health check on speed, and no explain phase; in CI derandomized and keeping nothing, in
    a hunt random, kept in the hunt database, a failure printed with its reproduction blob."""
    common: dict[str, Any] = {"deadline": None, "phases": PHASES, "suppress_health_check": [HealthCheck.too_slow]}
    settings.register_profile("ci", derandomize=True, database=None, **common)
    settings.register_profile("hunt", derandomize=False, database=hunt_database(), print_blob=True, **common)
    settings.load_profile("hunt" if HUNT else "ci")


def budget(examples: int) -> int:
    """A property's examples: its own fixed count in CI, HUNT in a hunt."""
    return HUNT or examples


def property_settings(examples: int) -> dict[str, Any]:
    """Keyword arguments of `hypothesis.settings` for a property over a database fixture of
    `examples` examples: the profile's, with the fixture reused across examples (each example
    resets what it uses) and large generated schemas allowed."""
    return {"max_examples": examples,
            "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                      HealthCheck.data_too_large]}
