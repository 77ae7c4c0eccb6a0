"""For the change-capture formats: each published operation as one change record.

The XDS operation and its change record come from the same merged group of one object's
events (see `columnar._run_changes`), so every format publishes the same operations in
the same order. A change says which columns it carries, their values before and after, and
which of them changed; the change-table and message writers only lay it out.

Mapping (by the group's events): type 1 inserts (the mask marks the key and every logged
column); types 2/3 update, with the logged old values as before-image and the mask marking the
columns whose value changed; type 4 deletes, carrying and marking the key; query-back types
carry the current row (insert for 5 and 7, update for 6 and 8) with no before-image, since none
was logged, and the mask marks the columns read back.
"""
from __future__ import annotations

import datetime as dt
import functools
import marshal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import orjson

from publisher.model.canonical import key_values
from publisher.model.catalog import TableInfo
from publisher.model.events import FIELD_QUERY_BACK, INSERT_QUERY_BACK, LOGGED_UPDATES, ROW_QUERY_BACK
from publisher.model.operation import OperationKind
from publisher.model.values import ValueType, encode_logged

INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"
BEFORE_IMAGE = "BEFOREIMAGE"
CHANGE_OPER = {INSERT: "I", UPDATE: "U", DELETE: "D", BEFORE_IMAGE: "B"}
"""The one-letter `change_oper` of each record operation."""

_INSERT_QB = frozenset(int(t) for t in INSERT_QUERY_BACK)
_ROW_QB = frozenset(int(t) for t in ROW_QUERY_BACK)
_FIELD_QB = frozenset(int(t) for t in FIELD_QUERY_BACK)
_LOGGED_UPDATES = frozenset(int(t) for t in LOGGED_UPDATES)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Change:
    """One published operation as a change: what a change-table row or data message says."""

    table: str
    operation: str
    """INSERT, UPDATE or DELETE."""
    record_id: int
    """Where in the event log: the first event of the operation (the XDS event-id)."""
    event_time: dt.datetime | None
    """When that event was logged (UTC)."""
    transaction_id: str | None
    """The transaction that logged that event, as the event log holds it; None: unknown."""
    after: Mapping[str, str | None]
    """Every column the change carries, with its published text: the key columns always; for an
    insert or update the values after it."""
    before: Mapping[str, str | None] | None
    """An update's logged old values (key columns included); None when nothing was logged."""
    changed: tuple[str, ...]
    """The columns the change mask marks, in table order."""
    fetched: bool
    """True when a value was read back from the table rather than from the event log."""

    def within(self, table: TableInfo) -> Change:
        """The change as an earlier shape of its table describes it (`model.shapes`): without
        the columns that shape did not have, whose values were read back from the table now."""
        known = _column_bits(table)
        if all(name in known for name in (*self.after, *(self.before or ()), *self.changed)):
            return self
        return replace(
            self,
            after={name: value for name, value in self.after.items() if name in known},
            before=None if self.before is None else {n: v for n, v in self.before.items() if n in known},
            changed=tuple(name for name in self.changed if name in known),
        )

    def to_bytes(self) -> bytes:
        """The change as it travels between the stages of one cycle: marshal, a fifth of pickle's
        time, since only this job's own processes (the same Python) ever read it; the time goes
        as microseconds since the epoch, which marshal can carry."""
        utc = as_utc(self.event_time)
        time = None if utc is None else (utc - _EPOCH) // _MICROSECOND
        before = None if self.before is None else dict(self.before)
        return marshal.dumps((self.table, self.operation, self.record_id, time, self.transaction_id,
                              dict(self.after), before, self.changed, self.fetched))

    @classmethod
    def from_bytes(cls, raw: bytes) -> Change:
        table, operation, record_id, time, transaction_id, after, before, changed, fetched = marshal.loads(raw)
        event_time = None if time is None else _EPOCH + dt.timedelta(microseconds=time)
        return cls(table, operation, record_id, event_time, transaction_id, after, before, changed, fetched)

    @property
    def records(self) -> int:
        """Change-table rows of this change: a before-image row and the update, or one row."""
        return 1 if self.before is None else 2


Unit = tuple[int, str | None, str | None, str | None]
"""One event of an operation's run: its effective event type, attr_name, old_text and new_text."""


