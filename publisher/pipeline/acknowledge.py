"""Write the outcome of every event back to the event log, in one transaction.

Set-based: W and E rows by chunks of ids, S rows by chunks of record_id ranges, never one
statement per row (as the database names lists of ids, `Dialect.value_lists`: where a chunk goes
as one array, a statement or two a cycle).
Only exactly the rows the cycle read are touched, and only while they are still `N`.

The outcome comes as runs of consecutive record_ids with one status each, in record_id order,
so that a cycle of any size and any mix of statuses is acknowledged in memory bounded by a
statement's worth of ids, whether it hands over a list or streams the runs from files.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, Table, delete, update
from sqlalchemy.exc import DBAPIError

from publisher.config import Config
from publisher.dialects import dialect_of
from publisher.errors import TransientError, root_cause
from publisher.failpoints import reached
from publisher.model.events import Status
from publisher.model.runs import IdRun, StatusRun, changed_runs
from publisher.pipeline.event_log import EventLogSource
from publisher.pipeline.retention import Readers, delete_purgeable

_log = logging.getLogger("publisher")

ANALYZE_AFTER = 10_000
"""Acknowledged rows from which a cycle refreshes the event log's planner statistics."""


class AcknowledgeError(TransientError):
    """The event log did not accept the statuses as expected; nothing was written."""


@dataclass(frozen=True)
class Acknowledging:
    """What the status mode's acknowledgement needs of the configuration, resolved once."""

    log: EventLogSource
    readers: Readers
    delete_processed_rows: bool
    post_polling_statements: tuple[str, ...]

    @classmethod
    def of(cls, config: Config, log: EventLogSource) -> Acknowledging:
        settings = config.publisher
        return cls(log, Readers.of(config), settings.delete_processed_rows, settings.post_polling_statements)


def acknowledge_runs(
    engine: Engine, settings: Acknowledging, runs: Iterable[StatusRun], run_post_polling: bool
) -> Mapping[Status, int]:
    """Give every read event its status (or delete S and W rows), then run the post-polling
    statements; all or nothing."""
    with engine.begin() as conn:
        written = mark_runs(conn, settings, runs)
        end_marking(conn, settings, run_post_polling)
    return written


def _at_failpoint() -> None:
    reached("acknowledge")


def mark_runs(
    conn: Connection, settings: Acknowledging, runs: Iterable[StatusRun],
    on_statement: Callable[[], None] = _at_failpoint,
) -> Mapping[Status, int]:
    """Give every read event its status (or delete S and W rows), in `conn`'s transaction, which
    the caller commits; `on_statement` is called after each statement.

    `runs` covers exactly the read events, in record_id order; it is gone through twice, so it
    is a collection or an object whose every iteration starts over, not an iterator. The W and
    E rows are set by id, then the S rows by ranges of read ids (W and E rows within them are
    no longer N by then), so no statement carries more than a statement's ids or ranges
    (`ValueLists.ids_per_statement`, `ranges_per_statement`: the database's, as is how a statement
    names them, `Dialect.value_lists`) whatever the cycle's size (a range of W and E rows only
    needs none), and every statement must change exactly the rows it names.
    """
    if isinstance(runs, Iterator):
        raise TypeError("acknowledge_runs goes through the runs twice: pass a collection, not an iterator")
    table = settings.log.table
    names = settings.log.columns
    record_id = table.c[names.record_id]
    status = table.c[names.status]
    written: dict[Status, int] = {}
    lists = dialect_of(conn).value_lists()
    analysed = False
    # Subscribers may still need the rows: they get their statuses, and go once no reader needs them.
    deleting = settings.delete_processed_rows and not settings.readers.subscribers

    def apply(conn: Connection, outcome: Status, ranges: Sequence[IdRun], expected: int) -> None:
        nonlocal analysed
        removable = deleting and outcome is not Status.ERROR
        if outcome is not Status.SUCCESS:
            still_new = (status == Status.NEW.value, lists.ids(record_id, ranges))
        else:
            if not analysed and lists.needs_statistics(ranges):
                analyse(conn, table, (names.status, names.record_id))
                analysed = True
            still_new = (status == Status.NEW.value, lists.ranges(record_id, ranges))
        statement = (
            delete(table).where(*still_new)
            if removable
            else update(table).where(*still_new).values({names.status: outcome.value})
        )
        changed = conn.execute(statement).rowcount
        on_statement()
        if changed != expected:
            raise AcknowledgeError(
                f"expected to mark {expected} event log rows {outcome.value}, but {changed} were "
                "still new: another process changed the event log during the cycle"
            )
        written[outcome] = written.get(outcome, 0) + changed

    for outcome, pieces, count in _exceptional_statements(runs, lists.ids_per_statement):
        apply(conn, outcome, pieces, count)
    for chunk, expected in _success_statements(runs, lists.ranges_per_statement):
        apply(conn, Status.SUCCESS, chunk, expected)
    return written


