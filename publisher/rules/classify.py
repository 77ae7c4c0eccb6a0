"""Stage 2: decide for each event whether it is loopback, malformed, or to be published.

`classify_event` is plain Python so the rules are tested without Spark; `RowClassifier` runs
it in the executors as the event log is read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from publisher.model.catalog import Catalog, ColumnInfo
from publisher.model.events import EVENT_FIELDS, EVENT_SCHEMA, LOGGED_VALUES, PER_FIELD, UNREADABLE, EventType
from publisher.model.keys import canonical_key
from publisher.model.values import BadValueError, encode_logged, shown, xml_problem


class Disposition:
    PUBLISH = "publish"
    LOOPBACK = "loopback"
    ERROR = "error"


CLASSIFIED_FIELDS = (
    ("disposition", "string"),
    ("reason", "string"),
    ("event_type_code", "int"),
    ("class_name", "string"),
    ("canonical_key", "string"),
    ("attr_name", "string"),
    ("value_type", "string"),
    ("old_text", "string"),
    ("new_text", "string"),
)


@dataclass(frozen=True)
class ClassifyContext:
    """Everything a worker needs to classify a row; picklable."""

    catalog: Catalog
    publisher_user: str | None
    allow_loopback: bool

    def is_loopback(self, perpetrator: object) -> bool:
        if not isinstance(perpetrator, str) or self.publisher_user is None:
            return False
        return perpetrator.strip().casefold() == self.publisher_user.strip().casefold()


def classify_event(row: dict[str, Any], ctx: ClassifyContext) -> dict[str, Any]:
    """The classification of one event log row (keys as in the event log's fixed column roles).

    Every value is untrusted: whatever a row holds, the answer is a disposition, never an
    exception, and a publishable row carries only names and keys that XML can carry.
    """
    out: dict[str, Any] = {name: None for name, _ in CLASSIFIED_FIELDS}
    if not ctx.allow_loopback and ctx.is_loopback(row.get("perpetrator")):
        out["disposition"] = Disposition.LOOPBACK
        return out
    try:
        _classify_publishable(row, ctx, out)
    except _Rejected as exc:
        return {**{name: None for name, _ in CLASSIFIED_FIELDS}, "disposition": Disposition.ERROR, "reason": str(exc)}
    out["disposition"] = Disposition.PUBLISH
    return out


class _Rejected(Exception):
    pass


def _classify_publishable(row: dict[str, Any], ctx: ClassifyContext, out: dict[str, Any]) -> None:
    unreadable = row.get(UNREADABLE)
    if unreadable:
        raise _Rejected(str(unreadable))
    event_type = _event_type(row.get("event_type"))
    out["event_type_code"] = int(event_type)
    table_name = _text(row, "table_name")
    if table_name is None or not table_name.strip():
        raise _Rejected("table_name is empty")
    table = ctx.catalog.lookup(table_name)
    if table is None:
        raise _Rejected(ctx.catalog.refusal(table_name))
    out["class_name"] = table.name
    table_key = _text(row, "table_key")
    if table_key is None:
        raise _Rejected("table_key is empty")
    try:
        key = canonical_key(table_key, table.key_columns)
    except ValueError as exc:
        raise _Rejected(str(exc)) from None
    problem = xml_problem(table_key) or xml_problem(key)
    if problem is not None:
        raise _Rejected(f"table_key {shown(table_key)} {problem}")
    out["canonical_key"] = key
    if event_type not in PER_FIELD:
        return
    column_name = _text(row, "column_name")
    if column_name is None or not column_name.strip():
        raise _Rejected(f"event type {int(event_type)} is per field but column_name is empty")
    column = table.column(column_name)
    if column is None:
        raise _Rejected(f"column {shown(column_name)} does not exist in table {table.name!r}")
    out["attr_name"] = column.name
    out["value_type"] = column.value_type.value
    if column.is_key:
        _key_column_event(event_type, table.name, column.name)
        return
    if event_type in LOGGED_VALUES:
        out["new_text"] = _logged(row, "new_value", table.name, column)
        if event_type is not EventType.INSERT_FIELD:
            try:
                out["old_text"] = _logged(row, "old_value", table.name, column)
            except _Rejected:
                # The consumer cannot hold a value that cannot be published, so the update
                # removes all values instead of naming one: the new value is never lost for it.
                out["event_type_code"] = int(EventType.UPDATE_FIELD_REMOVE_ALL)


def _logged(row: dict[str, Any], role: str, table: str, column: ColumnInfo) -> str | None:
    try:
        return encode_logged(column.value_type, _text(row, role))
    except BadValueError as exc:
        raise _Rejected(f"{role} of column {table}.{column.name} ({column.value_type.value}): {exc}") from None


def _key_column_event(event_type: EventType, table: str, column: str) -> None:
    """A key column is not an attribute: the association carries it. An insert's field event
    for it still says the object was inserted (and publishes no attribute); any other field
    event for it would change a key in place, which a key change never is (it is logged as a
    delete and an insert)."""
    if event_type is not EventType.INSERT_FIELD:
        raise _Rejected(
            f"event type {int(event_type)} names key column {table}.{column}: a key is not changed in place"
            " (a key change is a delete of the old key and an insert of the new)"
        )


def _text(row: dict[str, Any], role: str) -> str | None:
    """A column's value as text; readers hand over text, but nothing else is assumed either."""
    value = row.get(role)
    if value is None or isinstance(value, str):
        return value
    raise _Rejected(f"{role} {shown(value)} is not text")


def _event_type(value: Any) -> EventType:
    text = value.strip() if isinstance(value, str) else str(value)
    if not (text.isascii() and text.lstrip("+-").isdigit() and len(text) < 20):
        raise _Rejected(f"event_type {shown(value)} is not one of 1..8")
    try:
        return EventType(int(text))
    except ValueError:
        raise _Rejected(f"event_type {shown(value)} is not one of 1..8") from None


CLASSIFIED_SCHEMA = EVENT_SCHEMA + ", position_time timestamp, " + ", ".join(
    f"{name} {kind}" for name, kind in CLASSIFIED_FIELDS
)
"""An event as read, its processing-order time, and its classification."""
CLASSIFIED_FIELD_NAMES = (*EVENT_FIELDS, "position_time", *(name for name, _ in CLASSIFIED_FIELDS))


@dataclass(frozen=True)
class RowClassifier:
    """Classifies EVENT_SCHEMA tuples into CLASSIFIED_SCHEMA tuples, where Spark reads them."""

    ctx: ClassifyContext
    future_events: bool

    def __call__(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        event = dict(zip(EVENT_FIELDS, row, strict=True))
        out = classify_event(event, self.ctx)
        time = event["event_time"] if self.future_events else None
        return (*row, time, *(out[name] for name, _ in CLASSIFIED_FIELDS))
