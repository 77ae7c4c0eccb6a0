"""What a generated backlog holds: the mix of event kinds (field and row events, query-backs,
deletes, malformed rows) and how many of each a number of events and rows gives."""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from publisher.model.events import EventType

USR_COLUMNS = ("photo", "fname", "lname", "email", "age", "score", "active", "born")
"""The non-key columns of `usr`: a field-style insert logs one event for each."""


MIN_ROWS = 10


MIN_EVENTS = 100


class WorkloadError(ValueError):
    """The workload cannot be made as asked: sizes, URL or target database."""


@dataclass(frozen=True)
class Mix:
    """Each kind's share of the events; per-field updates of `usr` take what the others leave."""

    usr_inserts: float = 0.20
    usr_deletes: float = 0.02
    grp_inserts: float = 0.03
    grp_updates: float = 0.05
    grp_deletes: float = 0.02
    field_query_backs: float = 0.05
    loopback: float = 0.05
    malformed: float = 0.001


DEFAULT_MIX = Mix()


class Backlog(str, enum.Enum):
    """What the generated backlog is made to hold before the drain."""

    MIX = "mix"
    """The events as the triggers logged them (the mix above)."""
    REJECTED = "rejected"
    """Every row names a table that is not published: every row E."""
    GONE = "gone"
    """Every row a row query-back (type 6) of a grp key no row has: every row W."""


_GONE_KEYS = 1_000_000_000
"""Added to a row's record_id to make a grp key that no row has."""


REWRITES = {
    Backlog.REJECTED: "table_name = 'not_published', perpetrator = NULL",
    Backlog.GONE: (
        f"event_type = {int(EventType.UPDATE_ROW_QUERY_BACK)}, table_name = 'grp', "
        f"table_key = 'gid=' || (record_id + {_GONE_KEYS}), column_name = NULL, old_value = NULL, "
        "new_value = NULL, perpetrator = NULL"
    ),
}


@dataclass(frozen=True)
class Plan:
    """Exact event counts per kind; `usr_insert_rows` rows log one event per `usr` column each."""

    usr_insert_rows: int
    usr_updates: int
    usr_deletes: int
    grp_inserts: int
    grp_updates: int
    grp_deletes: int
    field_query_backs: int
    loopback: int
    malformed: int

    @property
    def events(self) -> int:
        counts = dataclasses.asdict(self)
        return sum(counts.values()) + (len(USR_COLUMNS) - 1) * self.usr_insert_rows


def grp_rows(rows: int) -> int:
    """Groups are fewer than users."""
    return max(MIN_ROWS, rows // 2)


def plan_events(events: int, rows: int, mix: Mix = DEFAULT_MIX) -> Plan:
    """Split `events` by `mix`; deletes never take more than half of a table, so updates find rows."""
    if rows < MIN_ROWS:
        raise WorkloadError(f"rows: expected at least {MIN_ROWS}, got {rows}")
    if events < MIN_EVENTS:
        raise WorkloadError(f"events: expected at least {MIN_EVENTS}, got {events}")

    def share(fraction: float) -> int:
        return int(events * fraction)

    plan = Plan(
        usr_insert_rows=share(mix.usr_inserts) // len(USR_COLUMNS),
        usr_updates=0,
        usr_deletes=min(share(mix.usr_deletes), rows // 2),
        grp_inserts=share(mix.grp_inserts),
        grp_updates=share(mix.grp_updates),
        grp_deletes=min(share(mix.grp_deletes), grp_rows(rows) // 2),
        field_query_backs=share(mix.field_query_backs),
        loopback=share(mix.loopback),
        malformed=max(1, share(mix.malformed)),
    )
    updates = events - plan.events
    if updates < 0:
        raise WorkloadError("the mix's shares add up to more than all events")
    return dataclasses.replace(plan, usr_updates=updates)
