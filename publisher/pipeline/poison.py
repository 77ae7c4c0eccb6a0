"""Poison rows: rows a cycle fails on, again and again, whatever the database and the output do.

A stage that reads or resolves rows (`ROW_STAGES`) failing twice the same way on the same
window is taken for a row's doing, not the environment's: the window is narrowed by record_id
until it holds the row(s) that fail alone, which are then rejected (status `E`, or a
subscriber's rejects) with the failure as the reason, and the rest of the window is published.
A failure that says the database or the output is away (`is_row_failure`) is never isolated:
it is retried until it passes.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JNetworkError
from sqlalchemy import Engine, select
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, TimeoutError

from publisher.dialects import dialect_of, families
from publisher.errors import StageFailedError
from publisher.outputs.durable import write_atomically
from publisher.pipeline.event_log import event_log_table_of, role_columns
from publisher.pipeline.window import CycleWindow, window_predicate

FAILURE_FILE = ".publisher-failure"
"""In the output directory: the last failure of a row stage, on which window."""
ROW_STAGES = ("read_and_classify", "resolve")
"""The stages whose work depends on the rows' values; the others write what those gave."""
_ENVIRONMENT = (
    OSError, MemoryError, OperationalError, InterfaceError, DisconnectionError, TimeoutError, Py4JNetworkError,
)
"""Failures that say the database, the output or the machine failed; with the drivers' own
(`Dialect.environment_errors`), since the COPY read uses the driver's cursor directly."""
_AWAY = re.compile(
    r"OperationalError|InterfaceError|MemoryError|connection|could not connect|timed? ?out|No space left|"
    r"Permission denied|Python worker exited unexpectedly|OutOfMemory|out of memory|Killed|deadlock|"
    r"conflict with recovery|SSL",
    re.IGNORECASE,
)
"""A failure, reported from a Spark executor as text, that says the environment failed."""
_NOISE = re.compile(r"0x[0-9a-fA-F]+|\b(?:TID|task|stage|partition) [0-9.]+", re.IGNORECASE)
"""What differs between two attempts that fail the same way: addresses, Spark's task numbers."""


@dataclass(frozen=True)
class Isolation:
    """Rows rejected because a stage failed on them."""

    record_ids: tuple[int, ...]
    stage: str
    reason: str

    def summary(self) -> dict[str, Any]:
        return {"record_ids": list(self.record_ids), "stage": self.stage, "reason": self.reason}


@functools.cache
def _environment() -> tuple[type[BaseException], ...]:
    return _ENVIRONMENT + tuple(error for dialect in families() for error in dialect.environment_errors())


def is_row_failure(exc: StageFailedError) -> bool:
    """A failure in a row stage that does not say the database or the output is away."""
    cause = exc.__cause__
    while isinstance(cause, StageFailedError):
        cause = cause.__cause__
    if exc.stage not in ROW_STAGES or isinstance(cause, _environment()):
        return False
    return not _AWAY.search(exc.reason)


class FailureMemory:
    """The last row-stage failure, kept in the output directory so that `poll` run again (or
    `run` restarted) knows it is the second."""

    def __init__(self, output: Path, window: CycleWindow) -> None:
        self.path = output / FAILURE_FILE
        self.key = _window_key(window)

    def repeated(self, exc: StageFailedError) -> bool:
        """True when the window failed the same way before (`_NOISE` aside)."""
        try:
            kept = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return bool(kept == self._entry(exc))

    def remember(self, exc: StageFailedError) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(self._entry(exc)).encode("utf-8"))

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    def _entry(self, exc: StageFailedError) -> dict[str, Any]:
        return {"window": self.key, "stage": exc.stage, "reason": _NOISE.sub("#", exc.reason)}


def _window_key(window: CycleWindow) -> str:
    """The window's rows, without its URL (it may carry a password)."""
    check_out = None if window.check_out is None else asdict(window.check_out)
    return json.dumps([window.table, window.schema, window.lo, window.hi, window.cutoff_record_id,
                       list(window.excluded), check_out], default=str)


def narrow(record_ids: Sequence[int], fails: Callable[[Sequence[int]], bool]) -> list[int]:
    """The rows of `record_ids` (which fail together) that fail alone; where neither half of a
    part fails alone (the rows fail only together), that part."""
    if len(record_ids) <= 1:
        return list(record_ids)
    half = len(record_ids) // 2
    found: list[int] = []
    for part in (record_ids[:half], record_ids[half:]):
        if fails(part):
            found += narrow(part, fails)
    return found or list(record_ids)


def window_ids(engine: Engine, window: CycleWindow) -> list[int]:
    """The record_ids the window reads, in order: small numbers only, whatever the rows hold."""
    table = _table(window)
    record_id = role_columns(table, window.columns)["record_id"]
    predicate = window_predicate(window, table, window.lo, window.hi, engine.dialect.name)
    with engine.connect() as conn:
        return [int(r) for r in conn.execute(select(record_id).where(predicate).order_by(record_id)).scalars()]


def rejects_of(engine: Engine, window: CycleWindow, isolation: Isolation) -> list[dict[str, Any]]:
    """The isolated rows' lines for rejects.jsonl. Their values are not read (reading them may
    be what fails): the row's identity and the reason are."""
    table = _table(window)
    c = role_columns(table, window.columns)
    found = dialect_of(engine)
    shown = ("event_type", "event_time", "perpetrator", "table_name", "table_key", "column_name")
    columns = [found.text_as_read(c[role]) for role in shown]
    with engine.connect() as conn:
        rows = conn.execute(
            select(c["record_id"], *columns).where(c["record_id"].in_(isolation.record_ids)).order_by(c["record_id"])
        ).all()
    reason = f"isolated: stage {isolation.stage} failed on this row twice: {isolation.reason}"
    lines = []
    for row in rows:
        values = {role: _text(value) for role, value in zip(shown, row[1:], strict=True)}
        lines.append({"record_id": int(row[0]), **values, "old_value": None, "new_value": None, "reason": reason})
    return lines


def _text(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return None if value is None else str(value)


def _table(window: CycleWindow) -> Any:
    extra = () if window.transaction_column is None else (window.transaction_column,)
    return event_log_table_of(window.table, window.columns + extra, window.schema)

