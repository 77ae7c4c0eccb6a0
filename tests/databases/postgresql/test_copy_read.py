"""PostgreSQL's COPY read gives exactly what the row-by-row read gives, on rows no trigger would
write: NULL and empty text, CSV's own characters, line breaks, non-ASCII, times PostgreSQL
holds but Python cannot (±infinity, years after 9999), times with and without a zone."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from harness import Harness
from hunting import budget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from publisher.databases.postgresql.copy_read import BLOCK_BYTES, can_copy, copy_batches
from publisher.model.arrow import arrow_schema_of, rows_batch
from publisher.model.events import EVENT_SCHEMA
from publisher.pipeline.read import read_rows

STORABLE = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
"""What PostgreSQL text can hold: no NUL, no lone surrogate."""
CSV_TEXT = st.text(STORABLE, max_size=12) | st.sampled_from(
    ["", " ", '"', '""', ",", "\\.", "\\", "\r\n", "\n", "\r", "a,b", 'say "hi"', "é€😀", "NULL", "\\N"]
)
TIMES = st.sampled_from([
    None, "infinity", "-infinity", "10000-01-01 00:00:00", "0001-01-01 00:00:00", "1999-12-31 23:59:59.999999",
    "2026-11-23 07:00:00+05:30", "1970-01-01 00:00:00", "2026-11-23 07:00:00.5",
]) | st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30)).map(str)


def rows_table(h: Harness, future: bool) -> tuple[pa.Table, pa.Table]:
    """The window read both ways (in future mode a time after 9999 waits: maybe no window)."""
    h.reconfigure(future_events=future, query_limit=1000)
    window = h.window()
    if window is None:
        assert future
        return pa.table({}), pa.table({})
    schema = arrow_schema_of(EVENT_SCHEMA)
    by_rows = pa.Table.from_batches([rows_batch(list(read_rows(window, window.lo, window.hi)), schema)])
    with h.engine.connect() as conn:
        assert can_copy(conn)
        by_copy = pa.Table.from_batches(list(copy_batches(conn, window, window.lo, window.hi)), schema=schema)
    return by_rows, by_copy


@pytest.mark.parametrize("zone", ["timestamp", "timestamptz"])
def test_copy_reads_what_the_rows_read(spark, postgresql_database, tmp_path, zone):
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_event_log()
    log = h.table(h.config.event_log.table)
    c = h.config.event_log.columns
    h.db.execute(f"ALTER TABLE {log} ALTER COLUMN {c.event_time} TYPE {zone}")
    for column in (c.event_time, c.perpetrator, c.table_name, c.table_key, c.column_name, c.old_value, c.new_value):
        h.db.execute(f"ALTER TABLE {log} ALTER COLUMN {column} DROP NOT NULL")

    @settings(max_examples=budget(25),
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.lists(st.tuples(TIMES, *(CSV_TEXT | st.none() for _ in range(7))), min_size=1, max_size=8))
    def check(rows: list[tuple[Any, ...]]) -> None:
        with h.engine.begin() as conn:
            conn.execute(text(f"DELETE FROM {log}"))
            for time, perpetrator, table, key, column, old, new, transaction in rows:
                conn.execute(
                    text(f"INSERT INTO {log} ({c.status}, {c.event_type}, {c.event_time}, {c.perpetrator}, "
                         f"{c.table_name}, {c.table_key}, {c.column_name}, {c.old_value}, {c.new_value}, "
                         f"transaction_id) VALUES ('N', 2, CAST(:time AS TEXT)::{zone}, :perp, :tab, :key, :col, "
                         ":old, :new, :tx)"),
                    {"time": time, "perp": perpetrator, "tab": table, "key": key, "col": column, "old": old,
                     "new": new, "tx": transaction},
                )
        for future in (False, True):
            by_rows, by_copy = rows_table(h, future)
            assert by_copy.num_rows == (by_rows.num_rows if future else len(rows))
            assert by_copy.to_pylist() == by_rows.to_pylist()

    check()


def test_a_range_without_new_rows_reads_nothing(spark, postgresql_database, tmp_path):
    """A partition of a window can hold no `N` row (all taken, or all committed late)."""
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_event_log()
    ids = h.log((2, "usr", "idu=1", "fname", "a", "b"), (2, "usr", "idu=2", "fname", "c", "d"))
    window = h.window()
    assert window is not None
    h.db.execute(f"UPDATE {h.table(h.config.event_log.table)} SET status = 'S' WHERE record_id = {ids[0]}")
    with h.engine.connect() as conn:
        assert list(copy_batches(conn, window, ids[0], ids[0])) == []
        assert [b.num_rows for b in copy_batches(conn, window, ids[0], ids[1])] == [1]


def test_copy_reads_rows_longer_than_a_block_and_rejects_rows_over_the_limit(spark, postgresql_database, tmp_path):
    """A block holds the longest row within the limit, quotes doubled by CSV included; a row over
    the limit comes without its long values, with its size, the same both ways."""
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_event_log()
    quotes = '"' * (BLOCK_BYTES + 10)
    over = "x" * (3 * BLOCK_BYTES)
    h.log((2, "usr", "idu=1", "fname", "a", quotes), (2, "usr", "idu=2", "fname", over, "b"),
          (2, "usr", "idu=3", "fname", None, "c"))
    h.reconfigure(max_row_bytes=2 * BLOCK_BYTES)
    by_rows, by_copy = rows_table(h, future=False)
    assert by_copy.equals(by_rows)
    rows = by_copy.to_pylist()
    assert rows[0]["new_value"] == quotes and rows[0]["unreadable"] is None
    size = len(over) + len("usr") + len("idu=2") + len("fname") + 1
    assert rows[1]["old_value"] is None and rows[1]["new_value"] == "b"
    assert rows[1]["unreadable"].startswith(f"row of {size} bytes is over publisher.max_row_bytes ({2 * BLOCK_BYTES})")
    assert rows[2]["new_value"] == "c" and rows[2]["unreadable"] is None


def test_copy_rows_are_psycopgs_rows_and_a_failed_copy_leaves_the_connection_usable(postgresql_database):
    """`copy_rows` reads COPY from libpq itself: the same rows as psycopg's iteration, long ones
    included; the server's error raised as psycopg raises it, with its SQLSTATE; and after an
    error, or a reader that stops on one of its own, the connection takes the next statement."""
    import psycopg

    from publisher.databases.postgresql.copy_read import copy_rows

    statement = ("COPY (SELECT i, repeat('x', i % 7 * 40000), E'a\\nb' FROM generate_series(1, 300) i) "
                 "TO STDOUT (FORMAT csv)")
    with psycopg.connect(postgresql_database.url) as conn:
        cursor = conn.cursor()
        with cursor.copy(statement) as copy:
            theirs = [bytes(row) for row in copy]
        with cursor.copy(statement) as copy:
            ours = [bytes(row) for row in copy_rows(copy)]
        assert ours == theirs and len(ours) == 300
        with pytest.raises(psycopg.errors.DivisionByZero) as failed:
            with cursor.copy("COPY (SELECT 1 / (20000 - i) FROM generate_series(1, 50000) i) TO STDOUT") as copy:
                for _ in copy_rows(copy):
                    pass
        assert failed.value.sqlstate == "22012"
        conn.rollback()
        assert cursor.execute("SELECT 42").fetchone() == (42,)
        with pytest.raises(ValueError, match="the reader's own"):
            with cursor.copy("COPY (SELECT i FROM generate_series(1, 200000) i) TO STDOUT") as copy:
                for index, _ in enumerate(copy_rows(copy)):
                    if index == 1000:
                        raise ValueError("the reader's own")
        conn.rollback()
        assert cursor.execute("SELECT 43").fetchone() == (43,)
