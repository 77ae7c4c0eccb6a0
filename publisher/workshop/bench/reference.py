"""A one-at-a-time publisher, the way the vendor product works, as the baseline the publisher must beat.

Per event: read it, classify it, query its row back by key when the type needs it (one SELECT
per event), build the operation, write one document, mark the row and commit. It shares the
publisher's classification, value encoding and XML code, so both write the same operations; only
the shape of the work differs. It runs on a sample and then sets the sample back to `N`.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Connection, Engine, MetaData, Table, and_, bindparam, select, update

from publisher.capture.install import published_tables
from publisher.config import EVENT_LOG_COLUMNS, Config
from publisher.database import association_schema, publisher_user, table_schema
from publisher.model.canonical import key_values
from publisher.model.catalog import Catalog, TableInfo, reflect_catalog
from publisher.model.events import ROW_QUERY_BACK, UNREADABLE, EventType, Status
from publisher.model.operation import AttrChange, Operation, OperationKind, Value, association
from publisher.model.values import BadValueError, ValueType, encode_current
from publisher.model.xds import build_document, build_operation
from publisher.outputs.cycle_files import document_name
from publisher.outputs.durable import write_atomically
from publisher.pipeline.event_log import event_log_table
from publisher.rules.classify import (
    ClassifyContext,
    Disposition,
    Rejected,
    classified_error,
    classify_values,
    event_target,
)
from publisher.rules.operations import operation_kind

RESTORE_CHUNK = 1000


@dataclass
class ReferenceResult:
    events: int = 0
    documents: int = 0
    """One per published event, each holding one operation."""
    bytes_written: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    loopback: int = 0
    unchanged: int = 0
    """Published events whose operation would change nothing (a type 7 on a NULL value): S, no document."""
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "documents": self.documents,
            "bytes": self.bytes_written,
            "statuses": self.statuses,
            "loopback": self.loopback,
            "unchanged": self.unchanged,
            "seconds": round(self.seconds, 3),
            "events_per_second": round(self.events_per_second, 1),
        }


@dataclass(frozen=True)
class _Outcome:
    status: Status
    xml: bytes | None = None
    loopback: bool = False


class _Publisher:
    """What stays the same from event to event: the catalog, the classification context, table handles."""

    def __init__(self, config: Config, engine: Engine, catalog: Catalog) -> None:
        self.config = config
        self.catalog = catalog
        self.schema = table_schema(config, engine)
        self.schema_label = association_schema(config, engine)
        self.context = ClassifyContext(catalog, publisher_user(config, engine), config.publisher.allow_loopback)
        self.tables: dict[str, Table] = {}

    def publish(self, conn: Connection, event: Mapping[str, Any]) -> _Outcome:
        classified = self.classify(event)
        if classified["disposition"] == Disposition.LOOPBACK:
            return _Outcome(Status.SUCCESS, loopback=True)
        if classified["disposition"] == Disposition.ERROR:
            return _Outcome(Status.ERROR)
        table = self.catalog.tables[classified["class_name"]]
        event_type = EventType(classified["event_type_code"])
        row: dict[str, str | None] | None = None
        if event_type.is_query_back:
            found = self.query_back(conn, table, classified["canonical_key"])
            if found is None:
                return _Outcome(Status.WARNING)
            row, problems = found
            if problems and (event_type in ROW_QUERY_BACK or classified["attr_name"] in problems):
                return _Outcome(Status.ERROR)
        kind = operation_kind(event_type, self.config.publisher.insert_row_operation)
        operation = Operation(
            kind=kind,
            class_name=table.name,
            association=association(classified["canonical_key"], table.name, self.schema_label),
            event_id=int(event["record_id"]),
            attrs=tuple(_attr_changes(classified, event_type, table, row or {}, kind)),
        )
        if operation.changes_nothing:
            return _Outcome(Status.SUCCESS)
        return _Outcome(Status.SUCCESS, build_operation(operation))

    def classify(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The production checks of one event, in the cycle's order (the bench's tables carry no
        subscription and no logical class)."""
        if not self.context.allow_loopback and self.context.is_loopback(event.get("perpetrator")):
            return {"disposition": Disposition.LOOPBACK}
        if event.get(UNREADABLE):
            return classified_error(str(event[UNREADABLE]))
        try:
            target = event_target(event, self.context)
        except Rejected as exc:
            return classified_error(str(exc))
        return classify_values(target, event.get("old_value"), event.get("new_value"))

    def query_back(
        self, conn: Connection, table: TableInfo, key: str
    ) -> tuple[dict[str, str | None], set[str]] | None:
        """The row's publishable values and the columns that cannot be published, or None when it is gone."""
        sql_table = self.tables.get(table.name)
        if sql_table is None:
            sql_table = Table(table.name, MetaData(), *(Column(c.name) for c in table.columns), schema=self.schema)
            self.tables[table.name] = sql_table
        values = key_values(key, table.key_columns)
        where = and_(*(sql_table.c[name] == value for (name, _), value in zip(table.key_columns, values, strict=True)))
        record = conn.execute(select(*sql_table.c).where(where)).mappings().first()
        if record is None:
            return None
        row: dict[str, str | None] = {}
        problems: set[str] = set()
        for column in table.value_columns:
            try:
                row[column.name] = encode_current(column.value_type, record[column.name])
            except BadValueError:
                problems.add(column.name)
        return row, problems


