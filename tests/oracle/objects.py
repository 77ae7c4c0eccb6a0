"""Query back, precedence and operations one object at a time over a stream of publishable
events grouped by object, in slices of about `SLICE_EVENTS` events (one bulk read of current
rows per slice): the oracle of `pipeline.resolve`, which the property tests hold it equal to."""
from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from oracle.operations import PublishedOperation, object_operations
from oracle.precedence import decide, needs_query_back
from publisher.config import InsertRowOperation
from publisher.model.events import Status
from publisher.pipeline.objects import SLICE_EVENTS, ObjectsContext
from publisher.pipeline.queryback import CurrentRows
from publisher.pipeline.timing import StepTimer
from publisher.rules.operations import References
from publisher.rules.order import position
from publisher.rules.precedence import CurrentRow


@dataclass(frozen=True)
class StatusNote:
    """An event whose status is not S, and why."""

    record_id: int
    status: Status
    reason: str


def publish_objects(
    events: Iterable[Mapping[str, Any]],
    ctx: ObjectsContext,
    timer: StepTimer | None = None,
    reader: CurrentRows | None = None,
) -> Iterator[StatusNote | PublishedOperation]:
    """The operations of the stream's objects, and a note for each event that is not S.

    `timer`, when given, gets the time spent per step: query_back, precedence, xml.
    `reader`, when given, reads the current rows; else a reader of the stream's own does.
    """
    spent = timer if timer is not None else StepTimer()
    if reader is None:
        with CurrentRows(ctx.query_back) as own:
            yield from publish_objects(events, ctx, spent, own)
        return
    pending: list[list[Mapping[str, Any]]] = []
    pending_events = 0
    for group in _by_object(events):
        pending.append(group)
        pending_events += len(group)
        if pending_events >= SLICE_EVENTS:
            yield from _publish_slice(pending, reader, ctx, spent)
            pending, pending_events = [], 0
    if pending:
        yield from _publish_slice(pending, reader, ctx, spent)


def publish_read(
    events: Iterable[Mapping[str, Any]],
    current: Mapping[tuple[str, str], CurrentRow],
    ctx: ObjectsContext,
    spent: StepTimer,
) -> list[StatusNote | PublishedOperation]:
    """`publish_objects` for events whose objects' current rows are already read."""
    return _decided(list(_by_object(events)), current, ctx, spent)


def _by_object(events: Iterable[Mapping[str, Any]]) -> Iterator[list[Mapping[str, Any]]]:
    group: list[Mapping[str, Any]] = []
    current: tuple[str, str] | None = None
    for event in events:
        obj = (event["class_name"], event["canonical_key"])
        if obj != current and group:
            yield group
            group = []
        current = obj
        group.append(event)
    if group:
        yield group


def _publish_slice(
    groups: list[list[Mapping[str, Any]]], reader: CurrentRows, ctx: ObjectsContext, spent: StepTimer
) -> list[StatusNote | PublishedOperation]:
    started = time.perf_counter()
    wanted: dict[str, list[str]] = defaultdict(list)
    tables = ctx.operations.tables
    for group in groups:
        if needs_query_back(group) or tables[group[0]["class_name"]].multi_valued:
            wanted[group[0]["class_name"]].append(group[0]["canonical_key"])
    current = reader.read(wanted) if wanted else {}
    spent.add("query_back", time.perf_counter() - started)
    return _decided(groups, current, ctx, spent, reader)


def _decided(
    groups: list[list[Mapping[str, Any]]],
    current: Mapping[tuple[str, str], CurrentRow],
    ctx: ObjectsContext,
    spent: StepTimer,
    reader: CurrentRows | None = None,
) -> list[StatusNote | PublishedOperation]:
    """Precedence and operations of objects whose current rows are read; `reader` reads the
    objects their references name (a class with references never comes without one)."""
    decided = time.perf_counter()
    out: list[StatusNote | PublishedOperation] = []
    decisions_of = []
    tables = ctx.operations.tables
    for group in groups:
        group.sort(key=position)
        row = current.get((group[0]["class_name"], group[0]["canonical_key"]))
        table = tables[group[0]["class_name"]]
        decisions = decide(group, row, ctx.operations.insert_row_operation == InsertRowOperation.ADD,
                           table.multi_valued_names, frozenset(table.retired))
        decisions_of.append((group, decisions, row))
        for event, decision in zip(group, decisions, strict=True):
            if decision.status is not Status.SUCCESS:
                out.append(StatusNote(int(event["record_id"]), decision.status, decision.reason or ""))
    built = time.perf_counter()
    spent.add("precedence", built - decided)
    references = _references(groups, current, ctx, reader, spent)
    for group, decisions, row in decisions_of:
        out.extend(object_operations(group, decisions, row, ctx.operations, references))
    spent.add("xml", time.perf_counter() - built)
    return out


def _references(
    groups: list[list[Mapping[str, Any]]],
    current: Mapping[tuple[str, str], CurrentRow],
    ctx: ObjectsContext,
    reader: CurrentRows | None,
    spent: StepTimer,
) -> References | None:
    """The objects the slice's references name, read in bulk: which of them exist."""
    tables = ctx.operations.tables
    named = [g for g in groups if tables[g[0]["class_name"]].references]
    if not named:
        return None
    assert reader is not None, "a class with references is resolved object by object, with a reader"
    started = time.perf_counter()
    references = References(ctx.query_back.tables, ctx.operations.schema_label)
    wanted: dict[str, set[str]] = defaultdict(set)
    for group in named:
        table = tables[group[0]["class_name"]]
        row = current.get((table.name, group[0]["canonical_key"]))
        for attribute, target in table.references:
            texts = [t for e in group if e["attr_name"] == attribute for t in (e["old_text"], e["new_text"])]
            if row is not None:
                texts += [row.values.get(attribute), *row.multi.get(attribute, ())]
            for text in texts:
                found = None if text is None else references.target(target, text)
                if found is not None:
                    wanted[found[0]].add(found[1])
    existing = reader.read({name: sorted(keys) for name, keys in wanted.items()}, children=False)
    spent.add("query_back", time.perf_counter() - started)
    return dataclasses.replace(references, existing=frozenset(existing))
