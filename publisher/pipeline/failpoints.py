"""Named points where a test can stop the process dead, to prove a crash at any step loses nothing.

Off unless the environment variable PUBLISHER_FAILPOINT names a point. The environment is read
once per process, so an unarmed point costs one cached lookup and a string comparison.

Points: ``after_read`` (driver, events read), ``query_back`` (executor, first SELECT of a chunk
run), ``write`` (executor, first document renamed into place), ``changes`` (driver, first
change-table file or message file renamed into place), ``before_acknowledge`` (driver,
documents and rejects written), ``acknowledge`` (driver, inside the status transaction after
its first statement, or the transaction that advances a subscriber's check-out, before commit).
"""
from __future__ import annotations

import functools
import os
import time
from pathlib import Path

FAILPOINT_ENV = "PUBLISHER_FAILPOINT"
DIRECTORY_ENV = "PUBLISHER_FAILPOINT_DIR"


@functools.cache
def _armed() -> tuple[str, Path] | None:
    name = os.environ.get(FAILPOINT_ENV)
    if not name:
        return None
    return name, Path(os.environ.get(DIRECTORY_ENV, "."))


def reached(name: str) -> None:
    """At the armed point, leave `<name>.reached` for the watching test and wait to be killed."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    with open(armed[1] / f"{name}.reached", "w", encoding="ascii") as marker:
        marker.write(f"{os.getpid()}\n")
        marker.flush()
        os.fsync(marker.fileno())
    while True:
        time.sleep(60)
