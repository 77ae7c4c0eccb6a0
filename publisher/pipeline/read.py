"""Read one cycle's events from the event log, in parallel record_id ranges.

The driver fixes the cycle's window with one small query; Spark's Python data source then
reads the window in the executors over SQLAlchemy, so any SQLAlchemy database works with no
JVM driver jar, and a cluster's executors do the reading.
"""
from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from sqlalchemy import (
    ColumnElement,
    null,
    select,
)

from publisher import failpoints
from publisher.config import EVENT_LOG_COLUMNS
from publisher.dialects import Dialect, dialect_of
from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.events import EVENT_SCHEMA
from publisher.model.values import shown
from publisher.pipeline.event_log import event_log_table_of, role_columns
from publisher.pipeline.row_limit import oversized_reason, row_bytes, within_limit
from publisher.pipeline.window import CycleWindow, window_predicate


@dataclass
class RecordRange(InputPartition):
    lo: int
    hi: int


class EventLogSource(DataSource):
    """`spark.read.format("event_log").option("window", window.to_json()).load()`

    Option `transform` (see `read_events`) maps each Arrow batch in the reading worker itself,
    so the rows are classified where they are read, without another pass.
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
    def __init__(self, window: CycleWindow, schema: Any, transform: BatchTransform | None) -> None:
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
        assert isinstance(partition, RecordRange)
        for batch in read_batches(self.window, partition.lo, partition.hi):
            yield batch if self.transform is None else self.transform(batch)


BatchTransform = Callable[[pa.RecordBatch], pa.RecordBatch]
"""An EVENT_SCHEMA batch → a batch of the schema given with it; runs where the rows are read."""
READ_BATCH_ROWS = 10_000


def read_batches(window: CycleWindow, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """The window's events within record_ids lo..hi, in record_id order, as EVENT_SCHEMA batches:
    through COPY where the database offers it (`Dialect.copy_reader`), else row by row."""
    for batch in _read_batches(window, lo, hi):
        failpoints.check_poisoned(batch.column("record_id").to_pylist())
        yield batch


def _read_batches(window: CycleWindow, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    from publisher.pipeline.workers import engine_for

    with engine_for(window.url).connect() as conn:
        copy = dialect_of(conn).copy_reading()
        if copy is not None and copy.can_copy(conn):
            yield from copy.copy_batches(conn, window, lo, hi)
            return
    schema = arrow_schema_of(EVENT_SCHEMA)
    rows: list[tuple[Any, ...]] = []
    for row in read_rows(window, lo, hi):
        rows.append(row)
        if len(rows) == READ_BATCH_ROWS:
            yield rows_batch(rows, schema)
            rows = []
    if rows:
        yield rows_batch(rows, schema)


def _pickle(transform: BatchTransform) -> str:
    from pyspark import cloudpickle

    return base64.b64encode(cloudpickle.dumps(transform)).decode("ascii")


def _unpickle(text: str) -> BatchTransform:
    import pickle

    return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]


def read_rows(window: CycleWindow, lo: int, hi: int) -> Iterator[tuple[Any, ...]]:
    """The window's events within record_ids lo..hi, in record_id order, as EVENT_SCHEMA tuples."""
    from publisher.pipeline.workers import engine_for

    w = window
    extra = () if w.transaction_column is None else (w.transaction_column,)
    table = event_log_table_of(w.table, w.columns + extra, w.schema)
    c = role_columns(table, w.columns)
    engine = engine_for(w.url)
    dialect = engine.dialect.name
    found = dialect_of(dialect)
    transaction = null() if w.transaction_column is None else table.c[w.transaction_column]
    readable = found.readable_time(c["event_time"])
    time_apart, unreadable_text = found.event_time_apart(c["event_time"], readable)
    size = row_bytes(w, table, dialect)
    query = (
        select(
            c["record_id"],
            c["status"],
            *(within_limit(w, table, role, _as_read(c[role], role, found), size, dialect)
              for role in EVENT_LOG_COLUMNS[2:]),
            _as_read(transaction, "transaction_id", found),
            time_apart,
            readable.is_not(None),
            unreadable_text,
            size,
        )
        .where(window_predicate(w, table, lo, hi, dialect))
        .order_by(c["record_id"])
    )
    names = (*w.columns, w.transaction_column or "transaction_id")
    with engine.connect() as conn:
        encoding = dialect_of(dialect).stored_encoding(conn)
        result = conn.execution_options(stream_results=True, yield_per=5000).execute(query)
        for row in result:
            yield _event_row(row, names, encoding, w.future, w.max_row_bytes)



def _as_read(column: ColumnElement[Any], role: str, dialect: Dialect) -> Any:
    """A column as the read takes it, so that one bad value cannot fail the whole read: where text
    may hold any bytes, every text column as bytes (`Dialect.exact`), decoded here row by row; an
    event_time the driver cannot convert as NULL (`Dialect.event_time_as_read`)."""
    if role == "event_type":
        return dialect.text_as_read(column)
    if role == "event_time":
        return dialect.event_time_as_read(column)
    return dialect.exact(column)


def _event_row(
    row: Sequence[Any], names: Sequence[str], encoding: tuple[str, str], future: bool = False,
    limit: int | None = None,
) -> tuple[Any, ...]:
    """One event as EVENT_SCHEMA has it; a value that is not valid text fills `unreadable`, and
    so do a row over `limit` bytes and, in future mode, an event_time that is not a time.

    `row` holds the values of `names`, then the event_time as `Dialect.readable_time` gives it,
    whether the database reads the event_time as a time, its text where it does not, and the
    row's size in bytes (`row_limit.row_bytes`)."""
    codec, label = encoding
    count = len(names)
    julian, is_time, unreadable_time = row[count : count + 3]
    values: list[Any] = []
    problems: list[str] = []
    size = row[count + 3] if len(row) > count + 3 else None
    if limit is not None and size is not None and size > limit:
        problems.append(oversized_reason(int(size), limit))
    for name, value in zip(names[1:], row[1:count], strict=True):
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
    time = as_utc(event_time)
    if time is None and julian is not None:
        time = _from_julian(julian)
    if future and not is_time:
        named = event_time if unreadable_time is None else unreadable_time
        problems.append("event_time is empty" if named is None else f"event_time {shown(named)} is not a time")
    return (
        int(row[0]),
        _text(status),
        _text(event_type),
        time,
        *(_text(v) for v in rest),
        "; ".join(problems) or None,
    )


_UNIX_EPOCH_JULIAN = 2440587.5


def _from_julian(day: float) -> dt.datetime | None:
    """A Julian day number, as a `readable_time` may give it (whole milliseconds), as an aware UTC
    datetime."""
    try:
        milliseconds = round((float(day) - _UNIX_EPOCH_JULIAN) * 86_400_000)
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=milliseconds)
    except (OverflowError, ValueError):
        return None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(value)


def as_utc(value: Any) -> dt.datetime | None:
    """An event_time as an aware UTC datetime; where the driver hands back text, it was written in UTC.

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
    spark: SparkSession, window: CycleWindow, transform: BatchTransform | None = None, schema: str = EVENT_SCHEMA
) -> DataFrame:
    """The window's events as a DataFrame with the fixed column roles as names, or each batch
    mapped by `transform` to rows of `schema` as it is read."""
    spark.dataSource.register(EventLogSource)
    reader = spark.read.format(EventLogSource.name()).option("window", window.to_json())
    if transform is not None:
        reader = reader.option("transform", _pickle(transform)).option("schema", schema)
    return reader.load()
