"""Classification of an Arrow batch where it was read: the checks of `classify`, each asked
once per distinct value (event type, object, column) and spread over the rows as takes, so no
Python runs per row for the common case."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.arrow import arrow_schema_of
from publisher.model.canonical import canonical_spelling
from publisher.model.catalog import TableInfo
from publisher.model.events import EVENT_FIELDS, EVENT_SCHEMA, UNREADABLE, EventType
from publisher.model.plain_times import logged_times
from publisher.model.values import ValueType, logged_unchanged
from publisher.rules.classify import (
    CLASSIFIED_FIELDS,
    CLASSIFIED_NAMES,
    ClassifyContext,
    Disposition,
    EventTarget,
    Rejected,
    event_column,
    event_object,
    event_type_of,
    logged_texts,
    rejection,
)

CLASSIFIED_SCHEMA = EVENT_SCHEMA + ", position_time timestamp, " + ", ".join(
    f"{name} {kind}" for name, kind in CLASSIFIED_FIELDS
)
"""An event as read, its processing-order time, and its classification."""


class BatchClassifier:
    """Classifies Arrow batches of EVENT_SCHEMA into batches of CLASSIFIED_SCHEMA, where the
    rows are read (a Spark worker or the driver alone).

    Column-wise: the event log's columns pass through untouched; an event's type, object and
    column are each worked out once per distinct value and cycle (`_Targets`), the perpetrator
    once per distinct name, and only the logged values no column check vouches for row by row.
    """

    TARGETS_KEPT = 200_000
    """Distinct objects remembered; past that the memory starts again, so it stays bounded."""

    def __init__(self, ctx: ClassifyContext, future_events: bool) -> None:
        self.ctx = ctx
        self.future_events = future_events
        self.schema = arrow_schema_of(CLASSIFIED_SCHEMA)
        self._made = pa.schema([self.schema.field(name) for name in CLASSIFIED_NAMES])
        self._types: dict[Any, EventType | str] = {}
        self._objects: dict[tuple[Any, Any], tuple[TableInfo, str] | str] = {}
        self._columns: dict[tuple[EventType, str, Any], EventTarget | str] = {}
        self._loopback: dict[Any, bool] = {}
        self._spellings: dict[Any, str | None] = {}

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        count = batch.num_rows
        untracked = self._untracked(batch)
        loopback = np.zeros(count, dtype=bool)
        if not self.ctx.allow_loopback:
            loopback = _per_distinct(batch.column("perpetrator"), self._is_loopback, pa.bool_())
            loopback = loopback.to_numpy(zero_copy_only=False) & ~untracked
        quiet = loopback | untracked
        targets = _Targets.of(batch, self)
        unreadable = batch.column(UNREADABLE)
        reason = pc.coalesce(pc.if_else(pc.equal(unreadable, ""), None, unreadable), targets.reason)
        error = ~quiet & reason.is_valid().to_numpy(zero_copy_only=False)
        publish = ~quiet & ~error
        code = targets.code
        old_text = new_text = pa.nulls(count, pa.string())
        logging = np.flatnonzero(publish & targets.logs)
        if len(logging):
            texts = self._logged_texts(batch, logging, targets)
            code = pc.replace_with_mask(code, _scattered(texts.changed, count), texts.codes)
            rejected = _scattered(texts.rejected, count)
            reason = pc.replace_with_mask(reason, rejected, texts.reasons)
            error |= rejected.to_numpy(zero_copy_only=False)
            publish &= ~error
            logged = _scattered(texts.rows, count)
            old_text = pc.replace_with_mask(old_text, logged, texts.old)
            new_text = pc.replace_with_mask(new_text, logged, texts.new)
        shown_if = pa.array(publish)
        made = [
            pc.if_else(pa.array(untracked), Disposition.UNTRACKED, pc.if_else(
                pa.array(loopback), Disposition.LOOPBACK,
                pc.if_else(pa.array(error), Disposition.ERROR, Disposition.PUBLISH))),
            pc.if_else(pa.array(error), reason, None),
            *(pc.if_else(shown_if, column, None).cast(field.type) for column, field in zip(
                (code, targets.class_name, targets.key, targets.attr_name, targets.value_type, old_text, new_text),
                list(self._made)[2:], strict=True)),
        ]
        position = batch.column("event_time") if self.future_events else pa.nulls(count, _TIMESTAMP)
        passed = [batch.column(name) for name in EVENT_FIELDS]
        return pa.RecordBatch.from_arrays([*passed, position, *made], schema=self.schema)

    def _logged_texts(self, batch: pa.RecordBatch, logging: np.ndarray, targets: _Targets) -> _Texts:
        """The published texts of the rows that log values: checked as columns where
        `logged_unchanged` vouches for them, else one by one by `logged_texts`, whose outcome
        may be another type or a rejection."""
        rows = pa.array(logging, pa.int64())
        olds = batch.column("old_value").take(rows)
        news = batch.column("new_value").take(rows)
        value_types = targets.value_type.take(rows)
        inserts = pc.equal(targets.code.take(rows), int(EventType.INSERT_FIELD))
        fast_rows = pc.and_(logged_unchanged(value_types, news), pc.or_(inserts, logged_unchanged(value_types, olds)))
        olds, news, fast_rows = _plain_times(value_types, inserts, olds, news, fast_rows)
        fast = fast_rows.to_numpy(zero_copy_only=False)
        slow = np.flatnonzero(~fast)
        changed: list[int] = []
        codes: list[int] = []
        rejected: list[int] = []
        reasons: list[str] = []
        slow_old: list[str | None] = []
        slow_new: list[str | None] = []
        kept: list[int] = []
        for k, old, new in zip(slow.tolist(), olds.take(slow).to_pylist(), news.take(slow).to_pylist(), strict=True):
            index = int(logging[k])
            target = targets.target_of(index)
            assert target.column is not None
            try:
                code, old_text, new_text = logged_texts(target.event_type, target.column, target.class_name, old, new)
            except Rejected as exc:
                rejected.append(index)
                reasons.append(str(exc))
                continue
            if code != int(target.event_type):
                changed.append(index)
                codes.append(code)
            kept.append(k)
            slow_old.append(old_text)
            slow_new.append(new_text)
        old_texts = pc.if_else(inserts, pa.nulls(len(olds), pa.string()), olds)
        order = np.concatenate([np.flatnonzero(fast), np.array(kept, dtype=np.int64)])
        sort = np.argsort(order, kind="stable")
        return _Texts(
            rows=pa.array(logging[order][sort], pa.int64()),
            old=pa.concat_arrays([old_texts.filter(fast_rows), pa.array(slow_old, pa.string())]).take(sort),
            new=pa.concat_arrays([news.filter(fast_rows), pa.array(slow_new, pa.string())]).take(sort),
            changed=pa.array(changed, pa.int64()),
            codes=pa.array(codes, pa.int32()),
            rejected=pa.array(rejected, pa.int64()),
            reasons=pa.array(reasons, pa.string()),
        )

    def _untracked(self, batch: pa.RecordBatch) -> np.ndarray:
        """Each row outside a subscriber's subscription, or a snapshot's event for another
        reader; asked once per distinct (type, table, column) and perpetrator."""
        others = _per_distinct(batch.column("perpetrator"), self.ctx.for_another_reader, pa.bool_())
        untracked = others.to_numpy(zero_copy_only=False)
        if self.ctx.subscription is None:
            return untracked
        events, rows = _distinct(batch, ("event_type", "table_name", "column_name"))
        answers = [self.ctx.untracked(self._kind(kind), table, column) for kind, table, column in events]
        return np.array(answers, dtype=bool)[rows] | untracked

    def _is_loopback(self, perpetrator: Any) -> bool:
        known = self._loopback.get(perpetrator)
        if known is None:
            known = self._loopback[perpetrator] = self.ctx.is_loopback(perpetrator)
        return known

    def _kind(self, event_type: Any) -> EventType | str:
        """The event type, or why it is none; once per text and cycle."""
        kind = self._types.get(event_type)
        if kind is None:
            kind = self._types[event_type] = rejection(event_type_of, event_type)
        return kind

    def _object_columns(self, batch: pa.RecordBatch) -> _Objects:
        """Each row's class and canonical key, or why it has none. A key a trigger logged spelled
        canonically already is taken as it is, found by one pattern per table over the batch (most
        keys are); the others go to `_object`, once per distinct object."""
        keys = batch.column("table_key")
        tables, table_rows = _distinct(batch, ("table_name",))
        spelled = np.zeros(batch.num_rows, dtype=bool)
        for place, (table_name,) in enumerate(tables):
            pattern = self._spelling(table_name)
            if pattern is not None:
                rows = np.flatnonzero(table_rows == place)
                matched = pc.match_substring_regex(keys.take(pa.array(rows)), pattern)
                spelled[rows[pc.fill_null(matched, False).to_numpy(zero_copy_only=False)]] = True
        names = [None if self._spelling(name) is None else self.ctx.catalog.lookup(name).name  # type: ignore[union-attr]
                 for (name,) in tables]
        class_name = pa.array(names, pa.string()).take(pa.array(table_rows))
        objects = _Objects(class_name, keys, pa.nulls(batch.num_rows, pa.string()))
        rest = np.flatnonzero(~spelled)
        if not len(rest):
            return objects
        others, other_rows = _distinct(batch.take(pa.array(rest)), ("table_name", "table_key"))
        found = [self._object(*values) for values in others]
        taken = pa.array(other_rows)
        mask = _scattered(pa.array(rest), batch.num_rows)
        return _Objects(
            class_name=pc.replace_with_mask(objects.class_name, mask, pa.array(
                [None if isinstance(o, str) else o[0].name for o in found], pa.string()).take(taken)),
            key=pc.replace_with_mask(objects.key, mask, pa.array(
                [None if isinstance(o, str) else o[1] for o in found], pa.string()).take(taken)),
            reason=pc.replace_with_mask(objects.reason, mask, pa.array(
                [o if isinstance(o, str) else None for o in found], pa.string()).take(taken)),
        )

    def _spelling(self, table_name: Any) -> str | None:
        """The pattern (RE2) of the published table's keys that `event_object` takes as they are
        (`canonical_spelling`), where its key columns' names need no escaping; else None."""
        if table_name not in self._spellings:
            table = self.ctx.catalog.lookup(table_name) if isinstance(table_name, str) and table_name.strip() else None
            pattern = None if table is None else canonical_spelling(table.key_columns)
            plain = table is not None and all(_PLAIN_NAME.fullmatch(name) for name, _ in table.key_columns)
            self._spellings[table_name] = rf"\A(?:{pattern})\z" if pattern is not None and plain else None
        return self._spellings[table_name]

    def _object(self, table_name: Any, table_key: Any) -> tuple[TableInfo, str] | str:
        """The table and canonical key, or why there are none; once per object and cycle, so a
        key is parsed once (the memory starts again past TARGETS_KEPT objects)."""
        obj = self._objects.get((table_name, table_key))
        if obj is None:
            if len(self._objects) >= self.TARGETS_KEPT:
                self._objects.clear()
                self._columns.clear()
            row = {"table_name": table_name, "table_key": table_key}
            obj = self._objects[table_name, table_key] = rejection(event_object, row, self.ctx)
        return obj

    def _column(self, kind: EventType | str, table_name: Any, column_name: Any) -> EventTarget | str | None:
        """The target (without its key) of an event of the type on the table's column, or why
        there is none; None where the type or the table already fails, which comes first."""
        table = self.ctx.catalog.lookup(table_name) if isinstance(table_name, str) and table_name.strip() else None
        if isinstance(kind, str) or table is None:
            return None
        field = self._columns.get((kind, table.name, column_name))
        if field is None:
            field = self._columns[kind, table.name, column_name] = self.ctx.subscribed(rejection(
                event_column, kind, table, "", {"column_name": column_name}
            ))
        return field