def _exceptional_statements(
    runs: Iterable[StatusRun], ids_per_statement: int
) -> Iterator[tuple[Status, list[IdRun], int]]:
    """The W and E runs as statements of one status each, (status, runs, ids), none of more than
    `ids_per_statement` ids (a longer run cut): each yielded as it fills, then the rest."""
    exceptional: dict[Status, list[IdRun]] = {Status.WARNING: [], Status.ERROR: []}
    counts = dict.fromkeys(exceptional, 0)
    for outcome, run in _in_order(runs):
        if outcome is Status.SUCCESS:
            continue
        rest: IdRun | None = run
        while rest is not None:
            room = ids_per_statement - counts[outcome]
            piece, rest = (rest, None) if rest.count <= room else (
                IdRun(rest.first, rest.first + room - 1), IdRun(rest.first + room, rest.last)
            )
            exceptional[outcome].append(piece)
            counts[outcome] += piece.count
            if counts[outcome] == ids_per_statement:
                yield outcome, exceptional[outcome], counts[outcome]
                exceptional[outcome], counts[outcome] = [], 0
    for outcome, pieces in exceptional.items():
        if pieces:
            yield outcome, pieces, counts[outcome]


def _success_statements(runs: Iterable[StatusRun], ranges_per_statement: int) -> Iterator[tuple[list[IdRun], int]]:
    """The S statements, (ranges, rows expected): ranges of read ids whatever their status, of
    which the rows not S are no longer N by then, at most `ranges_per_statement` a statement."""
    chunk: list[IdRun] = []
    expected = 0
    for read, noted in _read_runs(runs):
        if read.count == noted:
            continue
        chunk.append(read)
        expected += read.count - noted
        if len(chunk) == ranges_per_statement:
            yield chunk, expected
            chunk, expected = [], 0
    if chunk:
        yield chunk, expected


def end_marking(conn: Connection, settings: Acknowledging, run_post_polling: bool) -> None:
    """What the acknowledgement's transaction does after the statuses: the rows no reader needs
    deleted, and the post-polling statements run (`run_post_polling`: the cycle published)."""
    if settings.delete_processed_rows and settings.readers.subscribers:
        delete_purgeable(conn, settings.log, settings.readers)
    if run_post_polling:
        for sql in settings.post_polling_statements:
            conn.exec_driver_sql(sql)


def correct_runs(
    conn: Connection, settings: Acknowledging, changes: Sequence[tuple[Status, Status, IdRun]]
) -> dict[Status, int]:
    """Rows this transaction marked given another status (`changed_runs`): each statement
    requires its rows to hold the status marked before and changes exactly as many as it names,
    in pieces of at most a statement's ids, as `mark_runs` sets W and E rows. The counts moved,
    by status (negative for the status left)."""
    table = settings.log.table
    names = settings.log.columns
    record_id, status = table.c[names.record_id], table.c[names.status]
    lists = dialect_of(conn).value_lists()
    moved: dict[Status, int] = {}
    for (before, after), runs in _by_pair(changes).items():
        for piece in _pieces(runs, lists.ids_per_statement):
            expected = sum(run.count for run in piece)
            changed = conn.execute(update(table).where(status == before.value, lists.ids(record_id, piece))
                                   .values({names.status: after.value})).rowcount
            if changed != expected:
                raise AcknowledgeError(
                    f"expected to mark {expected} event log rows {after.value} instead of {before.value}, but "
                    f"{changed} were {before.value}: another process changed the event log during the cycle")
            moved[before] = moved.get(before, 0) - expected
            moved[after] = moved.get(after, 0) + expected
    return moved


def _by_pair(changes: Sequence[tuple[Status, Status, IdRun]]) -> dict[tuple[Status, Status], list[IdRun]]:
    pairs: dict[tuple[Status, Status], list[IdRun]] = {}
    for before, after, run in changes:
        pairs.setdefault((before, after), []).append(run)
    return pairs


def _pieces(runs: Sequence[IdRun], ids: int) -> Iterator[list[IdRun]]:
    """The runs in pieces of at most `ids` ids, a longer run cut."""
    piece: list[IdRun] = []
    room = ids
    for run in runs:
        rest: IdRun | None = run
        while rest is not None:
            taken, rest = (rest, None) if rest.count <= room else (
                IdRun(rest.first, rest.first + room - 1), IdRun(rest.first + room, rest.last))
            piece.append(taken)
            room -= taken.count
            if room == 0:
                yield piece
                piece, room = [], ids
    if piece:
        yield piece