def _attr_changes(classified: Mapping[str, Any], event_type: EventType, table: TableInfo,
                  row: Mapping[str, str | None], kind: OperationKind) -> list[AttrChange]:
    """What one event changes, as the vendor product publishes it: a field event its own value,
    a query-back event the current row's."""
    def value(value_type: ValueType, text: str | None) -> Value | None:
        return None if text is None else Value(value_type, text)

    name = classified["attr_name"]
    if event_type == EventType.DELETE_ROW:
        return []
    if event_type in ROW_QUERY_BACK:
        return [AttrChange(c.name, remove_all=kind is OperationKind.MODIFY, add=value(c.value_type, row.get(c.name)))
                for c in table.value_columns]
    value_type = ValueType(classified["value_type"])
    new = value(value_type, classified["new_text"])
    if event_type == EventType.INSERT_FIELD:
        return [AttrChange(name, add=new)]
    if event_type == EventType.UPDATE_FIELD:
        return [AttrChange(name, remove=value(value_type, classified["old_text"]), add=new)]
    if event_type == EventType.UPDATE_FIELD_REMOVE_ALL:
        return [AttrChange(name, remove_all=True, add=new)]
    return [AttrChange(name, remove_all=event_type != EventType.INSERT_FIELD_QUERY_BACK,
                       add=value(value_type, row.get(name)))]


def run_reference(config: Config, engine: Engine, sample: int, output: Path) -> ReferenceResult:
    """Publish the first `sample` new events one at a time into `output`, then set them back to `N`."""
    log = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns
    roles = dict(zip(EVENT_LOG_COLUMNS, (log.c[n] for n in names.in_order()), strict=True))
    record_id, status = roles["record_id"], roles["status"]
    output.mkdir(parents=True, exist_ok=True)
    result = ReferenceResult()
    started = time.perf_counter()
    with engine.connect() as conn:
        ids = [int(r) for r in conn.execute(
            select(record_id).where(status == Status.NEW.value).order_by(record_id).limit(sample)
        ).scalars()]
        if not ids:
            return result
        conn.rollback()
        catalog = reflect_catalog(engine, table_schema(config, engine), published_tables(config, engine))
        publisher = _Publisher(config, engine, catalog)
        read_one = select(*(c.label(role) for role, c in roles.items())).where(record_id == bindparam("rid"))
        try:
            for index, rid in enumerate(ids):
                event = conn.execute(read_one, {"rid": rid}).mappings().one()
                outcome = publisher.publish(conn, {**event, UNREADABLE: None})
                if outcome.xml is not None:
                    data = build_document((outcome.xml,))
                    write_atomically(output / document_name(1, index), data)
                    result.documents += 1
                    result.bytes_written += len(data)
                elif outcome.status is Status.SUCCESS and not outcome.loopback:
                    result.unchanged += 1
                conn.execute(update(log).where(record_id == rid).values({names.status: outcome.status.value}))
                conn.commit()
                result.events += 1
                result.loopback += outcome.loopback
                result.statuses[outcome.status.value] = result.statuses.get(outcome.status.value, 0) + 1
            result.seconds = time.perf_counter() - started
        finally:
            _restore(conn, log, names.status, record_id, ids[: result.events])
    return result


def _restore(conn: Connection, log: Table, status_name: str, record_id: Any, ids: Sequence[int]) -> None:
    """Put the sample back as the triggers left it, for the real publisher to drain."""
    conn.rollback()
    for start in range(0, len(ids), RESTORE_CHUNK):
        chunk = ids[start : start + RESTORE_CHUNK]
        conn.execute(update(log).where(record_id.in_(chunk)).values({status_name: Status.NEW.value}))
    conn.commit()
