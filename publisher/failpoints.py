"""Named points where a test can stop the process dead, to prove a crash at any step loses nothing.

Off unless the environment variable PUBLISHER_FAILPOINT names a point. The environment is read
once per process, so an unarmed point costs one cached lookup and a string comparison.

Points: ``after_read`` (driver, events read), ``query_back`` (executor, first SELECT of a chunk
run), ``write`` (executor, first document renamed into place), ``changes`` (driver, first
change-table file or message file renamed into place), ``before_acknowledge`` (driver,
documents and rejects written), ``acknowledge`` (driver, inside the status transaction after
its first statement, or the transaction that advances a subscriber's check-out, before commit).

PUBLISHER_POISON_RECORD_IDS names rows whose reading fails (`check_poisoned`), wherever they are
read, to prove a row that fails a stage is isolated and the rest published.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Iterable
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
    """At the armed point, add a line to `<name>.reached` for the watching test and wait to be
    killed. Every thread or process that reaches the point adds its own line, so a test can wait
    until all of its workers stand still before the kill."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    with open(armed[1] / f"{name}.reached", "a", encoding="ascii") as marker:
        marker.write(f"{os.getpid()} {threading.get_ident()}\n")
        marker.flush()
        os.fsync(marker.fileno())
    while True:
        time.sleep(60)


POISON_ENV = "PUBLISHER_POISON_RECORD_IDS"
"""Record_ids (comma-separated) whose reading fails, as a row a library cannot take would."""


class InjectedError(ValueError):
    """The failure a poisoned record_id causes."""


@functools.cache
def _poisoned() -> frozenset[int]:
    return frozenset(int(part) for part in os.environ.get(POISON_ENV, "").split(",") if part.strip())


def check_poisoned(record_ids: Iterable[int]) -> None:
    """Fail the read of a batch that holds a record_id named in PUBLISHER_POISON_RECORD_IDS."""
    poisoned = _poisoned()
    if not poisoned:
        return
    found = sorted(poisoned.intersection(record_ids))
    if found:
        raise InjectedError(f"injected failure reading record_id {found[0]}")
