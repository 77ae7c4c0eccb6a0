"""Classification: whether each event is loopback, malformed, or to be published, and what it
names (its type, object, column and values).

The checks, each on one value; `classify_batch.BatchClassifier` applies them to Arrow batches
where the event log is read (an executor, or the driver alone), once per distinct value.
`classify_event` of `tests/oracle/classify.py` composes them for one row, which the tests hold the batch
classifier equal to.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from publisher.config import STATUS_MODE, Reader
from publisher.model.canonical import canonical_key
from publisher.model.catalog import Catalog, ColumnInfo, TableInfo
from publisher.model.events import LOGGED_VALUES, PER_FIELD, EventType
from publisher.model.values import BadValueError, ValueType, encode_logged, shown, xml_problem
from publisher.subscriptions.filter import SubscriptionFilter


class Disposition(enum.StrEnum):
    """What classification decides for an event; a column of the classified rows holds the value."""

    PUBLISH = "publish"
    LOOPBACK = "loopback"
    ERROR = "error"
    UNTRACKED = "untracked"
    """Outside the subscriber's subscription: neither published nor rejected."""


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


CLASSIFIED_NAMES = tuple(name for name, _ in CLASSIFIED_FIELDS)


@dataclass(frozen=True)
class ClassifyContext:
    """Everything a worker needs to classify a row; picklable."""

    catalog: Catalog
    publisher_user: str | None
    allow_loopback: bool
    subscription: SubscriptionFilter | None = None
    """A subscriber's cycle: the events its subscription tracks; None: every event."""
    reader: Reader = STATUS_MODE
    """Who the cycle publishes for: a snapshot's events for another reader are left out
    (`for_another_reader`)."""

    def untracked(self, event_type: EventType | str, table_name: object, column_name: object) -> bool:
        """Whether a subscriber's subscription leaves the event out (`event_type`: the type, or
        why the value is none)."""
        kind = None if isinstance(event_type, str) else event_type
        return self.subscription is not None and not self.subscription.takes(kind, table_name, column_name)

    def subscribed(self, target: EventTarget | str) -> EventTarget | str:
        """The target as a subscriber's subscription publishes it: an insert's field event for a
        column it does not track says only that the object was inserted, as an insert's event
        for a key column does (`SubscriptionFilter.hides`)."""
        if not isinstance(target, EventTarget) or target.column is None or self.subscription is None:
            return target
        if not self.subscription.hides(target.class_name, target.column.name):
            return target
        table = self.catalog.tables[target.class_name]
        key = next(c for c in table.columns if c.is_key)
        return EventTarget(EventType.INSERT_FIELD, target.class_name, target.canonical_key, None, key.name,
                           key.value_type.value)

    def is_loopback(self, perpetrator: object) -> bool:
        return is_loopback(perpetrator, self.publisher_user)

    def for_another_reader(self, perpetrator: object) -> bool:
        return for_another_reader(perpetrator, self.reader)


SNAPSHOT_BY = "publisher snapshot"
"""The perpetrator of the events a snapshot logs for the status mode; for a subscriber NAME,
`publisher snapshot for NAME`. No database user has a name with a space in it."""


def snapshot_perpetrator(reader: Reader) -> str:
    """Who a snapshot's events say logged them: the reader they are for."""
    return SNAPSHOT_BY if reader.subscriber is None else f"{SNAPSHOT_BY} for {reader.subscriber}"


def for_another_reader(perpetrator: object, reader: Reader) -> bool:
    """Whether a row is a snapshot's event for a reader other than `reader`: neither published
    nor rejected by this one, as an untracked event."""
    return (isinstance(perpetrator, str) and perpetrator.startswith(SNAPSHOT_BY)
            and perpetrator != snapshot_perpetrator(reader))


def is_loopback(perpetrator: object, publisher_user: str | None) -> bool:
    """Whether a row logged by `perpetrator` is the publisher's own change: the names equal once
    stripped of whitespace and case-folded (Python's `str.strip` and `str.casefold`)."""
    if not isinstance(perpetrator, str) or publisher_user is None:
        return False
    return perpetrator.strip().casefold() == publisher_user.strip().casefold()


class Rejected(Exception):
    pass


@dataclass(frozen=True)
class EventTarget:
    """What an event names, checked: its type, object and column. The same for every event
    with the same type, table, key and column, so a batch works it out once per combination."""

    event_type: EventType
    class_name: str
    canonical_key: str
    column: ColumnInfo | None = None
    """The column of a per-field event that publishes a value, else None."""
    attr_name: str | None = None
    value_type: str | None = None

    @property
    def logs_values(self) -> bool:
        return self.column is not None and self.event_type in LOGGED_VALUES


def event_target(row: Mapping[str, Any], ctx: ClassifyContext) -> EventTarget:
    """The checked type, object and column of an event; Rejected says why there is none."""
    event_type = event_type_of(row.get("event_type"))
    table, key = event_object(row, ctx)
    target = ctx.subscribed(event_column(event_type, table, key, row))
    assert isinstance(target, EventTarget)
    return target


def event_object(row: Mapping[str, Any], ctx: ClassifyContext) -> tuple[TableInfo, str]:
    """The published table an event names and the object's canonical key."""
    table_name = _text(row, "table_name")
    if table_name is None or not table_name.strip():
        raise Rejected("table_name is empty")
    table = ctx.catalog.lookup(table_name)
    if table is None:
        raise Rejected(ctx.catalog.refusal(table_name))
    table_key = _text(row, "table_key")
    if table_key is None:
        raise Rejected("table_key is empty")
    try:
        key = canonical_key(table_key, table.key_columns)
    except ValueError as exc:
        raise Rejected(str(exc)) from None
    problem = xml_problem(table_key) or xml_problem(key)
    if problem is not None:
        raise Rejected(f"table_key {shown(table_key)} {problem}")
    return table, key