class MarkingBeside:
    """An acknowledgement whose statements run on a thread of their own while the cycle goes on,
    in a transaction committed only once its output is durable (`finish`): the database marks
    the rows on one core while the driver resolves and writes on another. It may begin with the
    statuses known once the rows are classified (every row S but the rejected ones) and be
    settled with the outcomes' (`settle`: the rows whose status differs marked again). Until
    the commit nothing is marked for any other session, and a crash, or `abandon`, rolls it
    back; its failpoint is reached before the commit, with every statement run, as where the
    statements run in turn."""

    def __init__(self, engine: Engine, settings: Acknowledging, runs: Iterable[StatusRun]) -> None:
        self._settings = settings
        self._runs = runs
        self._conn = engine.connect()
        self._conn.begin()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="acknowledge")
        self._marked: list[Future[Mapping[Status, int]]] = [
            self._pool.submit(mark_runs, self._conn, settings, runs, on_statement=_nothing)]

    def settle(self, runs: Iterable[StatusRun]) -> None:
        """The statuses the cycle ends with, for the same rows: those that differ from what was
        marked are marked again, after it, in the same transaction."""
        changes = changed_runs(self._runs, runs)
        self._runs = runs
        if changes:
            self._marked.append(self._pool.submit(correct_runs, self._conn, self._settings, changes))

    def finish(self, published: bool) -> Mapping[Status, int]:
        """Wait for the statements, end the transaction (`published`: the cycle wrote documents)
        and commit it; all or nothing."""
        try:
            written: dict[Status, int] = {}
            for marked in self._marked:
                for status, count in marked.result().items():
                    written[status] = written.get(status, 0) + count
            _at_failpoint()
            end_marking(self._conn, self._settings, published)
            self._conn.commit()
            return {status: count for status, count in written.items() if count}
        finally:
            self._close()

    def abandon(self) -> None:
        """Roll back what was marked (the cycle failed before its output was durable)."""
        self._close()

    def _close(self) -> None:
        self._pool.shutdown(wait=True)
        self._conn.close()


def _nothing() -> None:
    """No failpoint between the statements of a marking beside the cycle: it is reached at its finish."""


def _in_order(runs: Iterable[StatusRun]) -> Iterator[StatusRun]:
    """The runs, refused at the first one that does not follow the one before: acknowledging
    what the cycle did not read, or twice, must never happen."""
    last: int | None = None
    for outcome, run in runs:
        if run.first > run.last or (last is not None and run.first <= last):
            raise ValueError(f"status runs out of record_id order: {run.first}..{run.last} after {last}")
        last = run.last
        yield outcome, run


def _read_runs(runs: Iterable[StatusRun]) -> Iterator[tuple[IdRun, int]]:
    """Runs of consecutive read ids whatever their status, each with how many of its ids are not S."""
    first = last = None
    noted = 0
    for outcome, run in _in_order(runs):
        if first is not None and last is not None and run.first != last + 1:
            yield IdRun(first, last), noted
            first, noted = None, 0
        if first is None:
            first = run.first
        last = run.last
        if outcome is not Status.SUCCESS:
            noted += run.count
    if first is not None and last is not None:
        yield IdRun(first, last), noted


def refresh_statistics(engine: Engine, log: EventLogSource) -> None:
    """ANALYZE the event log after a large acknowledgement. The planner otherwise keeps the
    picture of a table full of N rows for a while and finds the next cycle's few N rows by
    walking every processed one (0.7 s instead of 1 ms after a million-event drain). Only an
    aid: the cycle has acknowledged its events, so a user that may not (ANALYZE TABLE may need
    INSERT; PostgreSQL skips, with a warning, a table its user does not own) is told once, and
    the cycle stands."""
    try:
        with engine.begin() as conn, dialect_of(conn).skipped_warnings(conn) as skipped:
            analyse(conn, log.table, (log.columns.status, log.columns.record_id))
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise
        _statistics_refused(engine, log, str(root_cause(exc)))
        return
    if skipped:
        _statistics_refused(engine, log, "; ".join(skipped))


def _statistics_refused(engine: Engine, log: EventLogSource, why: str) -> None:
    said = (str(engine.url), str(log.table))
    if said not in _ANALYZE_REFUSED:
        _ANALYZE_REFUSED.add(said)
        _log.warning("could not refresh the statistics of the event log %s after a large acknowledgement (%s): "
                     "cycles after a large drain may read it slowly until the database refreshes them itself; "
                     "give the publisher's user %s", log.table, why, dialect_of(engine).analyze_needs)


_ANALYZE_REFUSED: set[tuple[str, str]] = set()
"""The event logs whose ANALYZE was refused and said so, once per process."""


def analyse(conn: Connection, table: Table, columns: Sequence[str]) -> None:
    """ANALYZE the event log's `columns` (where the database samples columns alone), within the
    connection's transaction."""
    preparer = conn.dialect.identifier_preparer
    conn.exec_driver_sql(dialect_of(conn).analyze(preparer.format_table(table), [preparer.quote(c) for c in columns]))
