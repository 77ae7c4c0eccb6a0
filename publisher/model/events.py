"""The vocabulary of the event log: event types, their categories, row statuses."""
from __future__ import annotations

import enum


class EventType(enum.IntEnum):
    """The eight event types a trigger may log (docs/concepts/event-types.md)."""

    INSERT_FIELD = 1
    UPDATE_FIELD = 2
    UPDATE_FIELD_REMOVE_ALL = 3
    DELETE_ROW = 4
    INSERT_ROW_QUERY_BACK = 5
    UPDATE_ROW_QUERY_BACK = 6
    INSERT_FIELD_QUERY_BACK = 7
    UPDATE_FIELD_QUERY_BACK = 8

    @property
    def is_query_back(self) -> bool:
        return self >= EventType.INSERT_ROW_QUERY_BACK

    @property
    def is_per_field(self) -> bool:
        return self in PER_FIELD


PER_FIELD = frozenset(
    {
        EventType.INSERT_FIELD,
        EventType.UPDATE_FIELD,
        EventType.UPDATE_FIELD_REMOVE_ALL,
        EventType.INSERT_FIELD_QUERY_BACK,
        EventType.UPDATE_FIELD_QUERY_BACK,
    }
)
ROW_QUERY_BACK = frozenset({EventType.INSERT_ROW_QUERY_BACK, EventType.UPDATE_ROW_QUERY_BACK})
FIELD_QUERY_BACK = frozenset({EventType.INSERT_FIELD_QUERY_BACK, EventType.UPDATE_FIELD_QUERY_BACK})
LOGGED_VALUES = frozenset({EventType.INSERT_FIELD, EventType.UPDATE_FIELD, EventType.UPDATE_FIELD_REMOVE_ALL})
LOGGED_UPDATES = frozenset({EventType.UPDATE_FIELD, EventType.UPDATE_FIELD_REMOVE_ALL})
"""Field events that carry the value before the change as well as after it."""
INSERTING = frozenset({EventType.INSERT_FIELD, EventType.INSERT_ROW_QUERY_BACK, EventType.INSERT_FIELD_QUERY_BACK})
"""Events an insert logs: after one of these the object exists, whatever came before."""
INSERT_QUERY_BACK = INSERTING & (ROW_QUERY_BACK | FIELD_QUERY_BACK)
UPDATING = frozenset({EventType.UPDATE_FIELD, EventType.UPDATE_FIELD_REMOVE_ALL, EventType.UPDATE_ROW_QUERY_BACK,
                      EventType.UPDATE_FIELD_QUERY_BACK})
"""Events an update logs."""
DELETING = frozenset({EventType.DELETE_ROW})


class Status(str, enum.Enum):
    """Values of the status column. Only NEW is written by triggers; the rest by the publisher."""

    NEW = "N"
    SUCCESS = "S"
    WARNING = "W"
    ERROR = "E"
    FATAL = "F"


UNREADABLE = "unreadable"
"""Why a row's values are not text (e.g. invalid UTF-8); such a row is rejected, never lost."""
EVENT_SCHEMA = (
    "record_id long, status string, event_type string, event_time timestamp, perpetrator string, "
    "table_name string, table_key string, column_name string, old_value string, new_value string, "
    f"transaction_id string, {UNREADABLE} string"
)
EVENT_FIELDS = tuple(part.split()[0] for part in EVENT_SCHEMA.split(", "))
"""The fields of an event as read, in order."""
