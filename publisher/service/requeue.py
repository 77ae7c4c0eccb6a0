"""`publisher requeue`: put event log rows the status mode set aside (E: rejected, W: object gone)
back to `N` once their cause is fixed, so that the next cycle publishes them.

One transaction: the chosen rows are counted per status and table_name, then each such group is
set back with an UPDATE that repeats the choice and also requires the row's status to be the one
counted, so a row is only ever moved from E or W to N and the printed counts are the rows changed.
No lock is taken: a cycle reads and acknowledges only rows that are `N`, and requeue changes
only rows that are not, so the two never write the same row; a running publisher takes the
requeued rows in its next cycle. The rows of a cycle kept unacknowledged in the output
directory (`.publisher-window`) are left alone: a cycle that is run again must read the same
rows to publish the same operations under the same event-ids.
"""
from __future__ import annotations

import datetime as dt
import getpass
import json
import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Engine, and_, func, not_, select, update

from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.model.events import Status
from publisher.outputs.cycle_files import WINDOW_FILE, pinned_window
from publisher.pipeline.event_log import event_log_table, require_exact_comparison
from publisher.service.event_groups import decoded, summed

log = logging.getLogger("publisher")

REQUEUABLE = (Status.ERROR, Status.WARNING)
"""What may be put back: rows rejected as malformed, and rows whose query-back found no object."""
DEFAULT_STATUSES = (Status.ERROR,)
REQUEUE_LOG = "requeue.jsonl"
"""In the output directory: one JSON line per requeue that changed the event log (not dry runs)."""
NO_TABLE = "(no table_name)"
"""How rows whose table_name is NULL are counted."""

_REFUSED = {
    Status.NEW.value: "those rows are waiting to be published already",
    Status.SUCCESS.value: "those rows were published (or had nothing to publish); putting them back would "
    "publish them again",
    Status.FATAL.value: "F is reserved and never written by this publisher",
}


class RequeueError(ValueError):
    """A requeue that cannot be done as asked (exit 2)."""


def parse_statuses(text: str) -> tuple[Status, ...]:
    """The statuses of one --status argument, a comma list (any case). Only parses: which
    statuses requeue takes is `Selection`'s rule."""
    found: list[Status] = []
    for part in text.split(","):
        value = part.strip().upper()
        if not value:
            raise RequeueError(f"expected E or W (or E,W), got {text!r}")
        status = next((s for s in Status if s.value == value), None)
        if status is None:
            raise RequeueError(
                f"status {part.strip()!r} is not one the publisher writes (rows of other statuses are never read "
                "nor changed); requeue takes E or W"
            )
        if status not in found:
            found.append(status)
    return tuple(found)


@dataclass(frozen=True)
class Selection:
    """Which rows to put back: these statuses, optionally one table (as a cycle resolves the
    event log's table_name: exactly or ignoring case) and an inclusive record_id range."""

    statuses: tuple[Status, ...] = DEFAULT_STATUSES
    table: str | None = None
    first: int | None = None
    last: int | None = None

    def __post_init__(self) -> None:
        if not self.statuses:
            raise RequeueError("expected E or W (or E,W)")
        refused = [Status(s).value for s in self.statuses if s not in REQUEUABLE]
        if refused:
            why = _REFUSED.get(refused[0])
            raise RequeueError(f"status {refused[0]}: {why + '; ' if why else ''}requeue takes E or W")
        if self.first is not None and self.last is not None and self.first > self.last:
            raise RequeueError(
                f"--from {self.first} is after --to {self.last}: the range is inclusive, from the lower record_id "
                "to the higher"
            )
        if self.table is not None and not self.table.strip():
            raise RequeueError("--table: expected a table name, got an empty string")

    def matches(self, table_name: str | None) -> bool:
        if self.table is None:
            return True
        return table_name is not None and (table_name == self.table or table_name.lower() == self.table.lower())

    def describe(self) -> dict[str, Any]:
        return {"statuses": [s.value for s in self.statuses], "table": self.table, "from": self.first,
                "to": self.last}


@dataclass(frozen=True)
class Requeued:
    """What a requeue put back (or, dry, would put back), per status and table_name."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    dry_run: bool = False
    held_back: int = 0
    """Chosen rows left alone because a cycle kept unacknowledged holds them."""
    record: Path | None = None
    """Where the requeue was recorded (None for a dry run)."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def by_status(self) -> dict[str, int]:
        return summed((status, n) for (status, _), n in self.counts.items())

    @property
    def by_table(self) -> dict[str, int]:
        return summed((table, n) for (_, table), n in self.counts.items())

    def summary(self) -> dict[str, Any]:
        return {
            "requeued": self.total,
            "dry_run": self.dry_run,
            "by_status": self.by_status,
            "by_table": self.by_table,
            "held_back": self.held_back,
            "record": None if self.record is None else str(self.record),
        }


