"""How far each snapshot has come: `<event_log>_snapshot`, a row per reader and table, committed
with each chunk's events, so that a snapshot started again continues where it stopped."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    select,
)

from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects.reflection import reflection

PROGRESS_EVERY = 5.0
"""Seconds between two progress lines on stderr."""


def snapshot_table(log: str, schema: str | None, metadata: MetaData | None = None) -> Table:
    """`<event_log>_snapshot`: per reader ('' for the status mode) and table, how far its last
    snapshot has come; `last_key` is the canonical table_key of the last row logged."""
    return Table(
        f"{log}_snapshot", metadata or MetaData(),
        Column("reader", String(255), primary_key=True),
        Column("table_name", String(255), primary_key=True),
        Column("condition", Text, nullable=False),
        Column("last_key", Text),
        Column("rows_logged", BigInteger, nullable=False),
        Column("rows_total", BigInteger, nullable=False),
        Column("started_at", String(32), nullable=False),
        Column("updated_at", String(32), nullable=False),
        Column("finished_at", String(32)),
        schema=schema,
    )


Begun = tuple[str | None, int, bool]
"""Where a table's part of a snapshot starts: the key it continues after, the rows logged
before, and whether that part is done already."""


def begin_parts(engine: Engine, state: Table, reader: str, condition: str, totals: dict[str, int],
                anew: bool = False) -> dict[str, Begun]:
    """Each table's start. A snapshot continues an unfinished one for the same reader when one
    of its tables was left unfinished with the same condition: that snapshot's tables continue
    after their last key and the ones it finished are done; a table it did not take is begun
    as part of it. Otherwise (or `anew`) each table's part is recorded anew, every one before any row is
    logged, so that a snapshot killed between two tables is continued, not begun again.
    `started_at`, to the microsecond, tells one snapshot's parts from an earlier one's."""
    tables = list(totals)
    mine = and_(state.c.reader == reader, state.c.table_name.in_(tables))
    now = _now()
    with engine.begin() as conn:
        rows = {r["table_name"]: r for r in conn.execute(select(state).where(mine)).mappings()}
        unfinished = [] if anew else sorted(r["started_at"] for r in rows.values()
                                            if r["condition"] == condition and r["finished_at"] is None)
        run = unfinished[-1] if unfinished else _now(exact=True)
        begun: dict[str, Begun] = {}
        for name in tables:
            row = rows.get(name)
            if row is not None and row["condition"] == condition and row["started_at"] == run:
                begun[name] = (row["last_key"], int(row["rows_logged"]), row["finished_at"] is not None)
                continue
            if row is not None:
                conn.execute(state.delete().where(and_(state.c.reader == reader, state.c.table_name == name)))
            conn.execute(state.insert().values(
                reader=reader, table_name=name, condition=condition, last_key=None, rows_logged=0,
                rows_total=totals[name], started_at=run, updated_at=now, finished_at=None))
            begun[name] = (None, 0, False)
    return begun


def advance(conn: Connection, state: Table, reader: str, table: str, last_key: str | None, logged: int,
             finished: bool) -> None:
    now = _now()
    conn.execute(state.update().where(and_(state.c.reader == reader, state.c.table_name == table)).values(
        last_key=last_key, rows_logged=state.c.rows_logged + logged, updated_at=now,
        finished_at=now if finished else None))


def range_table(log: str, schema: str | None, metadata: MetaData | None = None) -> Table:
    """`<event_log>_snapshot_range`: the key ranges a table's part of a snapshot was cut into to
    be taken in parallel (`snapshot_ranges`), each with how far it has come: it begins after
    `after` (NULL: at the first row) and ends at `upto` (inclusive; NULL: at the last row)."""
    return Table(
        f"{log}_snapshot_range", metadata or MetaData(),
        Column("reader", String(255), primary_key=True),
        Column("table_name", String(255), primary_key=True),
        Column("part", Integer, primary_key=True),
        Column("started_at", String(32), nullable=False),
        Column("after_key", Text),
        Column("upto_key", Text),
        Column("last_key", Text),
        Column("finished_at", String(32)),
        schema=schema,
    )


@dataclass(frozen=True)
class TablePart:
    """Where a chunk's progress is committed: a table's part of a snapshot, or one key range of
    it (`part`), whose chunks also count in the table's rows."""

    log: str
    schema: str | None
    reader: str
    table: str
    part: int | None = None

    def advance(self, conn: Connection, last_key: str | None, logged: int, finished: bool) -> None:
        state = snapshot_table(self.log, self.schema)
        if self.part is None:
            advance(conn, state, self.reader, self.table, last_key, logged, finished)
            return
        now = _now()
        ranges = range_table(self.log, self.schema)
        conn.execute(ranges.update().where(
            and_(ranges.c.reader == self.reader, ranges.c.table_name == self.table, ranges.c.part == self.part),
        ).values(last_key=last_key, finished_at=now if finished else None))
        conn.execute(state.update().where(and_(state.c.reader == self.reader, state.c.table_name == self.table))
                     .values(rows_logged=state.c.rows_logged + logged, updated_at=now))


