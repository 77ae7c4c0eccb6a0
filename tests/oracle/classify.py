"""Classification of one event log row: the checks of `rules.classify` composed in order."""
from __future__ import annotations

from typing import Any

from publisher.model.events import UNREADABLE
from publisher.rules.classify import (
    CLASSIFIED_NAMES,
    ClassifyContext,
    Disposition,
    Rejected,
    classified_error,
    classify_values,
    event_target,
    event_type_of,
    rejection,
)


def classify_event(row: dict[str, Any], ctx: ClassifyContext) -> dict[str, Any]:
    """The classification of one event log row (keys as in the event log's fixed column roles).

    Every value is untrusted: whatever a row holds, the answer is a disposition, never an
    exception, and a publishable row carries only names and keys that XML can carry.
    """
    out: dict[str, Any] = dict.fromkeys(CLASSIFIED_NAMES)
    if ctx.for_another_reader(row.get("perpetrator")) or ctx.subscription is not None and ctx.untracked(
        rejection(event_type_of, row.get("event_type")), row.get("table_name"), row.get("column_name")
    ):
        out["disposition"] = Disposition.UNTRACKED
        return out
    if not ctx.allow_loopback and ctx.is_loopback(row.get("perpetrator")):
        out["disposition"] = Disposition.LOOPBACK
        return out
    unreadable = row.get(UNREADABLE)
    if unreadable:
        return classified_error(str(unreadable))
    try:
        target = event_target(row, ctx)
    except Rejected as exc:
        return classified_error(str(exc))
    return classify_values(target, row.get("old_value"), row.get("new_value"))