@dataclass(frozen=True)
class _Targets:
    """Each row's target as columns, worked out per distinct type, object and column of the
    batch, so no Python runs per row."""

    found: list[EventTarget | None]
    """The distinct (type, table, column) targets, without their keys (None: none)."""
    index: np.ndarray
    """Each row's place in `found`."""
    reason: pa.Array
    code: pa.Array
    class_name: pa.Array
    key: pa.Array
    attr_name: pa.Array
    value_type: pa.Array
    logs: np.ndarray
    """Whether the row's target logs values."""

    @classmethod
    def of(cls, batch: pa.RecordBatch, classifier: BatchClassifier) -> _Targets:
        """Checked in `event_target`'s order: the type, then the object, then the column; each
        part once per distinct value in the batch, so the Python work follows the objects."""
        types, type_rows = _distinct(batch, ("event_type",))
        columns, column_rows = _distinct(batch, ("event_type", "table_name", "column_name"))
        kinds = [classifier._kind(value) for (value,) in types]
        kind_of = {value: kind for (value,), kind in zip(types, kinds, strict=True)}
        objects = classifier._object_columns(batch)
        found = [classifier._column(kind_of[event_type], table_name, column_name)
                 for event_type, table_name, column_name in columns]
        targets = [f if isinstance(f, EventTarget) else None for f in found]

        def per_row(values: list[Any], kind: pa.DataType, rows: np.ndarray) -> pa.Array:
            return pa.array(values, kind).take(pa.array(rows, pa.int64()))

        reason = pc.coalesce(
            per_row([k if isinstance(k, str) else None for k in kinds], pa.string(), type_rows),
            objects.reason,
            per_row([f if isinstance(f, str) else None for f in found], pa.string(), column_rows),
        )
        return cls(
            found=targets,
            index=column_rows,
            reason=reason,
            code=per_row([None if t is None else int(t.event_type) for t in targets], pa.int32(), column_rows),
            class_name=objects.class_name,
            key=objects.key,
            attr_name=per_row([None if t is None else t.attr_name for t in targets], pa.string(), column_rows),
            value_type=per_row([None if t is None else t.value_type for t in targets], pa.string(), column_rows),
            logs=np.array([t is not None and t.logs_values for t in targets], dtype=bool)[column_rows],
        )

    def target_of(self, row: int) -> EventTarget:
        found = self.found[self.index[row]]
        assert found is not None
        return found