def event_column(event_type: EventType, table: TableInfo, key: str, row: Mapping[str, Any]) -> EventTarget:
    """The target of an event of `event_type` on the object: with its column when per field."""
    if event_type not in PER_FIELD:
        return EventTarget(event_type, table.name, key)
    column_name = _text(row, "column_name")
    if column_name is None or not column_name.strip():
        raise Rejected(f"event type {int(event_type)} is per field but column_name is empty")
    column = table.column(column_name)
    if column is None:
        retired = table.retired_column(column_name)
        if retired is not None and event_type in RETIRED_TARGETS:
            return _retired_target(event_type, table, key, retired)
        raise Rejected(f"column {shown(column_name)} does not exist in table {table.name!r}")
    if column.is_key:
        _key_column_event(event_type, table.name, column.name)
        return EventTarget(event_type, table.name, key, None, column.name, column.value_type.value)
    return EventTarget(event_type, table.name, key, column, column.name, column.value_type.value)


RETIRED_TARGETS = frozenset({EventType.INSERT_FIELD, EventType.INSERT_FIELD_QUERY_BACK,
                             EventType.UPDATE_FIELD_REMOVE_ALL, EventType.UPDATE_FIELD_QUERY_BACK})
"""The events naming a retired column (one a migration took away) that still say something: the
rest (an update's logged values) are rejected, as for any column the table does not have."""


def _retired_target(event_type: EventType, table: TableInfo, key: str, retired: str) -> EventTarget:
    """What an event naming a retired column does: an insert's still says the object was
    inserted (as an insert's event for a key column does), and one that sets the attribute to
    what the column holds now removes its values, since the column holds none."""
    if event_type in (EventType.INSERT_FIELD, EventType.INSERT_FIELD_QUERY_BACK):
        first = next(c for c in table.columns if c.is_key)
        return EventTarget(EventType.INSERT_FIELD, table.name, key, None, first.name, first.value_type.value)
    return EventTarget(EventType.UPDATE_FIELD_REMOVE_ALL, table.name, key, None, retired, ValueType.STRING.value)


def classify_values(target: EventTarget, old_value: Any, new_value: Any) -> dict[str, Any]:
    """A publishable event's classification from its target and the values it logged."""
    code, old_text, new_text = int(target.event_type), None, None
    if target.logs_values:
        assert target.column is not None
        try:
            code, old_text, new_text = logged_texts(target.event_type, target.column, target.class_name, old_value,
                                                    new_value)
        except Rejected as exc:
            return classified_error(str(exc))
    return {
        "disposition": Disposition.PUBLISH,
        "reason": None,
        "event_type_code": code,
        "class_name": target.class_name,
        "canonical_key": target.canonical_key,
        "attr_name": target.attr_name,
        "value_type": target.value_type,
        "old_text": old_text,
        "new_text": new_text,
    }


def logged_texts(
    event_type: EventType, column: ColumnInfo, table: str, old_value: Any, new_value: Any
) -> tuple[int, str | None, str | None]:
    """(event type code, old text, new text) of an event that logs values; Rejected when the
    new value cannot be published."""
    new_text = _logged(new_value, "new_value", table, column)
    if event_type is EventType.INSERT_FIELD:
        return int(event_type), None, new_text
    try:
        return int(event_type), _logged(old_value, "old_value", table, column), new_text
    except Rejected:
        # The consumer cannot hold a value that cannot be published, so the update removes
        # all values instead of naming one: the new value is never lost for it.
        return int(EventType.UPDATE_FIELD_REMOVE_ALL), None, new_text


def classified_error(reason: str) -> dict[str, Any]:
    """A row's classification as E, and why."""
    return {**dict.fromkeys(CLASSIFIED_NAMES), "disposition": Disposition.ERROR, "reason": reason}


def _logged(value: Any, role: str, table: str, column: ColumnInfo) -> str | None:
    if value is not None and not isinstance(value, str):
        raise Rejected(f"{role} {shown(value)} is not text")
    try:
        return encode_logged(column.value_type, value)
    except BadValueError as exc:
        raise Rejected(f"{role} of column {table}.{column.name} ({column.value_type.value}): {exc}") from None


def _key_column_event(event_type: EventType, table: str, column: str) -> None:
    """A key column is not an attribute: the association carries it. An insert's field event
    for it still says the object was inserted (and publishes no attribute); any other field
    event for it would change a key in place, which a key change never is (it is logged as a
    delete and an insert)."""
    if event_type is not EventType.INSERT_FIELD:
        raise Rejected(
            f"event type {int(event_type)} names key column {table}.{column}: a key is not changed in place"
            " (a key change is a delete of the old key and an insert of the new)"
        )


def _text(row: Mapping[str, Any], role: str) -> str | None:
    """A column's value as text; readers hand over text, but nothing else is assumed either."""
    value = row.get(role)
    if value is None or isinstance(value, str):
        return value
    raise Rejected(f"{role} {shown(value)} is not text")


def event_type_of(value: Any) -> EventType:
    if value is None:
        raise Rejected("event_type is empty (NULL); it must be one of 1..8")
    text = value.strip() if isinstance(value, str) else str(value)
    if not (text.isascii() and text.lstrip("+-").isdigit() and len(text) < 20):
        raise Rejected(f"event_type {shown(value)} is not one of 1..8")
    try:
        return EventType(int(text))
    except ValueError:
        raise Rejected(f"event_type {shown(value)} is not one of 1..8") from None


def rejection(check: Callable[..., Any], *args: Any) -> Any:
    """What `check` answers, or the reason it rejects with."""
    try:
        return check(*args)
    except Rejected as exc:
        return str(exc)