@dataclass(frozen=True)
class KeyRange:
    """One key range of a table's part: after `after` (None: from the first row) up to `upto`
    (inclusive; None: to the last row), continued after `last_key` when it has one."""

    part: int
    after: str | None
    upto: str | None
    last_key: str | None = None
    finished: bool = False

    @property
    def resume_after(self) -> str | None:
        return self.last_key if self.last_key is not None else self.after


def recorded_ranges(conn: Connection, ranges: Table, reader: str, table: str, started_at: str) -> list[KeyRange]:
    """The key ranges of this part of a snapshot (those of an earlier one are not)."""
    mine = and_(ranges.c.reader == reader, ranges.c.table_name == table, ranges.c.started_at == started_at)
    rows = conn.execute(select(ranges).where(mine).order_by(ranges.c.part)).mappings()
    return [KeyRange(r["part"], r["after_key"], r["upto_key"], r["last_key"], r["finished_at"] is not None)
            for r in rows]


def record_ranges(conn: Connection, ranges: Table, reader: str, table: str, started_at: str,
                  cut: list[KeyRange]) -> None:
    """The ranges a part is cut into, replacing those of any earlier part of the table."""
    conn.execute(ranges.delete().where(and_(ranges.c.reader == reader, ranges.c.table_name == table)))
    conn.execute(ranges.insert(), [{"reader": reader, "table_name": table, "part": r.part, "started_at": started_at,
                                    "after_key": r.after, "upto_key": r.upto, "last_key": None, "finished_at": None}
                                   for r in cut])


def part_started_at(conn: Connection, state: Table, reader: str, table: str) -> str:
    row = conn.execute(select(state.c.started_at).where(
        and_(state.c.reader == reader, state.c.table_name == table))).one()
    return str(row[0])


def _now(exact: bool = False) -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds" if exact else "seconds")


@dataclass(frozen=True)
class RecordedSnapshot:
    """A table's last snapshot for a reader, as `<event_log>_snapshot` records it."""

    reader: str
    """The subscriber, or '' for the status mode."""
    table: str
    rows_logged: int
    rows_total: int
    started_at: str
    finished_at: str | None

    @property
    def under_way(self) -> bool:
        return self.finished_at is None


def rows_of_total(rows: int, total: int) -> str:
    """Rows logged against the count taken as the snapshot began: rows inserted while it runs
    are read too, so it may log more than that count, and never says more done than all."""
    return f"{rows:,} of {total:,} rows" if rows <= total else f"{rows:,} rows ({total:,} when it began)"


def recorded_snapshots(config: Config, engine: Engine) -> list[RecordedSnapshot]:
    """Every table's last snapshot per reader; none where no snapshot was ever taken."""

    schema = table_schema(config, engine)
    state = snapshot_table(config.event_log.table, schema)
    if not reflection(engine, schema).has_table(state.name, schema=schema):
        return []
    with engine.connect() as conn:
        rows = conn.execute(select(state).order_by(state.c.reader, state.c.table_name)).mappings().all()
    return [RecordedSnapshot(row["reader"], row["table_name"], int(row["rows_logged"]), int(row["rows_total"]),
                             row["started_at"], row["finished_at"]) for row in rows]


def finish_ranges(engine: Engine, log: str, schema: str | None, reader: str, table: str) -> None:
    """A table's part done once every key range of it is: its last key the last range's."""
    state, ranges = snapshot_table(log, schema), range_table(log, schema)
    with engine.begin() as conn:
        started_at = part_started_at(conn, state, reader, table)
        cut = recorded_ranges(conn, ranges, reader, table, started_at)
        left = [r.part for r in cut if not r.finished]
        if left:
            raise RuntimeError(f"snapshot of {table}: key ranges {left} are not finished")
        advance(conn, state, reader, table, cut[-1].resume_after if cut else None, 0, True)
