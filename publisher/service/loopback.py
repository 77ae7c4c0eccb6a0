"""Saying loopback out loud: rows the status mode passes over as the publisher's own changes are
marked S and published nowhere, which looks like success. When the application writes as the
publisher's database user, every change is passed over; the operator is told once, with the
two ways out."""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from publisher.config import Config
from publisher.database import publisher_user

RECENT_CYCLES = 10
"""The cycles `run` weighs loopback over."""


def own_user_said(config: Config, engine: Engine) -> str | None:
    """Whose changes are taken as the publisher's own, when the configuration does not say (a
    connection without a user, as to a database file, has none)."""
    if config.publisher.allow_loopback or config.database.user or not engine.url.username:
        return None
    return (f"database.user is not set: changes logged by the connection's user {engine.url.username!r} are taken "
            "as the publisher's own (loopback) and not published")


def loopback_said(config: Config, engine: Engine, loopback: Mapping[str, int], of: str) -> str:
    """The notice for `loopback` rows (by perpetrator) that were `of` what was read."""
    rows = sum(loopback.values())
    perpetrators = ", ".join(repr(name) for name in sorted(loopback))
    user = publisher_user(config, engine)
    if config.database.user:
        whose = f"database.user = {user!r}"
    else:
        whose = f"database.user, which is not set, so the connection's user {user!r} is taken"
    return (f"{rows} {'row' if rows == 1 else 'rows'} ({of}) passed over as loopback, marked S and published "
            f"nowhere: their perpetrator {perpetrators} equals {whose}. If the application writes as this user, "
            "give the publisher a database user of its own (database.user and the URL's user), or set "
            "publisher.allow_loopback = true to publish the application's changes")


def all_loopback(result: Any) -> bool:
    """Whether a cycle read rows and passed over every one of them as loopback."""
    loopback = getattr(result, "loopback", None) or {}
    return result.events > 0 and sum(loopback.values()) == result.events


class LoopbackWatch:
    """`run`'s view of loopback over its last cycles: said once, when most rows of them (more
    than half) were passed over."""

    def __init__(self, cycles: int = RECENT_CYCLES) -> None:
        self.recent: deque[tuple[int, Mapping[str, int]]] = deque(maxlen=cycles)
        self.said = False

    def after(self, result: Any) -> Mapping[str, int] | None:
        """The loopback rows, by perpetrator, of the recent cycles once they are most of their
        rows (the first time only), else None."""
        if self.said or result.events == 0:
            return None
        self.recent.append((result.events, getattr(result, "loopback", None) or {}))
        events = sum(n for n, _ in self.recent)
        passed: dict[str, int] = {}
        for _, loopback in self.recent:
            for name, rows in loopback.items():
                passed[name] = passed.get(name, 0) + rows
        if 2 * sum(passed.values()) <= events:
            return None
        self.said = True
        return passed

    def events(self) -> int:
        return sum(n for n, _ in self.recent)