def _distinct(batch: pa.RecordBatch, names: tuple[str, ...]) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """The distinct combinations of the columns' values (as Python values), and each row's place
    among them."""
    index, firsts = _distinct_rows([batch.column(name) for name in names])
    taken = pa.array(firsts, pa.int64())
    values = zip(*(batch.column(name).take(taken).to_pylist() for name in names), strict=True)
    return list(values), index


def _distinct_rows(columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """(each row's distinct combination, the first row of each combination) of the columns'
    values, nulls included, compared as values."""
    combined = np.zeros(len(columns[0]), dtype=np.int64)
    first = np.zeros(0, dtype=np.int64)
    for column in columns:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        # renumbered after each column, so the combined number stays below rows × values
        _, first, combined = np.unique(combined * len(encoded.dictionary) + codes, return_index=True,
                                       return_inverse=True)
        combined = combined.reshape(-1)
    return combined, first


def _per_distinct(column: pa.Array, answer: Callable[[Any], Any], kind: pa.DataType) -> pa.Array:
    """`answer` of each row's value, asked once per distinct value."""
    encoded = pc.dictionary_encode(column, null_encoding="encode")
    return pa.array([answer(value) for value in encoded.dictionary.to_pylist()], kind).take(encoded.indices)


@dataclass(frozen=True)
class _Objects:
    """Each row's class, canonical key, and why it has none (the columns `event_object` gives)."""

    class_name: pa.Array
    key: pa.Array
    reason: pa.Array


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")
"""A key column name a pattern carries as it is, in Python's syntax and RE2's alike."""


@dataclass(frozen=True)
class _Texts:
    """The logged rows' outcome: their texts (rows in order, old and new texts), the rows whose
    type changed (to type 3) and the rows rejected, with why."""

    rows: pa.Array
    old: pa.Array
    new: pa.Array
    changed: pa.Array
    codes: pa.Array
    rejected: pa.Array
    reasons: pa.Array


def _plain_times(
    value_types: pa.Array, inserts: pa.Array, olds: pa.Array, news: pa.Array, fast: pa.Array
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The logged date-times in the plain forms a database writes (`logged_times`) encoded as
    columns: their rows join the fast ones, with the encoded texts in place of the logged."""
    times = pc.and_(pc.equal(value_types, ValueType.TIME.value), pc.invert(fast))
    if not pc.any(times).as_py():
        return olds, news, fast
    old_times, new_times = logged_times(olds), logged_times(news)
    timed = pc.and_(times, pc.and_(pc.or_(pc.is_null(news), pc.is_valid(new_times)),
                                   pc.or_(inserts, pc.or_(pc.is_null(olds), pc.is_valid(old_times)))))
    timed = pc.fill_null(timed, False)
    return pc.if_else(timed, old_times, olds), pc.if_else(timed, new_times, news), pc.or_(fast, timed)


def _scattered(rows: pa.Array, count: int) -> pa.Array:
    """A mask over `count` rows, true at the given row numbers."""
    mask = np.zeros(count, dtype=bool)
    mask[rows.to_numpy(zero_copy_only=False)] = True
    return pa.array(mask)


_TIMESTAMP = pa.timestamp("us", tz="UTC")
