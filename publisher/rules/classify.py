"""Stage 2: decide for each event whether it is loopback, malformed, or to be published.

`classify_event` is plain Python so the rules are tested without Spark; `BatchClassifier` applies
them to Arrow batches where the event log is read (an executor, or the driver alone).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.arrow import arrow_schema_of
from publisher.model.catalog import Catalog, ColumnInfo, TableInfo
from publisher.model.events import EVENT_FIELDS, EVENT_SCHEMA, LOGGED_VALUES, PER_FIELD, UNREADABLE, EventType
from publisher.model.keys import canonical_key
from publisher.model.values import BadValueError, encode_logged, logged_unchanged, shown, xml_problem
from publisher.rules.subscription import SubscriptionFilter


class Disposition:
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
    reader: str | None = None
    """The subscriber reading (None: the status mode): a snapshot's events for another reader
    are left out (`for_another_reader`)."""

    def untracked(self, event_type: EventType | str, table_name: object, column_name: object) -> bool:
        """Whether a subscriber's subscription leaves the event out (`event_type`: the type, or
        why the value is none)."""
        kind = None if isinstance(event_type, str) else event_type
        return self.subscription is not None and not self.subscription.takes(kind, table_name, column_name)

    def is_loopback(self, perpetrator: object) -> bool:
        return is_loopback(perpetrator, self.publisher_user)

    def for_another_reader(self, perpetrator: object) -> bool:
        return for_another_reader(perpetrator, self.reader)


SNAPSHOT_BY = "publisher snapshot"
"""The perpetrator of the events a snapshot logs for the status mode; for a subscriber NAME,
`publisher snapshot for NAME`. No database user has a name with a space in it."""


def snapshot_perpetrator(reader: str | None) -> str:
    """Who a snapshot's events say logged them: the reader they are for."""
    return SNAPSHOT_BY if reader is None else f"{SNAPSHOT_BY} for {reader}"


def for_another_reader(perpetrator: object, reader: str | None) -> bool:
    """Whether a row is a snapshot's event for a reader other than `reader` (None: the status
    mode): neither published nor rejected by this one, as an untracked event."""
    return (isinstance(perpetrator, str) and perpetrator.startswith(SNAPSHOT_BY)
            and perpetrator != snapshot_perpetrator(reader))


def is_loopback(perpetrator: object, publisher_user: str | None) -> bool:
    """Whether a row logged by `perpetrator` is the publisher's own change: the names equal once
    stripped of whitespace and case-folded (Python's `str.strip` and `str.casefold`)."""
    if not isinstance(perpetrator, str) or publisher_user is None:
        return False
    return perpetrator.strip().casefold() == publisher_user.strip().casefold()


def classify_event(row: dict[str, Any], ctx: ClassifyContext) -> dict[str, Any]:
    """The classification of one event log row (keys as in the event log's fixed column roles).

    Every value is untrusted: whatever a row holds, the answer is a disposition, never an
    exception, and a publishable row carries only names and keys that XML can carry.
    """
    out: dict[str, Any] = dict.fromkeys(CLASSIFIED_NAMES)
    if ctx.for_another_reader(row.get("perpetrator")) or ctx.subscription is not None and ctx.untracked(
        _rejection(_event_type, row.get("event_type")), row.get("table_name"), row.get("column_name")
    ):
        out["disposition"] = Disposition.UNTRACKED
        return out
    if not ctx.allow_loopback and ctx.is_loopback(row.get("perpetrator")):
        out["disposition"] = Disposition.LOOPBACK
        return out
    unreadable = row.get(UNREADABLE)
    if unreadable:
        return _error(str(unreadable))
    try:
        target = event_target(row, ctx)
    except _Rejected as exc:
        return _error(str(exc))
    return classify_values(target, row.get("old_value"), row.get("new_value"))


class _Rejected(Exception):
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
    """The checked type, object and column of an event; _Rejected says why there is none."""
    event_type = _event_type(row.get("event_type"))
    table, key = event_object(row, ctx)
    return event_column(event_type, table, key, row)


def event_object(row: Mapping[str, Any], ctx: ClassifyContext) -> tuple[TableInfo, str]:
    """The published table an event names and the object's canonical key."""
    table_name = _text(row, "table_name")
    if table_name is None or not table_name.strip():
        raise _Rejected("table_name is empty")
    table = ctx.catalog.lookup(table_name)
    if table is None:
        raise _Rejected(ctx.catalog.refusal(table_name))
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
    return table, key


def event_column(event_type: EventType, table: TableInfo, key: str, row: Mapping[str, Any]) -> EventTarget:
    """The target of an event of `event_type` on the object: with its column when per field."""
    if event_type not in PER_FIELD:
        return EventTarget(event_type, table.name, key)
    column_name = _text(row, "column_name")
    if column_name is None or not column_name.strip():
        raise _Rejected(f"event type {int(event_type)} is per field but column_name is empty")
    column = table.column(column_name)
    if column is None:
        raise _Rejected(f"column {shown(column_name)} does not exist in table {table.name!r}")
    if column.is_key:
        _key_column_event(event_type, table.name, column.name)
        return EventTarget(event_type, table.name, key, None, column.name, column.value_type.value)
    return EventTarget(event_type, table.name, key, column, column.name, column.value_type.value)


