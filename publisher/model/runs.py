"""Runs of record_ids: how a cycle names the events it read and the statuses they end with.

Kept as runs (first..last) rather than ids, since a window's ids are mostly consecutive: the
outputs record them with a cycle's documents, and the acknowledgement writes them back.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from publisher.model.events import Status


@dataclass(frozen=True)
class IdRun:
    """record_ids first..last, every one of them read by the cycle."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


StatusRun = tuple[Status, IdRun]
"""Consecutive record_ids the cycle read, all with one outcome."""


def id_runs(record_ids: Iterable[int]) -> list[IdRun]:
    """The read record_ids as runs of consecutive numbers: a gap (an id not read) ends a run."""
    runs: list[IdRun] = []
    first = last = None
    for rid in sorted(record_ids):
        if last is not None and rid == last + 1:
            last = rid
            continue
        if first is not None and last is not None:
            runs.append(IdRun(first, last))
        first = last = rid
    if first is not None and last is not None:
        runs.append(IdRun(first, last))
    return runs


def status_runs(read: Iterable[IdRun], exceptions: Mapping[int, Status]) -> list[StatusRun]:
    """The read runs with every id's status (S unless `exceptions` says otherwise), as runs of
    one status, in record_id order."""
    noted = sorted(exceptions)
    pieces: list[StatusRun] = []
    for run in sorted(read, key=lambda r: r.first):
        at = run.first
        for rid in noted[bisect.bisect_left(noted, run.first) : bisect.bisect_right(noted, run.last)]:
            if rid > at:
                pieces.append((Status.SUCCESS, IdRun(at, rid - 1)))
            pieces.append((exceptions[rid], IdRun(rid, rid)))
            at = rid + 1
        if at <= run.last:
            pieces.append((Status.SUCCESS, IdRun(at, run.last)))
    return list(joined_runs(pieces))


def joined_runs(runs: Iterable[StatusRun]) -> Iterator[StatusRun]:
    """Runs in record_id order, each joined with the next when that one continues it with the
    same status (as where two streams of runs meet)."""
    pending: StatusRun | None = None
    for status, run in runs:
        if pending is not None and pending[0] is status and run.first == pending[1].last + 1:
            pending = (status, IdRun(pending[1].first, run.last))
            continue
        if pending is not None:
            yield pending
        pending = (status, run)
    if pending is not None:
        yield pending


def coded_runs(record_ids: np.ndarray, codes: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(code, first, last) of each run of consecutive record_ids (ascending) with one code:
    columns compared with numpy, so that only a run costs Python work."""
    if not len(record_ids):
        return
    starts = np.flatnonzero(np.concatenate(([True], (np.diff(record_ids) != 1) | (codes[1:] != codes[:-1]))))
    ends = np.concatenate((starts[1:] - 1, [len(record_ids) - 1]))
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield int(codes[start]), int(record_ids[start]), int(record_ids[end])


def changed_runs(before: Iterable[StatusRun], after: Iterable[StatusRun]) -> list[tuple[Status, Status, IdRun]]:
    """Where `after` gives the ids `before` gives (the same ids, in record_id order) another
    status: (status before, status after, run), in maximal runs of one such pair."""
    changes: list[tuple[Status, Status, IdRun]] = []
    old = iter(before)
    current: StatusRun | None = next(old, None)
    for status, run in after:
        at = run.first
        while at <= run.last:
            if current is None or not current[1].first <= at <= current[1].last:
                raise ValueError(f"record_id {at} has a status after but none before")
            end = min(run.last, current[1].last)
            if current[0] is not status:
                last = changes[-1] if changes else None
                if last is not None and last[:2] == (current[0], status) and last[2].last + 1 == at:
                    changes[-1] = (current[0], status, IdRun(last[2].first, end))
                else:
                    changes.append((current[0], status, IdRun(at, end)))
            at = end + 1
            if at > current[1].last:
                current = next(old, None)
    if current is not None:
        raise ValueError(f"record_id {current[1].first} has a status before but none after")
    return changes
