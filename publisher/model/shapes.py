"""The shapes a published table had while its events were logged, so that change tables and
messages describe a change logged before a migration by the table version it was logged in.

`install`, the reinstall that follows a migration and an event trigger that follows migrations
(`Capture.may_follow`, in the migration's own transaction) record where in the event log each shape
begins: the record_id from which the capture logs for it, and the table's columns as the catalog
reflects them, or None where the event trigger cannot tell (a trigger function in the
database's own language does not reflect as the publisher does): then the shape recorded next,
or the table's shape now. A cycle's window never spans a change of shape
(`ShapeHistory.first_change`), so each table has one shape per cycle (`at`).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.keys import KeyKind
from publisher.model.values import ValueType


@dataclass(frozen=True)
class ShapeRecord:
    """From `from_record_id` on, the table's events were logged for these columns."""

    from_record_id: int
    columns: tuple[ColumnInfo, ...] | None


def columns_json(table: TableInfo) -> str:
    """The table's columns as a shape record keeps them."""
    return json.dumps([_column_dict(c) for c in table.columns], separators=(",", ":"), sort_keys=True)


def columns_from_json(text: str) -> tuple[ColumnInfo, ...]:
    """The columns `columns_json` wrote; ValueError for anything else."""
    try:
        return tuple(_column_of(entry) for entry in json.loads(text))
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a recorded shape ({exc})") from None


def _column_dict(column: ColumnInfo) -> dict[str, Any]:
    described = dataclasses.asdict(column)
    described["value_type"] = column.value_type.value
    described["key_kind"] = column.key_kind.value
    return described


def _column_of(entry: dict[str, Any]) -> ColumnInfo:
    entry = dict(entry)
    entry["value_type"] = ValueType(entry["value_type"])
    entry["key_kind"] = KeyKind(entry["key_kind"])
    return ColumnInfo(**entry)


def retired_names(records: Sequence[ShapeRecord], now: Sequence[ColumnInfo]) -> tuple[str, ...]:
    """Columns some recorded shape of a table had that the table has no more (ignoring case),
    as first recorded."""
    current = {c.name.lower() for c in now}
    found: dict[str, str] = {}
    for record in sorted(records, key=lambda r: r.from_record_id):
        for column in record.columns or ():
            if column.name.lower() not in current:
                found.setdefault(column.name.lower(), column.name)
    return tuple(found.values())


@dataclass(frozen=True)
class ShapeChange:
    """What a table's consumer must be told again after its shape changed from `before` to now."""

    whole: bool
    """Every row again (row query-backs): its key changed, or the earlier shape is unknown."""
    fields: tuple[str, ...] = ()
    """Columns added, renamed to or retyped: each row's value of them again (field query-backs)."""
    retired: tuple[str, ...] = ()
    """Columns dropped or renamed away: their values are no longer the table's."""


def shape_change(before: Sequence[ColumnInfo] | None, now: Sequence[ColumnInfo]) -> ShapeChange:
    """How a table changed shape, by column name and type; a column only moved (its ordinal) did
    not change. A column renamed only in case is published again, not retired: the event log
    names a column ignoring case."""
    if before is None or _keys(before) != _keys(now):
        return ShapeChange(whole=True)
    earlier = {c.name: dataclasses.replace(c, ordinal=0) for c in before}
    fields = tuple(c.name for c in now if earlier.get(c.name) != dataclasses.replace(c, ordinal=0))
    names = {c.name.lower() for c in now}
    return ShapeChange(False, fields, tuple(c.name for c in before if c.name.lower() not in names))


def _keys(columns: Sequence[ColumnInfo]) -> list[tuple[str, ValueType, KeyKind, int]]:
    return sorted((c.name.lower(), c.value_type, c.key_kind, c.key_position) for c in columns if c.is_key)


def last_change(records: Sequence[ShapeRecord], now: Sequence[ColumnInfo]) -> tuple[ColumnInfo, ...] | None:
    """The columns the table had before its latest change of shape (the newest recorded shape
    that differs from `now` and could tell its columns); None if no record tells."""
    for record in sorted(records, key=lambda r: r.from_record_id, reverse=True):
        if record.columns is not None and record.columns != tuple(now):
            return record.columns
    return None


@dataclass(frozen=True)
class _Span:
    start: int | None
    """The first record_id of the span; None: from the first event on."""
    columns: tuple[ColumnInfo, ...]


class ShapeHistory:
    """Each published table's shapes along the event log, from the shape records and the
    tables as they are now (`now`), which the newest events are logged for."""

    def __init__(self, records: Mapping[str, Sequence[ShapeRecord]], now: Mapping[str, TableInfo]) -> None:
        self.now = dict(now)
        self._spans = {name: _spans(records.get(name, ()), table.columns) for name, table in self.now.items()}

    def first_change(self, lo: int, hi: int) -> int | None:
        """The lowest record_id in lo+1..hi from which some table's events have another shape
        than the events before them; None when every table keeps one shape through lo..hi."""
        starts = [s.start for spans in self._spans.values() for s in spans[1:]
                  if s.start is not None and lo < s.start <= hi]
        return min(starts, default=None)

    def at(self, record_id: int) -> dict[str, TableInfo]:
        """Every table as its events at `record_id` were logged for."""
        return {name: self._table_at(name, record_id) for name in self.now}

    def _table_at(self, name: str, record_id: int) -> TableInfo:
        table = self.now[name]
        columns = table.columns
        for span in self._spans[name]:
            if span.start is None or span.start <= record_id:
                columns = span.columns
        return table if columns == table.columns else dataclasses.replace(table, columns=columns)


def _spans(records: Sequence[ShapeRecord], now: tuple[ColumnInfo, ...]) -> list[_Span]:
    """The spans of one table, a new one wherever its shape changes. Events before the first
    record have its shape; those from the newest record on have the table's shape now; a record
    that could not tell has the next one's."""
    ordered = sorted(records, key=lambda r: r.from_record_id)
    if not ordered:
        return [_Span(None, now)]
    resolved: list[tuple[ColumnInfo, ...]] = []
    following = now if ordered[-1].columns is None else ordered[-1].columns
    for record in reversed(ordered[:-1]):
        following = record.columns if record.columns is not None else following
        resolved.append(_typed_as_now(following, now))
    resolved.reverse()
    resolved.append(now)
    spans: list[_Span] = []
    for index, (record, columns) in enumerate(zip(ordered, resolved, strict=True)):
        if not spans or spans[-1].columns != columns:
            spans.append(_Span(None if index == 0 else record.from_record_id, columns))
    return spans


def _typed_as_now(columns: tuple[ColumnInfo, ...], now: tuple[ColumnInfo, ...]) -> tuple[ColumnInfo, ...]:
    """An earlier shape with the type of each column a migration changed as it is now: the
    cycle reads every value by the column's type now, logged before the change or after, so the
    version that describes the value must say that type."""
    current = {c.name: c for c in now}
    typed = []
    for column in columns:
        later = current.get(column.name)
        if later is None or (column.value_type, column.key_kind) == (later.value_type, later.key_kind):
            typed.append(column)
            continue
        typed.append(dataclasses.replace(
            column, value_type=later.value_type, key_kind=later.key_kind, sql_type=later.sql_type,
            length=later.length, precision=later.precision, scale=later.scale,
            matched_as_text=later.matched_as_text, in_arrays=later.in_arrays,
        ))
    return tuple(typed)
