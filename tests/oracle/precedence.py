"""Precedence (docs/concepts/event-types.md) one object at a time: which of an object's events survive, which are
redundant, which lost their object. The oracle of `rules.columnar`'s group operations."""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from publisher.model.events import FIELD_QUERY_BACK, INSERTING, LOGGED_VALUES, ROW_QUERY_BACK, EventType, Status
from publisher.rules.precedence import VANISHED_REASON, CurrentRow, row_problem, unreadable_reason

_ROW_QB = frozenset(int(t) for t in ROW_QUERY_BACK)
_FIELD_QB = frozenset(int(t) for t in FIELD_QUERY_BACK)
_LOGGED_FIELD = frozenset(int(t) for t in LOGGED_VALUES)
_DELETE = int(EventType.DELETE_ROW)
_INSERTING = frozenset(int(t) for t in INSERTING)
QUERY_BACK_TYPES = _ROW_QB | _FIELD_QB


class Outcome(enum.StrEnum):
    """What precedence decides for a publishable event."""

    SURVIVES = "survives"
    """Published in its own right (non-query-back event nothing beat)."""
    WINS = "wins"
    """The first winning query-back event of its object or field: one read, one publication."""
    REDUNDANT = "redundant"
    """Beaten by a query-back event whose operation carries its effect: status S."""
    VANISHED = "vanished"
    """A query-back event whose object no longer exists: publishes nothing, status W."""
    UNREADABLE = "unreadable"
    """A query-back event whose current value cannot be published: status E."""


PUBLISHED = (Outcome.SURVIVES, Outcome.WINS)


@dataclass(frozen=True)
class Decision:
    outcome: str
    effective_type: int
    """The type the event publishes as: a field query-back takes the strongest type (7 < 8) of its field."""
    reason: str | None = None
    carries: tuple[str, ...] = ()
    """The multi-valued attributes whose current values the event publishes besides its own: an
    object's insert carries them (see `decide`)."""

    @property
    def status(self) -> Status:
        if self.outcome == Outcome.VANISHED:
            return Status.WARNING
        if self.outcome == Outcome.UNREADABLE:
            return Status.ERROR
        return Status.SUCCESS


def needs_query_back(events: Sequence[Mapping[str, Any]]) -> bool:
    return any(e["event_type_code"] in QUERY_BACK_TYPES for e in events)


def decide(
    events: Sequence[Mapping[str, Any]], current: CurrentRow | None, insert_row_adds: bool = False,
    multi_valued: frozenset[str] = frozenset(), retired: frozenset[str] = frozenset(),
) -> list[Decision]:
    """The decision for each of one object's publishable events, given in processing order.

    `current` is the object's row as query-back read it, None when it no longer exists (or
    when no event of the object needed it). A field query-back publishes the field's current
    value at its first event after the object's last delete: published earlier, the delete
    would take the value away again; with no such event, the delete and what follows it carry
    the field's state, and the field's query-backs are redundant. With `insert_row_adds` (a
    type 5 publishes an `<add>`, which a consumer refuses for an object it holds) the same goes
    for row query-backs, and deletes always stand; and so it goes without it when the object's
    insert after its last delete is not among the events (it comes later, as its own `<add>`).

    A logical class's `multi_valued` attributes (child rows, logged as the parent's events) are
    read with every object, so `current` None means the object is gone: then their events are
    redundant (the object's delete took the values, or its insert, still to come, will carry
    them). The object's insert after its last delete carries their current values, like a field
    query-back, so the values logged around it are redundant (a child written before its parent
    cannot make a change ahead of the object's `<add>`); and the events a delete takes along
    (`_taken_by_delete`) are redundant, and so is the removal of a value the attribute still
    holds (two child rows whose values publish the same text: one removed, the other stays).

    A removal of a `retired` attribute's values (type 3 of a column a migration took away) is
    beaten by nothing: a row query-back sets the columns the table has now, not that one.
    """
    exists = current is not None
    problems: Mapping[str, str] = current.problems if current is not None else {}
    taken = _taken_by_delete(events, multi_valued) if multi_valued else frozenset()
    winners = _Winners(events, exists, problems, insert_row_adds, taken, multi_valued)
    decisions = []
    for index, event in enumerate(events):
        t = event["event_type_code"]
        name = event["attr_name"]
        if index in taken or (name in multi_valued and (not exists or _still_held(event, current))):
            decisions.append(Decision(Outcome.REDUNDANT, winners.field_type.get(name, t)))
        elif index == winners.carrier:
            if t in _FIELD_QB:
                decisions.append(Decision(Outcome.WINS, winners.field_type[name], carries=winners.carried))
            else:
                decisions.append(Decision(Outcome.SURVIVES, t, carries=winners.carried))
        elif t in _ROW_QB:
            if not exists:
                decisions.append(Decision(Outcome.VANISHED, t, VANISHED_REASON))
            elif problems:
                decisions.append(Decision(Outcome.UNREADABLE, t, unreadable_reason(row_problem(problems))))
            else:
                decisions.append(Decision(Outcome.WINS if index == winners.row else Outcome.REDUNDANT, t))
        elif t in _FIELD_QB:
            effective = winners.field_type[name]
            if not exists:
                decisions.append(Decision(Outcome.VANISHED, effective, VANISHED_REASON))
            elif name in problems:
                decisions.append(Decision(Outcome.UNREADABLE, effective, unreadable_reason(problems[name])))
            elif winners.row is not None or index != winners.fields.get(name):
                decisions.append(Decision(Outcome.REDUNDANT, effective))
            else:
                decisions.append(Decision(Outcome.WINS, effective))
        elif (t == _DELETE and insert_row_adds) or (t == EventType.UPDATE_FIELD_REMOVE_ALL and name in retired):
            decisions.append(Decision(Outcome.SURVIVES, t))
        elif winners.row is not None or (t in _LOGGED_FIELD and name in winners.fields):
            decisions.append(Decision(Outcome.REDUNDANT, t))
        else:
            decisions.append(Decision(Outcome.SURVIVES, t))
    return decisions


