"""The driver path: a cycle's stages in the driver alone, without any Spark job: a small cycle,
whose latency a job's fixed cost would dominate, and on a local master a large one too, whose
rows' trip through the JVM costs more than executors sharing the driver's cores give. Each
stage's result is an Arrow table in the driver's memory; a large cycle is classified and
resolved by a thread per core."""
from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher import failpoints
from publisher.errors import OutputStateError
from publisher.model.arrow import arrow_schema_of
from publisher.model.events import Status
from publisher.model.runs import IdRun, StatusRun, coded_runs
from publisher.outputs.documents import DocumentWritten, write_documents
from publisher.outputs.formats import FormatsWritten, reserve_change_numbers, write_part
from publisher.outputs.outcomes import STATUS_CODES, append_reject_rows
from publisher.pipeline.objects import publishable_fields
from publisher.pipeline.read import read_batches
from publisher.pipeline.resolve import RESOLVED_SCHEMA, object_slices, resolve_batches
from publisher.pipeline.stages import REJECT_FIELDS, CyclePath, Outcomes
from publisher.pipeline.timing import StepTimer
from publisher.rules.changes import Change, stamp, time_prefix, transaction_places
from publisher.rules.classify import Disposition
from publisher.rules.classify_batch import BatchClassifier
from publisher.rules.order import arrow_sort_keys


@dataclass(frozen=True)
class Resolved:
    """What resolving gave: a row per event that is not S, and the operations in publication
    order (ordered once, for the documents and the formats alike)."""

    decided: pa.Table
    operations: pa.Table
    """op_time, event_id, xml, change."""