@dataclass(frozen=True)
class Place:
    """Where in the event log an operation stands: its first event's record_id, time and transaction."""

    record_id: int
    event_time: dt.datetime | None
    transaction_id: str | None


def change_of(
    canonical_key: str, units: Sequence[Unit], place: Place, table: TableInfo,
    row: Mapping[str, str | None] | None, kind: OperationKind,
) -> Change:
    """The change one merged run of an object's events (an XDS operation) stands for. Units are
    tuples, not mappings: a cycle of a million events makes one per event."""
    key = key_texts(table, canonical_key)
    if kind is OperationKind.DELETE:
        return _change(table, DELETE, place, key, None, tuple(key), fetched=False)
    after: dict[str, str | None] = dict(key)
    before: dict[str, str | None] = {}
    read_back: list[str] = []
    logged: list[str] = []
    current = row or {}
    retired = table.retired
    for event_type, name, old_text, new_text in units:
        if event_type in _ROW_QB:
            for column in table.value_columns:
                after[column.name] = current.get(column.name)
                read_back.append(column.name)
            continue
        if name is None:
            raise ValueError(f"table {table.name!r}, key {canonical_key!r}: an event of type {event_type} "
                             "names no column")
        if name in retired and table.column(name) is None:
            continue  # a column the table's version no longer has: its metadata says it is gone
        if event_type in _FIELD_QB:
            after[name] = current.get(name)
            read_back.append(name)
        elif name not in key:
            if event_type in _LOGGED_UPDATES and name not in before:
                before[name] = old_text
            after[name] = new_text
            logged.append(name)
    inserting = kind is OperationKind.ADD or all(unit[0] in _INSERT_QB for unit in units)
    if inserting:
        inserted = [*key, *logged] if logged else []
        return _change(table, INSERT, place, after, None, _ordered(table, [*inserted, *read_back]),
                       fetched=bool(read_back))
    changed = {name for name, old in before.items() if old != after[name]} | set(read_back)
    logged_before = {**key, **before} if before else None
    return _change(table, UPDATE, place, after, logged_before, _ordered(table, changed), fetched=bool(read_back))


def key_texts(table: TableInfo, canonical_key: str) -> dict[str, str | None]:
    """The key columns' values as published text (epoch seconds for a date-time key, `true` for
    a boolean), as a query-back row would carry them."""
    values = key_values(canonical_key, table.key_columns)
    return {name: encode_logged(value_type, str(value))
            for (name, value_type), value in zip(_key_types(table), values, strict=True)}


@functools.lru_cache(maxsize=256)
def _key_types(table: TableInfo) -> tuple[tuple[str, ValueType], ...]:
    types = {c.name: c.value_type for c in table.columns}
    return tuple((name, types[name]) for name, _ in table.key_columns)


def _change(
    table: TableInfo, operation: str, place: Place, after: Mapping[str, str | None],
    before: Mapping[str, str | None] | None, changed: tuple[str, ...], fetched: bool,
) -> Change:
    return Change(
        table=table.name,
        operation=operation,
        record_id=int(place.record_id),
        event_time=as_utc(place.event_time),
        transaction_id=place.transaction_id,
        after=after,
        before=before,
        changed=changed,
        fetched=fetched,
    )


def _ordered(table: TableInfo, names: Iterable[str]) -> tuple[str, ...]:
    wanted = set(names)
    return tuple(c.name for c in table.data_columns if c.name in wanted)


