"""The order a cycle takes the event log's `N` rows in, as SQL: what the window and where it may
end are both stated in."""
from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Table, and_, or_, select

from publisher.dialects import dialect_of
from publisher.model.events import Status
from publisher.pipeline.event_log import role_columns


class ProcessingOrder:
    """The order a cycle takes `N` rows in: record_id, or in future mode (event time, record_id)
    among the rows whose time has come."""

    def __init__(
        self, table: Table, columns: tuple[str, ...], dialect: str, future: bool,
        eligible: ColumnElement[bool] | None = None,
    ) -> None:
        self.table = table
        self.columns = columns
        self.dialect = dialect
        c = role_columns(table, columns)
        self.record_id = c["record_id"]
        self.time = dialect_of(dialect).time_key(c["event_time"]) if future else None
        self.eligible: ColumnElement[bool] = c["status"] == Status.NEW.value if eligible is None else eligible
        if self.time is not None:
            self.eligible = and_(self.eligible, self.time <= dialect_of(dialect).time_now())

    @property
    def future(self) -> bool:
        return self.time is not None

    @property
    def ascending(self) -> list[ColumnElement[Any]]:
        return [self.record_id] if self.time is None else [self.time, self.record_id]

    def at_or_before(self, record_id: int) -> ColumnElement[bool]:
        """The rows up to and including the row `record_id`, in this order."""
        if self.time is None:
            return self.record_id <= record_id
        pivot = self.table.alias()
        pc = role_columns(pivot, self.columns)  # type: ignore[arg-type]
        time_key = dialect_of(self.dialect).time_key
        pivot_time = select(time_key(pc["event_time"])).where(pc["record_id"] == record_id).scalar_subquery()
        return or_(self.time < pivot_time, and_(self.time == pivot_time, self.record_id <= record_id))