def requeue(
    config: Config, engine: Engine, selection: Selection, reason: str | None = None, dry_run: bool = False
) -> Requeued:
    """Set the chosen rows back to `N` in one transaction (count them only, with `dry_run`),
    and record the requeue with its reason in the output directory's requeue.jsonl."""
    if not config.publisher.status_mode:
        raise RequeueError(
            "publisher.status_mode = false: no reader publishes by the status column (subscribers read every row "
            "whatever its status), so a requeued row would never be read"
        )
    require_exact_comparison(engine, config, table_schema(config, engine))
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns
    status = table.c[names.status]
    record_id = table.c[names.record_id]
    table_name = dialect_of(engine).exact(table.c[names.table_name])
    chosen: list[ColumnElement[bool]] = [status.in_([s.value for s in selection.statuses])]
    if selection.first is not None:
        chosen.append(record_id >= selection.first)
    if selection.last is not None:
        chosen.append(record_id <= selection.last)
    output = Path(config.output.directory)
    kept = _kept_window(config, output, table_schema(config, engine))
    outside = [] if kept is None else [not_(and_(record_id >= kept[0], record_id <= kept[1]))]
    counts: dict[tuple[str, str], int] = {}
    held_back = 0
    with engine.connect() as conn:
        groups = conn.execute(
            select(status, table_name, func.count()).where(*chosen, *outside).group_by(status, table_name)
        ).all()
        wanted = [(s, raw, int(n)) for s, raw, n in groups if selection.matches(_text(raw))]
        if kept is not None:
            held = conn.execute(
                select(table_name, func.count()).where(*chosen, record_id >= kept[0], record_id <= kept[1])
                .group_by(table_name)
            ).all()
            held_back = sum(int(n) for raw, n in held if selection.matches(_text(raw)))
        for value, raw, n in wanted:
            if not dry_run:
                same_table = table_name.is_(None) if raw is None else table_name == raw
                n = conn.execute(
                    update(table).where(*chosen, *outside, status == value, same_table)
                    .values({names.status: Status.NEW.value})
                ).rowcount
            if n:
                key = (str(value), _shown(raw))
                counts[key] = counts.get(key, 0) + n
        result = Requeued(counts, dry_run, held_back, None if dry_run else output / REQUEUE_LOG)
        if not dry_run:
            requeue_id = _record(output, config, selection, reason, result)
            try:
                conn.commit()
            except Exception as exc:
                _record_rollback(output, requeue_id, config.database.redact(str(exc)))
                raise
    if held_back and kept is not None:
        log.warning("left %d chosen row(s) alone: a cycle not yet acknowledged holds record_ids %d..%d (%s); "
                    "requeue them once it is", held_back, kept[0], kept[1], output / WINDOW_FILE)
    return result


def _kept_window(config: Config, output: Path, schema: str | None) -> tuple[int, int] | None:
    """The record_ids of this event log's cycle kept unacknowledged in the output directory."""
    pin = pinned_window(output)
    if pin is None:
        return None
    try:
        kept = json.loads(pin)
        if (kept["table"], kept["schema"]) != (config.event_log.table, schema):
            return None
        return int(kept["lo"]), int(kept["hi"])
    except (ValueError, KeyError, TypeError):
        raise RequeueError(
            f"{output / WINDOW_FILE} does not hold a cycle's window; run `publisher poll` to settle it first"
        ) from None


def _record(output: Path, config: Config, selection: Selection, reason: str | None, result: Requeued) -> str:
    """One JSON line per requeue, written before the transaction commits: a requeue that could
    not be recorded does not happen (the transaction is rolled back). Its `id`, which a line
    saying the commit failed names (`_record_rollback`)."""
    requeue_id = uuid.uuid4().hex
    line = {
        "id": requeue_id,
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "user": _user(),
        "host": socket.gethostname(),
        "event_log": config.event_log.table,
        "reason": reason,
        **selection.describe(),
        "requeued": result.total,
        "by_status": result.by_status,
        "by_table": result.by_table,
        "held_back": result.held_back,
    }
    _append(output, line)
    return requeue_id


def _record_rollback(output: Path, requeue_id: str, error: str) -> None:
    """The commit of the requeue recorded as `requeue_id` failed, so its rows were not changed:
    a second line says so. If even that line cannot be written, the error log says it."""
    line = {"id": requeue_id, "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "rolled_back": True,
            "error": error}
    try:
        _append(output, line)
    except OSError as exc:
        log.error("requeue %s was not committed (%s), and %s cannot say so: %s; its line there records a requeue "
                  "that did not happen", requeue_id, error, output / REQUEUE_LOG, exc)
    else:
        log.error("requeue %s failed to commit: %s; recorded as rolled back in %s", requeue_id, error,
                  output / REQUEUE_LOG)


def _append(output: Path, line: dict[str, Any]) -> None:
    output.mkdir(parents=True, exist_ok=True)
    with open(output / REQUEUE_LOG, "a", encoding="utf-8") as file:
        file.write(json.dumps(line, ensure_ascii=True) + "\n")
        file.flush()
        os.fsync(file.fileno())


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _text(raw: Any) -> str | None:
    """A table_name as read (bytes where text may hold any bytes, `Dialect.exact`): text, or None when it
    is NULL or not UTF-8 (no table name could match it)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None if raw is None else str(raw)


def _shown(raw: Any) -> str:
    return NO_TABLE if raw is None else decoded(raw)