class InDriver(CyclePath[pa.Table, Resolved]):
    def read_and_classify(self) -> pa.Table:
        window = self.plan.window
        classify = BatchClassifier(self.plan.classify, self.plan.future_events)
        threads = _threads(window.count)
        read = read_batches(window, window.lo, window.hi)
        if threads == 1:
            batches = [classify(batch) for batch in read]
        else:  # this thread reads while the pool's classify, in the read's order
            with ThreadPoolExecutor(threads, thread_name_prefix="classify") as pool:
                batches = list(pool.map(classify, read))
        failpoints.reached("after_read")
        return pa.Table.from_batches(batches, schema=classify.schema)

    def resolve(self, classified: pa.Table) -> Resolved:
        fields = list(publishable_fields(self.plan.formats is not None))
        publishable = classified.select([*fields, "disposition"])
        publishable = publishable.filter(pc.equal(publishable["disposition"], Disposition.PUBLISH)).select(fields)
        by_object = sorted_by(publishable, [("class_name", "ascending"), ("canonical_key", "ascending")])
        resolved = self._resolve_in_parts(by_object)
        is_operation = pc.is_valid(resolved["xml"])
        operations = resolved.filter(is_operation).select(["op_time", "event_id", "xml", "change"])
        decided = resolved.filter(pc.invert(is_operation)).select(["record_id", "status", "reason"])
        return Resolved(decided, publication_order(operations))

    def _resolve_in_parts(self, by_object: pa.Table) -> pa.Table:
        """The events sorted by object, cut where an object ends into a part per core and
        resolved by a thread each (with a connection each), as Spark's tasks resolve their
        partitions: Arrow's column operations and the database's reads run outside the GIL."""
        schema = arrow_schema_of(RESOLVED_SCHEMA)
        threads = _threads(by_object.num_rows)
        parts = list(object_slices(by_object, -(-by_object.num_rows // threads))) if by_object.num_rows else []
        timers = [StepTimer() for _ in parts]

        def resolved(part: pa.Table, spent: StepTimer) -> pa.Table:
            return pa.Table.from_batches(list(resolve_batches(part.to_batches(), self.plan.objects, spent)),
                                         schema=schema)

        if len(parts) <= 1:
            tables = [resolved(part, timer) for part, timer in zip(parts, timers, strict=True)]
        else:
            with ThreadPoolExecutor(len(parts), thread_name_prefix="resolve") as pool:
                tables = list(pool.map(resolved, parts, timers))
        spent = StepTimer(self.steps.setdefault("resolve", {}))
        for timer in timers:
            for step, seconds in timer.seconds.items():
                spent.add(step, seconds)
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def write_documents(self, resolved: Resolved, cycle_number: int) -> list[DocumentWritten]:
        xml = resolved.operations["xml"].combine_chunks()
        return write_documents(xml, self.plan.output, cycle_number, self.plan.batch_size)

    def write_formats(self, resolved: Resolved, cycle_number: int) -> FormatsWritten:
        changes = [Change.from_bytes(change) for change in resolved.operations["change"].to_pylist() if change]
        formats = self.plan.cycle_formats(cycle_number)
        latest = time_prefix(max((c.event_time for c in changes if c.event_time is not None), default=None))
        numbers = reserve_change_numbers(self.plan.output, len(changes), latest)
        stamped = stamp(changes, transaction_places(changes), numbers.first, numbers.after_time)
        return formats.finish([write_part(stamped, formats.started, 0)])

    def provisional_statuses(self, classified: pa.Table) -> list[StatusRun]:
        record_ids, error, codes = _classified_codes(classified)
        return _status_runs(record_ids, codes)

    def outcomes(self, classified: pa.Table, resolved: Resolved, cycle_number: int) -> Outcomes:
        """Every read row's status as runs, and the rejected rows' lines, as column operations:
        a cycle that rejects or warns of every row costs no Python per row."""
        record_ids, error, codes = _classified_codes(classified)
        decided = resolved.decided
        if decided.num_rows:
            found = pc.index_in(decided["record_id"], value_set=classified["record_id"])
            if found.null_count:
                missing = decided["record_id"].filter(pc.is_null(found))[0].as_py()
                raise OutputStateError(f"a decided status for record_id {missing} was not read")
            at = found.to_numpy(zero_copy_only=False)
            codes[at] = pc.index_in(decided["status"], value_set=pa.array(STATUS_CODES)).to_numpy(zero_copy_only=False)
        statuses = _status_runs(record_ids, codes)
        rejected = _rejected_rows(classified, error, decided)
        output = self.plan.output
        return Outcomes(events=classified.num_rows, statuses=statuses,
                        append_rejects=lambda: append_reject_rows(output, rejected), loopback=_loopback(classified))


def _classified_codes(classified: pa.Table) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """The read rows' record_ids, which of them classification rejected, and each one's status
    code as classified (E for those, S for the rest)."""
    record_ids = classified["record_id"].to_numpy()
    error = pc.equal(classified["disposition"], Disposition.ERROR)
    codes = np.where(error.to_numpy(zero_copy_only=False), CODES[Status.ERROR], CODES[Status.SUCCESS])
    return record_ids, error, codes


def _loopback(classified: pa.Table) -> dict[str, int]:
    """The rows classified as loopback, by perpetrator."""
    passed = classified.filter(pc.equal(classified["disposition"], Disposition.LOOPBACK))
    if not passed.num_rows:
        return {}
    counted = pc.value_counts(passed["perpetrator"].combine_chunks()).to_pylist()
    return {str(found["values"]): int(found["counts"]) for found in counted}


def _status_runs(record_ids: np.ndarray, codes: np.ndarray) -> list[StatusRun]:
    order = np.argsort(record_ids, kind="stable")
    return [(Status(STATUS_CODES[code]), IdRun(first, last))
            for code, first, last in coded_runs(record_ids[order], codes[order])]


THREADS = os.cpu_count() or 1
"""Threads a large cycle's classification and resolve take in the driver: one per core."""
PART_EVENTS = 100_000
"""Events each thread has at least; a smaller cycle runs in one, for its latency."""


def _threads(events: int) -> int:
    return max(1, min(THREADS, events // PART_EVENTS))


CODES = {Status(code): index for index, code in enumerate(STATUS_CODES)}
"""Each status's place in STATUS_CODES."""


def _rejected_rows(classified: pa.Table, error: pa.ChunkedArray, decided: pa.Table) -> pa.Table:
    """The rows made E, by classification or by resolve (whose reason then stands), as read,
    with their reason, in record_id order."""
    fields = [*REJECT_FIELDS, "reason"]
    rows = classified.filter(error).select(fields)
    later = decided.filter(pc.equal(decided["status"], Status.ERROR.value))
    if later.num_rows:
        values = classified.filter(pc.is_in(classified["record_id"], value_set=later["record_id"]))
        values = values.select(list(REJECT_FIELDS)).join(later.select(["record_id", "reason"]), "record_id")
        rows = pa.concat_tables([rows, values.select(fields).cast(rows.schema)])
    return rows.sort_by("record_id")


def publication_order(operations: pa.Table) -> pa.Table:
    """Operations by their first event's place in processing (`distributed.placed_changes`
    orders them in Spark SQL; a test holds the two equal)."""
    return sorted_by(operations, arrow_sort_keys("op_time", "event_id"))


def sorted_by(table: pa.Table, keys: Sequence[tuple[str, ...]]) -> pa.Table:
    """The table sorted, its columns made one chunk first: a take from many chunks costs twice
    the copy (the read's and the parts' batches leave a column in dozens)."""
    table = table.combine_chunks()
    return table.take(pc.sort_indices(table, sort_keys=keys))


MEMORY_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def reuse_freed_memory() -> None:
    """Give the process Arrow's jemalloc pool, which keeps the pages it frees for a moment
    before returning them, unless `ARROW_DEFAULT_MEMORY_POOL` names a pool. A cycle in the
    driver frees and allocates hundreds of MiB between its steps; with mimalloc, this pyarrow's
    default, the sort of a 1M cycle's operations (163 MiB) took 0.72 s in the cycle against
    0.20 s with jemalloc, nearly all of it the CPU's. Where this pyarrow has no jemalloc, the
    default stays."""
    if os.environ.get(MEMORY_POOL_VARIABLE):
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:
        pass
