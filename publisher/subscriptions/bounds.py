"""A check-out's bounds: the snapshots of the database it runs between, and what each of its
cycles reads between them. Plain data, shared by the check-out (`checkout`) and the database's
`Visibility`, which decides which events the bounds hold."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from publisher.errors import OutputStateError

_SNAPSHOT = re.compile(r"(\d+):(\d+):((?:\d+(?:,\d+)*)?)")
NOTHING_SEEN = "1:1:"
"""The snapshot of a subscriber that has not checked out yet: no transaction visible."""


@dataclass(frozen=True)
class Snapshot:
    """What a check-out saw: the highest record_id committed, and the transaction snapshot, as
    the database spells it, where it shows one (`Visibility.snapshot`)."""

    record_id: int
    transactions: str | None = None

    def __post_init__(self) -> None:
        if self.transactions is not None and not _SNAPSHOT.fullmatch(self.transactions):
            raise OutputStateError(f"{self.transactions!r} is not a transaction snapshot (xmin:xmax:active,…)")

    @property
    def oldest(self) -> int:
        """xmin: every transaction before it had ended."""
        return int(self._parts.group(1))

    @property
    def next(self) -> int:
        """xmax: no transaction from here on had begun."""
        return int(self._parts.group(2))

    @property
    def active(self) -> tuple[int, ...]:
        listed = self._parts.group(3)
        return tuple(int(t) for t in listed.split(",")) if listed else ()

    @property
    def _parts(self) -> re.Match[str]:
        match = _SNAPSHOT.fullmatch(self.transactions or NOTHING_SEEN)
        assert match is not None
        return match


@dataclass(frozen=True)
class CheckOutWindow:
    """What a cycle of a check-out reads: the events between two snapshots, after `after`,
    except those the subscriber checked in. Plain data: it travels in the cycle's window."""

    subscriber: str
    since: Snapshot
    until: Snapshot
    after: int
    """The record_id up to which the check-out is published already."""
    event_log: str
    """Whose check-in table names the subscriber's own transactions."""
    checked_in: tuple[int, ...] = ()
    """The transactions between the snapshots that the subscriber checked in, where the database
    tells them (`Visibility.checked_in`), read once per window."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckOutWindow:
        return cls(
            subscriber=data["subscriber"], since=Snapshot(**data["since"]), until=Snapshot(**data["until"]),
            after=int(data["after"]), event_log=data["event_log"], checked_in=tuple(data["checked_in"]),
        )
