"""What precedence (docs/concepts/event-types.md) and its oracle share: an object's current row as query-back reads
it, and the reasons of the events that publish nothing (processing order is `rules.order`).

The rules themselves run as column operations over a batch of objects (`rules.columnar`,
`columnar.precedence`, and for logical classes `columnar.logical`); `tests/oracle/precedence.py` states
them one object at a time, and the property tests hold the two equal.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

VANISHED_REASON = "object no longer exists; query-back published nothing"


@dataclass(frozen=True)
class CurrentRow:
    """An object's row as query-back read it: published text per value column, and the columns
    whose value cannot be published, with why."""

    values: Mapping[str, str | None]
    problems: Mapping[str, str] = field(default_factory=dict)
    multi: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Every value of each multi-valued attribute (its child table's rows), in text order."""


def row_problem(problems: Mapping[str, str]) -> str:
    """What keeps a row query-back from publishing a row: each distinct problem of its values."""
    return "; ".join(dict.fromkeys(problems.values()))


def unreadable_reason(reason: str) -> str:
    """Why a query-back event is E: the value it would publish cannot be published."""
    return f"current value cannot be published: {reason}"
