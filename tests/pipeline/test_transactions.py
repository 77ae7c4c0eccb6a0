"""The event log's optional eleventh column, transaction_id: the triggers fill it where the
database can tell (PostgreSQL), name the statement where no transaction id is reliable
(MariaDB/MySQL), leave it NULL where neither can be told (SQLite), and an event log without
the column is read and published as before."""
from __future__ import annotations

import re

import pytest
from harness import Harness
from sqlalchemy import text

from publisher.model.events import EVENT_FIELDS
from publisher.pipeline import cycle
from publisher.pipeline.read import read_rows
from publisher.service.mirror import replay

# A user no test database logs in as, so that trigger-logged rows on PostgreSQL are not loopback.
OTHER_USER = "publisher_app"


def read_transactions(h: Harness) -> dict[int, str | None]:
    """record_id → transaction_id, as the publisher's reader hands them to a cycle."""
    window = h.window()
    assert window is not None
    rows = [dict(zip(EVENT_FIELDS, row, strict=True)) for row in read_rows(window, window.lo, window.hi)]
    return {row["record_id"]: row["transaction_id"] for row in rows}


def test_triggers_record_the_transaction_of_each_change(spark, database, tmp_path):
    h = Harness(spark, database, tmp_path, user=OTHER_USER, tables=())
    h.create_usr()
    h.install("usr")
    with h.engine.begin() as conn:
        conn.execute(text(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann'), (2, 'Bob')"))
        conn.execute(text(f"UPDATE {h.table('usr')} SET lname = 'Lee' WHERE idu = 1"))
    first = set(h.statuses())
    with h.engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {h.table('usr')} WHERE idu = 2"))
    second = set(h.statuses()) - first

    transactions = read_transactions(h)
    assert set(transactions) == first | second and len(first) == 3 and len(second) == 1
    if h.dialect == "sqlite":  # no transaction id a trigger can read (docs: concepts/event-log.md)
        assert set(transactions.values()) == {None}
        return
    if h.dialect == "mariadb":  # the statement's: connection and start time (docs: guides/mariadb.md)
        inserted, updated = sorted(first)[:2], sorted(first)[2]
        assert len({transactions[rid] for rid in inserted}) == 1
        assert len({transactions[rid] for rid in (inserted[0], updated, *second)}) == 3
        assert all(re.fullmatch(r"\d+@\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}", t) for t in transactions.values())
        return
    (one,) = {transactions[rid] for rid in first}
    (other,) = {transactions[rid] for rid in second}
    assert one is not None and one.isdigit() and other is not None and other.isdigit()
    assert int(other) > int(one)


def test_an_event_log_without_the_column_is_read_and_published(spark, cycle_path, database, tmp_path):
    h = Harness(spark, database, tmp_path, path=cycle_path)
    h.create_usr()
    h.create_event_log()
    h.db.execute(f"ALTER TABLE {h.table('event_log')} DROP COLUMN transaction_id")
    ids = h.log((1, "usr", "idu=1", "fname", None, "Ann"), (4, "usr", "idu=2"))

    assert read_transactions(h) == {rid: None for rid in ids}
    result = h.poll()
    assert result.statuses == {"S": 2}
    assert h.published().describe() == [
        ("add", h.association("idu=1"), ids[0]),
        ("delete", h.association("idu=2"), ids[1]),
    ]


def test_install_gives_an_older_postgresql_event_log_the_column(spark, postgresql_database, tmp_path):
    h = Harness(spark, postgresql_database, tmp_path, user=OTHER_USER, tables=())
    h.create_usr()
    h.create_event_log()
    h.db.execute(f"ALTER TABLE {h.table('event_log')} DROP COLUMN transaction_id")
    h.install("usr")
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Ann')")

    (transaction,) = set(read_transactions(h).values())
    assert transaction is not None and transaction.isdigit()
    assert h.poll().statuses == {"S": 1}


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_a_transaction_committed_between_planning_and_reading_waits_whole(spark, database, tmp_path, monkeypatch):
    """An insert's two attributes logged around another session's row, committed after the
    cycle found its window (ending at that row, beginning before the insert) and before it
    read it: read in part, the first
    would go out as an <add> and the second as another in the next cycle, which a consumer
    refuses. MariaDB's triggers name the statement, PostgreSQL's the transaction."""
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    c = h.config.event_log.columns
    named = "CAST(txid_current() AS VARCHAR)" if h.dialect == "postgresql" else ":tx"
    insert = text(f"INSERT INTO {h.table('event_log')} ({c.status}, {c.event_type}, {c.table_name}, "
                  f"{c.table_key}, {c.column_name}, {c.new_value}, {c.transaction_id}) "
                  f"VALUES ('N', 1, 'usr', :key, :column, :value, {named})")
    with h.engine.begin() as conn:
        conn.execute(insert, {"key": "idu=3", "column": "fname", "value": "Cy", "tx": "6@zero"})
    pending = h.engine.connect()
    pending.begin()
    pending.execute(insert, {"key": "idu=1", "column": "fname", "value": "Ann", "tx": "7@one"})
    with h.engine.begin() as conn:
        conn.execute(insert, {"key": "idu=2", "column": "fname", "value": "Bob", "tx": "8@two"})
    pending.execute(insert, {"key": "idu=1", "column": "lname", "value": "Lee", "tx": "7@one"})
    planned = cycle.plan_cycle

    def planned_then_committed(*args):  # type: ignore[no-untyped-def]
        plan = planned(*args)
        if pending.in_transaction():
            pending.commit()
        return plan

    monkeypatch.setattr(cycle, "plan_cycle", planned_then_committed)
    h.poll()
    h.poll()
    pending.close()
    adds = [(op.findtext("association").split(",")[0], sorted(a.get("attr-name") for a in op.iter("add-attr")))
            for op in h.published().operations if op.tag == "add"]
    assert adds == [("idu=3", ["fname"]), ("idu=2", ["fname"]), ("idu=1", ["fname", "lname"])]
    assert replay(h.output.glob("*.xml")).anomalies == []