def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """Event times are UTC; a naive one is read as UTC."""
    if value is None or value.tzinfo is dt.UTC:
        return value
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def little_endian_mask(bits: Iterable[int]) -> bytes:
    """Bit n set for each n: byte 0 holds bits 0-7 (bit 0 lowest), trailing zero bytes dropped."""
    value = 0
    for bit in bits:
        value |= 1 << bit
    return value.to_bytes((value.bit_length() + 7) // 8, "little")


@functools.lru_cache(maxsize=4096)
def transaction_hex(transaction_id: str | None) -> str | None:
    """The transaction as a hex string: a numeric id as 32 hex digits (128 bits), any other id
    as the hex of its UTF-8 bytes."""
    if transaction_id is None:
        return None
    text = transaction_id.strip()
    if text.isascii() and text.isdigit() and int(text) < 1 << 128:
        return f"{int(text):032X}"
    return text.encode("utf-8").hex().upper()


def trans_ind(index: int, total: int) -> int:
    """Where a record stands in its transaction: 0 first, 1 middle, 2 last, 3 the only one."""
    if total == 1:
        return 3
    if index == 0:
        return 0
    return 2 if index == total - 1 else 1


@dataclass(frozen=True)
class TransactionPlace:
    """Where a change stands among its transaction's changes in the cycle, counted as messages
    (one per change) and as change-table rows (a before-image is a row of its own)."""

    index: int
    total: int
    row_index: int
    rows: int


def transaction_places(changes: Sequence[Change]) -> list[TransactionPlace]:
    """The place of each change, given in publication order. A change without a transaction is a
    transaction of its own."""
    totals: dict[str, tuple[int, int]] = {}
    for change in changes:
        if change.transaction_id is not None:
            count, rows = totals.get(change.transaction_id, (0, 0))
            totals[change.transaction_id] = (count + 1, rows + change.records)
    seen: dict[str, tuple[int, int]] = {}
    places = []
    for change in changes:
        if change.transaction_id is None:
            places.append(TransactionPlace(0, 1, 0, change.records))
            continue
        index, row_index = seen.get(change.transaction_id, (0, 0))
        total, rows = totals[change.transaction_id]
        places.append(TransactionPlace(index, total, row_index, rows))
        seen[change.transaction_id] = (index + 1, row_index + change.records)
    return places


NO_TIME = "0" * 16
"""The time part of a change sequence before any change had a time."""


@functools.lru_cache(maxsize=1024)
def time_prefix(time: dt.datetime | None) -> str:
    """YYYYMMDDHHmmSShh of a UTC time, to 1/100 s. Cached: a transaction's events mostly share
    one time (PostgreSQL's now() is the transaction's start), and an equal instant in another
    zone gives the same text."""
    if time is None:
        return NO_TIME
    t = as_utc(time)
    assert t is not None
    return f"{t.year:04d}{t.month:02d}{t.day:02d}{t.hour:02d}{t.minute:02d}{t.second:02d}{t.microsecond // 10000:02d}"


@dataclass(frozen=True)
class StampedChange:
    """A change with its place in the publisher's change sequence and in its transaction."""

    change: Change
    change_seq: str
    """35 characters: the time part (YYYYMMDDHHmmSShh, never decreasing) and a 19-digit change
    number, increasing across every change table and message of the publisher, across runs."""
    place: TransactionPlace

    def within(self, table: TableInfo) -> StampedChange:
        """`Change.within` the table's earlier shape, in the same place."""
        change = self.change.within(table)
        return self if change is self.change else replace(self, change=change)

    @property
    def number(self) -> int:
        return int(self.change_seq[16:])


def stamp(
    changes: Iterable[Change], places: Iterable[TransactionPlace], first_number: int, after_time: str
) -> Iterator[StampedChange]:
    """Number changes given in publication order from `first_number`, lazily; the time part is
    the change's own time, or the latest time part before it when that is later (so the sequence
    never decreases when clocks or event times do)."""
    latest = after_time
    for number, (change, place) in enumerate(zip(changes, places, strict=True), start=first_number):
        latest = max(latest, time_prefix(change.event_time))
        yield StampedChange(change, f"{latest}{number:019d}", place)


def record_length(values: Mapping[str, str | None]) -> int:
    """A record's length in bytes (the trail header's RecLength): its columns and published
    values as compact UTF-8 JSON."""
    return len(orjson.dumps(values if type(values) is dict else dict(values)))


def column_mask(table: TableInfo, names: Iterable[str], first_bit: int = 0) -> bytes:
    """`little_endian_mask` over the table's columns (its own order) from `first_bit` on."""
    return _column_mask(table, frozenset(names), first_bit)


@functools.lru_cache(maxsize=4096)
def _column_mask(table: TableInfo, names: frozenset[str], first_bit: int) -> bytes:
    """Cached: a cycle's changes carry a handful of column sets."""
    bits = _column_bits(table)
    return little_endian_mask(first_bit + bits[name] for name in names)


@functools.lru_cache(maxsize=256)
def _column_bits(table: TableInfo) -> dict[str, int]:
    return {c.name: i for i, c in enumerate(table.data_columns)}
