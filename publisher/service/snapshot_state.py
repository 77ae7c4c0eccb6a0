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
    MetaData,
    String,
    Table,
    Text,
    and_,
    select,
)

from publisher.config import Config
from publisher.database import table_schema


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


def begin_parts(engine: Engine, state: Table, reader: str, condition: str, totals: dict[str, int]) -> dict[str, Begun]:
    """Each table's start. A snapshot continues an unfinished one for the same reader when one
    of its tables was left unfinished with the same condition: that snapshot's tables continue
    after their last key and the ones it finished are done; a table it did not take is begun
    as part of it. Otherwise each table's part is recorded anew, every one before any row is
    logged, so that a snapshot killed between two tables is continued, not begun again.
    `started_at`, to the microsecond, tells one snapshot's parts from an earlier one's."""
    tables = list(totals)
    mine = and_(state.c.reader == reader, state.c.table_name.in_(tables))
    now = _now()
    with engine.begin() as conn:
        rows = {r["table_name"]: r for r in conn.execute(select(state).where(mine)).mappings()}
        unfinished = sorted(r["started_at"] for r in rows.values()
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


def recorded_snapshots(config: Config, engine: Engine) -> list[RecordedSnapshot]:
    """Every table's last snapshot per reader; none where no snapshot was ever taken."""
    from sqlalchemy import inspect

    schema = table_schema(config, engine)
    state = snapshot_table(config.event_log.table, schema)
    if not inspect(engine).has_table(state.name, schema=schema):
        return []
    with engine.connect() as conn:
        rows = conn.execute(select(state).order_by(state.c.reader, state.c.table_name)).mappings().all()
    return [RecordedSnapshot(row["reader"], row["table_name"], int(row["rows_logged"]), int(row["rows_total"]),
                             row["started_at"], row["finished_at"]) for row in rows]
