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

from hypothesis import HealthCheck, Phase
from hypothesis.database import DirectoryBasedExampleDatabase

HUNT = int(os.environ.get("PUBLISHER_PROPERTY_EXAMPLES", "0"))
"""Random examples per property; 0 (CI): each property's own fixed, derandomized count."""

PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
"""Without the explain phase, which traces every line the publisher runs and slows each run
several times over; the printed case says more than its line numbers would."""


def hunt_database() -> DirectoryBasedExampleDatabase:
    return DirectoryBasedExampleDatabase(os.environ.get("PUBLISHER_HUNT_DATABASE", str(Path(".hypothesis/hunts"))))


def property_settings(examples: int) -> dict[str, Any]:
    """Keyword arguments of `hypothesis.settings` for a property of `examples` examples (in a
    hunt, HUNT or a share of it): in CI derandomized and keeping nothing; in a hunt random,
    kept in the hunt database, a failure printed with its reproduction blob."""
    hunting = {"derandomize": False, "database": hunt_database(), "print_blob": True} if HUNT else \
        {"derandomize": True, "database": None}
    return {"max_examples": examples, "deadline": None, "phases": PHASES,
            "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                      HealthCheck.data_too_large], **hunting}