def classify_values(target: EventTarget, old_value: Any, new_value: Any) -> dict[str, Any]:
    """A publishable event's classification from its target and the values it logged."""
    code, old_text, new_text = int(target.event_type), None, None
    if target.logs_values:
        assert target.column is not None
        try:
            code, old_text, new_text = logged_texts(target.event_type, target.column, target.class_name, old_value,
                                                    new_value)
        except _Rejected as exc:
            return _error(str(exc))
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
    """(event type code, old text, new text) of an event that logs values; _Rejected when the
    new value cannot be published."""
    new_text = _logged(new_value, "new_value", table, column)
    if event_type is EventType.INSERT_FIELD:
        return int(event_type), None, new_text
    try:
        return int(event_type), _logged(old_value, "old_value", table, column), new_text
    except _Rejected:
        # The consumer cannot hold a value that cannot be published, so the update removes
        # all values instead of naming one: the new value is never lost for it.
        return int(EventType.UPDATE_FIELD_REMOVE_ALL), None, new_text


def _error(reason: str) -> dict[str, Any]:
    return {**dict.fromkeys(CLASSIFIED_NAMES), "disposition": Disposition.ERROR, "reason": reason}


def _logged(value: Any, role: str, table: str, column: ColumnInfo) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Rejected(f"{role} {shown(value)} is not text")
    try:
        return encode_logged(column.value_type, value)
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


def _text(row: Mapping[str, Any], role: str) -> str | None:
    """A column's value as text; readers hand over text, but nothing else is assumed either."""
    value = row.get(role)
    if value is None or isinstance(value, str):
        return value
    raise _Rejected(f"{role} {shown(value)} is not text")


def _event_type(value: Any) -> EventType:
    if value is None:
        raise _Rejected("event_type is empty (NULL); it must be one of 1..8")
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
            except _Rejected as exc:
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
            kind = self._types[event_type] = _rejection(_event_type, event_type)
        return kind

    def _object(self, table_name: Any, table_key: Any) -> tuple[TableInfo, str] | str:
        """The table and canonical key, or why there are none; once per object and cycle, so a
        key is parsed once (the memory starts again past TARGETS_KEPT objects)."""
        obj = self._objects.get((table_name, table_key))
        if obj is None:
            if len(self._objects) >= self.TARGETS_KEPT:
                self._objects.clear()
                self._columns.clear()
            row = {"table_name": table_name, "table_key": table_key}
            obj = self._objects[table_name, table_key] = _rejection(event_object, row, self.ctx)
        return obj

    def _column(self, kind: EventType | str, table_name: Any, column_name: Any) -> EventTarget | str | None:
        """The target (without its key) of an event of the type on the table's column, or why
        there is none; None where the type or the table already fails, which comes first."""
        table = self.ctx.catalog.lookup(table_name) if isinstance(table_name, str) and table_name.strip() else None
        if isinstance(kind, str) or table is None:
            return None
        field = self._columns.get((kind, table.name, column_name))
        if field is None:
            field = self._columns[kind, table.name, column_name] = _rejection(
                event_column, kind, table, "", {"column_name": column_name}
            )
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
        objects, object_rows = _distinct(batch, ("table_name", "table_key"))
        columns, column_rows = _distinct(batch, ("event_type", "table_name", "column_name"))
        kinds = [classifier._kind(value) for (value,) in types]
        kind_of = {value: kind for (value,), kind in zip(types, kinds, strict=True)}
        found_objects = [classifier._object(*values) for values in objects]
        found = [classifier._column(kind_of[event_type], table_name, column_name)
                 for event_type, table_name, column_name in columns]
        targets = [f if isinstance(f, EventTarget) else None for f in found]

        def per_row(values: list[Any], kind: pa.DataType, rows: np.ndarray) -> pa.Array:
            return pa.array(values, kind).take(pa.array(rows, pa.int64()))

        reason = pc.coalesce(
            per_row([k if isinstance(k, str) else None for k in kinds], pa.string(), type_rows),
            per_row([o if isinstance(o, str) else None for o in found_objects], pa.string(), object_rows),
            per_row([f if isinstance(f, str) else None for f in found], pa.string(), column_rows),
        )
        return cls(
            found=targets,
            index=column_rows,
            reason=reason,
            code=per_row([None if isinstance(k, str) else int(k) for k in kinds], pa.int32(), type_rows),
            class_name=per_row([None if isinstance(o, str) else o[0].name for o in found_objects], pa.string(),
                               object_rows),
            key=per_row([None if isinstance(o, str) else o[1] for o in found_objects], pa.string(), object_rows),
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


def _scattered(rows: pa.Array, count: int) -> pa.Array:
    """A mask over `count` rows, true at the given row numbers."""
    mask = np.zeros(count, dtype=bool)
    mask[rows.to_numpy(zero_copy_only=False)] = True
    return pa.array(mask)


def _rejection(check: Callable[..., Any], *args: Any) -> Any:
    """What `check` answers, or the reason it rejects with."""
    try:
        return check(*args)
    except _Rejected as exc:
        return str(exc)


_TIMESTAMP = pa.timestamp("us", tz="UTC")
