"""Stage 1: read one cycle's events from the event log, in parallel record_id ranges.

The driver fixes the cycle's window with one small query; Spark's Python data source then
reads the window in the executors over SQLAlchemy, so any SQLAlchemy database works with no
JVM driver jar, and a cluster's executors do the reading.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    cast,
    func,
    inspect,
    null,
    or_,
    select,
)

from publisher.config import Config
from publisher.database import table_schema
from publisher.events import EVENT_LOG_COLUMNS, Status

UNREADABLE = "unreadable"
"""Why a row's values are not text (e.g. invalid UTF-8); such a row is rejected, never lost."""
EVENT_SCHEMA = (
    "record_id long, status string, event_type string, event_time timestamp, perpetrator string, "
    "table_name string, table_key string, column_name string, old_value string, new_value string, "
    f"transaction_id string, {UNREADABLE} string"
)


@dataclass(frozen=True)
class CycleWindow:
    """Which `N` rows a cycle takes: record_ids lo..hi, and in future mode up to a cutoff event."""

    url: str
    table: str
    schema: str | None
    columns: tuple[str, ...]
    lo: int
    hi: int
    count: int
    cutoff_record_id: int | None
    """Future mode: the last row taken in (event_time, record_id) order."""
    transaction_column: str | None = None
    """The event log's optional transaction_id column, when it has one."""
    partitions: int = 1
    """How many record_id ranges Spark reads in parallel; set for the cycle's path."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CycleWindow:
        data = json.loads(text)
        data["columns"] = tuple(data["columns"])
        return cls(**data)


def event_log_table(config: Config, schema: str | None) -> Table:
    """The event log as SQLAlchemy sees it: configured names, no assumptions about types."""
    return _event_log_table(config.event_log.table, config.event_log.columns.in_order(), schema)


def _event_log_table(name: str, columns: tuple[str, ...], schema: str | None) -> Table:
    return Table(name, MetaData(), *(Column(n) for n in columns), schema=schema)


def _role_columns(table: Table, columns: tuple[str, ...]) -> dict[str, Column[Any]]:
    return {role: table.c[name] for role, name in zip(EVENT_LOG_COLUMNS, columns, strict=True)}


def _database_now(dialect_name: str) -> Any:
    """The database's current time in the form its event_time default writes."""
    if dialect_name == "sqlite":
        return func.strftime("%Y-%m-%d %H:%M:%f", "now")
    return func.now()


def plan_window(config: Config, engine: Engine) -> CycleWindow | None:
    """The rows of this cycle, or None when there is nothing new."""
    schema = table_schema(config, engine)
    table = event_log_table(config, schema)
    c = _role_columns(table, config.event_log.columns.in_order())
    eligible = c["status"] == Status.NEW.value
    order: list[Any] = [c["record_id"]]
    if config.publisher.future_events:
        eligible = and_(eligible, c["event_time"] <= _database_now(engine.dialect.name))
        order = [c["event_time"], c["record_id"]]
    taken = (
        select(c["record_id"].label("rid"))
        .where(eligible)
        .order_by(*order)
        .limit(config.publisher.query_limit)
        .subquery()
    )
    with engine.connect() as conn:
        lo, hi, count = conn.execute(
            select(func.min(taken.c.rid), func.max(taken.c.rid), func.count())
        ).one()
        if not count:
            return None
        cutoff = None
        if config.publisher.future_events:
            cutoff = conn.execute(
                select(c["record_id"]).where(eligible).order_by(*order)
                .offset(count - 1).limit(1)
            ).scalar_one()
    return CycleWindow(
        url=config.database.sqlalchemy_url(),
        table=config.event_log.table,
        schema=schema,
        columns=config.event_log.columns.in_order(),
        lo=int(lo),
        hi=int(hi),
        count=int(count),
        cutoff_record_id=None if cutoff is None else int(cutoff),
        transaction_column=_transaction_column(engine, config, schema),
    )


def _transaction_column(engine: Engine, config: Config, schema: str | None) -> str | None:
    """The configured transaction_id column's actual name, or None where the event log has none
    (an event log made before the column existed, or by a site's own DDL)."""
    wanted = config.event_log.columns.transaction_id
    names = [c["name"] for c in inspect(engine).get_columns(config.event_log.table, schema=schema)]
    if wanted in names:
        return wanted
    return next((n for n in names if n.lower() == wanted.lower()), None)


def window_predicate(window: CycleWindow, table: Table, lo: int, hi: int) -> Any:
    """The rows of the window within record_ids lo..hi; the same rule for reading and nothing else."""
    c = _role_columns(table, window.columns)
    predicate = and_(
        c["status"] == Status.NEW.value,
        c["record_id"] >= lo,
        c["record_id"] <= hi,
    )
    if window.cutoff_record_id is not None:
        pivot = table.alias("cutoff")
        pc = _role_columns(pivot, window.columns)  # type: ignore[arg-type]
        cutoff_time = (
            select(pc["event_time"]).where(pc["record_id"] == window.cutoff_record_id).scalar_subquery()
        )
        predicate = and_(
            predicate,
            or_(
                c["event_time"] < cutoff_time,
                and_(c["event_time"] == cutoff_time, c["record_id"] <= window.cutoff_record_id),
            ),
        )
    return predicate


@dataclass
class RecordRange(InputPartition):
    lo: int
    hi: int


class EventLogSource(DataSource):
    """`spark.read.format("event_log").option("window", window.to_json()).load()`

    Option `transform` (see `read_events`) maps each row in the reading worker itself, so a
    row is turned into Arrow once, after the work on it, instead of once per step.
    """

    @classmethod
    def name(cls) -> str:
        return "event_log"

    def schema(self) -> str:
        return self.options.get("schema", EVENT_SCHEMA)

    def reader(self, schema: Any) -> DataSourceReader:
        transform = self.options.get("transform")
        return EventLogReader(
            CycleWindow.from_json(self.options["window"]),
            schema,
            None if transform is None else _unpickle(transform),
        )


