"""What resolving a cycle's objects takes: the fields of a publishable event, the slice of
events whose current rows are read at once, and the context a worker resolves with
(`pipeline.resolve`)."""
from __future__ import annotations

from dataclasses import dataclass

from publisher.pipeline.queryback import QueryBackContext
from publisher.rules.operations import OperationContext

SLICE_EVENTS = 5000
"""Events of objects with query-back events resolved at once: one bulk read of their current
rows per slice, so memory is bounded by the slice, not by the partition."""

PUBLISHABLE_FIELDS = (
    "record_id",
    "position_time",
    "class_name",
    "canonical_key",
    "event_type_code",
    "attr_name",
    "value_type",
    "old_text",
    "new_text",
)
"""What stages 3–5 need of a classified event."""
CHANGE_FIELDS = ("event_time", "transaction_id")
"""What the change-capture formats need besides."""


def publishable_fields(changes: bool) -> tuple[str, ...]:
    return PUBLISHABLE_FIELDS + CHANGE_FIELDS if changes else PUBLISHABLE_FIELDS


@dataclass(frozen=True)
class ObjectsContext:
    """Everything a worker needs for stages 3–5; picklable."""

    query_back: QueryBackContext
    operations: OperationContext
