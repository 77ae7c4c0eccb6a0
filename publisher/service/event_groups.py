"""The event log read as groups of rows by status, table and perpetrator, in one GROUP BY: what
`publisher stats` and the metrics report, and which rows were passed over as loopback."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Engine, and_, case, func, or_, select

from publisher.config import Config
from publisher.database import publisher_user, table_schema
from publisher.dialects import dialect_of
from publisher.model.events import Status
from publisher.pipeline.event_log import event_log_table
from publisher.pipeline.read import as_utc
from publisher.rules.classify import is_loopback

K = TypeVar("K", str, tuple[str, ...])


@dataclass(frozen=True)
class Group:
    """Rows of one status and table (and perpetrator, where it matters), and the oldest event time."""

    status: str
    table: str
    perpetrator: str
    count: int
    oldest: dt.datetime | None


def read_groups(config: Config, engine: Engine) -> list[Group]:
    """The event log grouped by status and table in one query, and by perpetrator only for `E`
    rows and `S` rows that may be loopback (`may_be_loopback`): a perpetrator per application
    user would otherwise multiply the groups."""
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns
    status, perpetrator = table.c[names.status], table.c[names.perpetrator]
    user = None if config.publisher.allow_loopback else publisher_user(config, engine)
    kept: ColumnElement[bool] = status == Status.ERROR.value
    if user is not None:
        kept = or_(kept, and_(status == Status.SUCCESS.value, may_be_loopback(engine, perpetrator, user)))
    who = case((kept, perpetrator), else_=None)
    columns = [_readable(engine, c) for c in (status, table.c[names.table_name], who, table.c[names.event_time])]
    query = select(columns[0], columns[1], columns[2], func.count(), func.min(columns[3])).group_by(*columns[:3])
    with engine.connect() as conn:
        return [Group(decoded(s), decoded(t), "" if p is None else decoded(p), int(n), utc_of(oldest))
                for s, t, p, n, oldest in conn.execute(query)]


def loopback_groups(config: Config, engine: Engine, groups: Iterable[Group] | None = None) -> list[Group]:
    """The groups of rows passed over as loopback (of `groups`, else read now)."""
    user = None if config.publisher.allow_loopback else publisher_user(config, engine)
    if user is None:
        return []
    groups = read_groups(config, engine) if groups is None else groups
    return [g for g in groups if g.status == Status.SUCCESS.value and is_loopback(g.perpetrator, user)]


NOT_PRINTABLE_ASCII = "[^ -~]"
"""A character other than a space or printable ASCII, as a regular expression (a GLOB set where
`Dialect.holds_any` uses GLOB)."""


def may_be_loopback(engine: Engine, perpetrator: Any, user: str) -> ColumnElement[bool]:
    """A prefilter in SQL for classification's loopback rule (`rules.classify.is_loopback`):
    a superset of the perpetrators the rule takes, which the rule then decides exactly in
    Python. Databases trim and lower-case differently from `str.strip` and `str.casefold`
    (other whitespace, characters outside ASCII), so the SQL compares only where they agree:
    a perpetrator of spaces and printable ASCII alone is loopback exactly when
    `lower(trim(perpetrator))` is the user's folded name (if that is ASCII; no such
    perpetrator can fold to a name that is not). Any other perpetrator (a tab, a non-breaking
    space, a Kelvin sign that folds to `k`) is kept for the rule to decide; those are rare, so
    the groups stay few."""
    folded = user.strip().casefold()
    unusual = dialect_of(engine).holds_any(perpetrator, NOT_PRINTABLE_ASCII)
    if not folded.isascii():
        return unusual
    return or_(func.lower(func.trim(perpetrator)) == folded, unusual)


def _readable(engine: Engine, column: Any) -> Any:
    """Text may hold any bytes (`Dialect.exact`): read it as bytes, so one bad value cannot
    fail a scrape."""
    return dialect_of(engine).exact(column)


def decoded(value: Any) -> str:
    """A text column as read, as text: it may be read as bytes (`Dialect.exact`, `backlog`),
    and bytes that are not UTF-8 are shown escaped. `stats` and the metrics both report with it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def utc_of(value: Any) -> dt.datetime | None:
    """An event time as read (bytes where `Dialect.exact` reads text so), in UTC; None when there is none."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = decoded(value)
    return as_utc(value)


def summed(pairs: Iterable[tuple[K, int]]) -> dict[K, int]:
    """The counts added up per key, in key order (the requeue's counts, the metrics' groups)."""
    out: dict[K, int] = {}
    for key, n in sorted(pairs):
        out[key] = out.get(key, 0) + n
    return out