class EventLogReader(DataSourceReader):
    def __init__(self, window: CycleWindow, schema: Any, transform: RowTransform | None) -> None:
        self.window = window
        self.schema = schema
        self.transform = transform

    def partitions(self) -> list[InputPartition]:
        w = self.window
        n = max(1, min(w.partitions, w.hi - w.lo + 1))
        width = (w.hi - w.lo + 1 + n - 1) // n
        return [
            RecordRange(lo, min(lo + width - 1, w.hi)) for lo in range(w.lo, w.hi + 1, width)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from publisher.workers import arrow_batch, arrow_schema

        assert isinstance(partition, RecordRange)
        schema = arrow_schema(self.schema)
        rows: list[tuple[Any, ...]] = []
        transform = self.transform
        for row in read_rows(self.window, partition.lo, partition.hi):
            rows.append(row if transform is None else transform(row))
            if len(rows) == ARROW_BATCH_ROWS:
                yield arrow_batch(rows, schema)
                rows = []
        if rows:
            yield arrow_batch(rows, schema)


RowTransform = Callable[[tuple[Any, ...]], tuple[Any, ...]]
"""An EVENT_SCHEMA tuple → a tuple of the schema given with it; runs in the executors."""
ARROW_BATCH_ROWS = 10_000
EVENT_FIELDS = tuple(part.split()[0] for part in EVENT_SCHEMA.split(", "))


def _pickle(transform: RowTransform) -> str:
    from pyspark import cloudpickle

    return base64.b64encode(cloudpickle.dumps(transform)).decode("ascii")


def _unpickle(text: str) -> RowTransform:
    import pickle

    return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]


def read_rows(window: CycleWindow, lo: int, hi: int) -> Iterator[tuple[Any, ...]]:
    """The window's events within record_ids lo..hi, in record_id order, as EVENT_SCHEMA tuples."""
    from publisher.workers import engine_for

    w = window
    extra = () if w.transaction_column is None else (w.transaction_column,)
    table = _event_log_table(w.table, w.columns + extra, w.schema)
    c = _role_columns(table, w.columns)
    engine = engine_for(w.url)
    as_bytes = engine.dialect.name == "sqlite"
    transaction = null() if w.transaction_column is None else table.c[w.transaction_column]
    query = (
        select(
            c["record_id"],
            c["status"],
            *(_as_read(c[role], role, as_bytes) for role in EVENT_LOG_COLUMNS[2:]),
            _as_read(transaction, "transaction_id", as_bytes),
        )
        .where(window_predicate(w, table, lo, hi))
        .order_by(c["record_id"])
    )
    with engine.connect() as conn:
        encoding = _sqlite_encoding(conn) if as_bytes else _UTF8
        result = conn.execution_options(stream_results=True, yield_per=5000).execute(query)
        for row in result:
            yield _event_row(row, (*w.columns, w.transaction_column or "transaction_id"), encoding)


_UTF8 = ("utf-8", "UTF-8")
_SQLITE_ENCODINGS = {"UTF-8": "utf-8", "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}


def _as_read(column: ColumnElement[Any], role: str, as_bytes: bool) -> Any:
    """SQLite TEXT may hold any bytes, and its driver fails the whole read on one bad value:
    there every text column is read as bytes and decoded here, row by row."""
    if as_bytes:
        return cast(column, LargeBinary)
    if role == "event_type":
        return cast(column, String)
    return column


def _sqlite_encoding(conn: Connection) -> tuple[str, str]:
    """(Python codec, SQLite's name) of the text encoding the database file stores."""
    name = str(conn.exec_driver_sql("PRAGMA encoding").scalar())
    return _SQLITE_ENCODINGS.get(name, "utf-8"), name


def _event_row(row: Sequence[Any], names: Sequence[str], encoding: tuple[str, str]) -> tuple[Any, ...]:
    """One event as EVENT_SCHEMA has it; a value that is not valid text fills `unreadable`."""
    codec, label = encoding
    values: list[Any] = []
    problems: list[str] = []
    for name, value in zip(names[1:], row[1:], strict=True):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            values.append(value)
            continue
        try:
            values.append(bytes(value).decode(codec))
        except UnicodeDecodeError as exc:
            values.append(bytes(value).decode(codec, errors="backslashreplace"))
            bad = exc.object[exc.start : exc.end].hex(" ")
            problems.append(f"column {name} is not valid {label} (bytes {bad} at offset {exc.start})")
    status, event_type, event_time, *rest = values
    return (
        int(row[0]),
        _text(status),
        _text(event_type),
        as_utc(event_time),
        *(_text(v) for v in rest),
        "; ".join(problems) or None,
    )


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(value)


def as_utc(value: Any) -> dt.datetime | None:
    """An event_time as an aware UTC datetime; SQLite hands back text, written in UTC.

    Unreadable times become None: they only order future events, and a row is never lost for it.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        return None


def read_events(
    spark: SparkSession, window: CycleWindow, transform: RowTransform | None = None, schema: str = EVENT_SCHEMA
) -> DataFrame:
    """The window's events as a DataFrame with the fixed column roles as names, or each mapped
    by `transform` to rows of `schema` as it is read."""
    spark.dataSource.register(EventLogSource)
    reader = spark.read.format(EventLogSource.name()).option("window", window.to_json())
    if transform is not None:
        reader = reader.option("transform", _pickle(transform)).option("schema", schema)
    return reader.load()