def _still_held(event: Mapping[str, Any], current: CurrentRow | None) -> bool:
    """A value removed from a multi-valued attribute that holds it now."""
    old = event["old_text"]
    return (current is not None and event["event_type_code"] == EventType.UPDATE_FIELD and event["new_text"] is None
            and old is not None and old in current.multi.get(event["attr_name"], ()))


def _taken_by_delete(events: Sequence[Mapping[str, Any]], multi_valued: frozenset[str]) -> frozenset[int]:
    """The events of multi-valued attributes a delete of the object makes redundant: those the
    delete follows with nothing but such events between (a parent deleted with its children:
    one `<delete>`), and those after a delete before the object is inserted again (there is no
    object to change)."""
    is_child = [e["attr_name"] in multi_valued and e["event_type_code"] != _DELETE for e in events]
    taken: set[int] = set()
    pending: list[int] = []
    gone = False
    for index, event in enumerate(events):
        if is_child[index]:
            if gone:
                taken.add(index)
            else:
                pending.append(index)
            continue
        t = event["event_type_code"]
        if t == _DELETE:
            taken.update(pending)
            gone = True
        elif t in _INSERTING:
            gone = False
        pending = []
    return frozenset(taken)


class _Winners:
    """Which query-back events of an object take effect: `row`, the index of the winning row
    query-back (None: none wins); `fields`, the winning field query-back's index per field;
    `field_type`, the strongest type (7 < 8) logged per field."""

    def __init__(
        self, events: Sequence[Mapping[str, Any]], exists: bool, problems: Mapping[str, str], rows_after_delete: bool,
        taken: frozenset[int] = frozenset(), multi_valued: frozenset[str] = frozenset(),
    ) -> None:
        last_delete = max((i for i, e in enumerate(events) if e["event_type_code"] == _DELETE), default=-1)
        # A row query-back before the last delete stands for the object only if its insert
        # follows in the window: otherwise that insert comes later and publishes an <add>.
        reinserted = any(e["event_type_code"] in _INSERTING for e in events[last_delete + 1:])
        self.row: int | None = None
        self.fields: dict[str, int] = {}
        self.field_type: dict[str, int] = {}
        for index, event in enumerate(events):
            t = event["event_type_code"]
            if t in _ROW_QB:
                if self.row is None and exists and not problems and (
                        index > last_delete or (reinserted and not rows_after_delete)):
                    self.row = index
            elif t in _FIELD_QB:
                name = event["attr_name"]
                self.field_type[name] = max(self.field_type.get(name, t), t)
                if index > last_delete and exists and name not in problems and index not in taken:
                    self.fields.setdefault(name, index)
        self.carrier: int | None = None
        """The object's insert that carries its multi-valued attributes (`carried`)."""
        self.carried: tuple[str, ...] = ()
        if multi_valued and exists and self.row is None:
            inserts = (i for i, e in enumerate(events) if i > last_delete and self._inserts(i, e, multi_valued))
            self.carrier = next(inserts, None)
        if self.carrier is not None:
            self.carried = tuple(sorted(multi_valued - set(problems)))
            self.fields.update(dict.fromkeys(self.carried, self.carrier))

    def _inserts(self, index: int, event: Mapping[str, Any], multi_valued: frozenset[str]) -> bool:
        """A published event of the object's own insert: a type 1 no query-back beats, or the
        winning type 7 of its column."""
        name = event["attr_name"]
        if name in multi_valued:
            return False
        t = event["event_type_code"]
        return (t == EventType.INSERT_FIELD and name not in self.fields) or (
            t == EventType.INSERT_FIELD_QUERY_BACK and self.fields.get(name) == index)
