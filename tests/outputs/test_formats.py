"""The formats beside XDS, end to end on real databases and both cycle paths: change tables
(Parquet) and data/metadata messages (JSON lines) of the same cycles, their masks, change
sequence, transaction places and table versions, and their agreement with the XDS output."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import fastavro
import fastavro.validation
import pyarrow.parquet as pq
import pytest
from conftest import spark_on_one_database
from harness import Harness, read_change_tables, read_messages
from sqlalchemy import text

from publisher.config import ChangeTablesConfig, MessagesConfig
from publisher.errors import StageFailedError

PREFIX = "header__"


def switch_on(h: Harness, trail_header: bool = False, partition_minutes: int = 0) -> None:
    h.config = dataclasses.replace(
        h.config,
        output=dataclasses.replace(
            h.config.output,
            change_tables=ChangeTablesConfig(
                enabled=True, trail_header=trail_header, partition_minutes=partition_minutes
            ),
            messages=MessagesConfig(enabled=True, trail_header=trail_header, external_schema_id=True, server="s1"),
        ),
    )


def change_rows(h: Harness, table: str = "usr") -> list[dict[str, Any]]:
    """The table's change-table rows, files in name order (publication order)."""
    return read_change_tables(h.output).get(table, [])


def all_change_rows(h: Harness, *tables: str) -> list[dict[str, Any]]:
    """Every change table's rows in publication order: by event log position, a before-image
    before its update."""
    rows = [row for table in tables for row in change_rows(h, table)]
    return sorted(rows, key=lambda r: (int(r[PREFIX + "stream_position"]), r[PREFIX + "change_oper"] != "B"))


def data_messages(h: Harness) -> list[dict[str, Any]]:
    return [m for m in read_messages(h.output) if "headers" in m]


def metadata_messages(h: Harness) -> list[dict[str, Any]]:
    return [m for m in read_messages(h.output) if "lineage" in m]


def set_transaction(h: Harness, transaction: str, record_ids: list[int]) -> None:
    table = h.table("event_log")
    with h.engine.begin() as conn:
        conn.execute(
            text(f"UPDATE {table} SET transaction_id = :t WHERE record_id IN ({', '.join(map(str, record_ids))})"),
            {"t": transaction},
        )


def create_acct(h: Harness) -> None:
    """A table whose key is its third column: ordinals 1, 2 and 4 are plain values."""
    h.db.execute(
        f"CREATE TABLE {h.table('acct')} (a VARCHAR(20), b VARCHAR(20), id INTEGER PRIMARY KEY, d VARCHAR(20))"
    )
    h.reconfigure(tables=("usr", "acct"))


@spark_on_one_database("sqlite")
def test_an_update_marks_the_changed_columns_and_shares_its_number_with_its_before_image(harness):
    h = harness
    switch_on(h)
    create_acct(h)
    ids = h.log(
        (2, "acct", "id=7", "a", "a0", "a1"),
        (2, "acct", "id=7", "b", "b0", "b1"),
        (2, "acct", "id=7", "d", "d0", "d1"),
    )
    h.poll()

    before, update = change_rows(h, "acct")
    assert (before[PREFIX + "change_oper"], update[PREFIX + "change_oper"]) == ("B", "U")
    assert (before[PREFIX + "operation"], update[PREFIX + "operation"]) == ("BEFOREIMAGE", "UPDATE")
    assert before[PREFIX + "change_seq"] == update[PREFIX + "change_seq"]
    assert len(update[PREFIX + "change_seq"]) == 35
    # Change-table ordinals: 8 header columns (bits 0-7), then a=8, b=9, id=10, d=11.
    assert update[PREFIX + "change_mask"] == bytes([0, 0b1011])
    assert before[PREFIX + "change_mask"] == b""
    assert (before["a"], before["b"], before["id"], before["d"]) == ("a0", "b0", 7, "d0")
    assert (update["a"], update["b"], update["id"], update["d"]) == ("a1", "b1", 7, "d1")
    assert update[PREFIX + "stream_position"] == str(ids[0])

    (message,) = data_messages(h)
    assert message["headers"]["operation"] == "UPDATE"
    assert message["headers"]["changeMask"] == "0B"
    assert message["headers"]["changeSequence"] == update[PREFIX + "change_seq"]
    assert message["beforeData"] == {"a": "a0", "b": "b0", "id": 7, "d": "d0"}
    assert message["data"] == {"a": "a1", "b": "b1", "id": 7, "d": "d1"}


@spark_on_one_database("postgresql")
def test_masks_drop_trailing_zero_bytes_and_a_delete_marks_only_its_key(harness):
    h = harness
    switch_on(h)
    h.log(
        (2, "usr", "idu=1", "fname", "Ann", "Anna"),
        (2, "usr", "idu=1", "lname", "Lee", "Lee"),
        (4, "usr", "idu=2"),
        (1, "usr", "idu=3", "fname", None, "Cy"),
        (1, "usr", "idu=3", "born", None, "2020-01-02T00:00:00Z"),
    )
    h.poll()

    rows = change_rows(h)
    assert [r[PREFIX + "change_oper"] for r in rows] == ["B", "U", "D", "I"]
    update, delete, insert = rows[1], rows[2], rows[3]
    # usr: idu=8, fname=9, lname=10, photo=11, age=12, active=13, born=14. lname kept its value.
    assert update[PREFIX + "change_mask"] == bytes([0, 0b10])
    assert delete[PREFIX + "change_mask"] == bytes([0, 0b1])
    assert (delete["idu"], delete["fname"]) == (2, None)
    assert insert[PREFIX + "change_mask"] == bytes([0, 0b1000011])
    assert insert["born"].isoformat() == "2020-01-02T00:00:00+00:00"

    update_msg, delete_msg, insert_msg = data_messages(h)
    assert update_msg["headers"]["changeMask"] == "02"
    assert update_msg["headers"]["columnMask"] == "07"
    assert delete_msg["headers"]["changeMask"] == delete_msg["headers"]["columnMask"] == "01"
    assert insert_msg["headers"]["changeMask"] == "43"
    assert insert_msg["data"]["photo"] is None and insert_msg["data"]["born"] == "2020-01-02T00:00:00Z"


@spark_on_one_database("mariadb")
def test_query_back_changes_carry_the_current_row_without_a_before_image(harness):
    h = harness
    switch_on(h, trail_header=True)
    h.insert_usr(5, fname="Eve", age=30)
    ids = h.log((5, "usr", "idu=5"), (8, "usr", "idu=5", "age"))
    h.poll()

    (row,) = change_rows(h)
    assert row[PREFIX + "change_oper"] == "I"
    assert row[PREFIX + "FormatType"] == "F"
    assert row[PREFIX + "AuditPos"] == ids[0]
    assert (row["idu"], row["fname"], row["age"], row["lname"]) == (5, "Eve", 30, None)
    # Trail header columns make 16 header columns: idu is bit 16.
    assert row[PREFIX + "change_mask"][2] & 0b1 == 0, "the key is not read back"
    assert row[PREFIX + "change_mask"] == bytes([0, 0, 0b1111110])

    (message,) = data_messages(h)
    assert message["beforeData"] is None
    assert message["trailHeader"]["FormatType"] == "F"
    assert message["trailHeader"]["BeforeAfter"] == "A"


@spark_on_one_database("sqlite")
def test_trans_ind_over_transactions_of_one_and_of_three_records(harness):
    h = harness
    switch_on(h, trail_header=True)
    three = h.log(
        (1, "usr", "idu=1", "fname", None, "Ann"),
        (1, "usr", "idu=2", "fname", None, "Bob"),
        (4, "usr", "idu=3"),
    )
    one = h.log((4, "usr", "idu=4"))
    update = h.log((2, "usr", "idu=5", "fname", "Old", "New"))
    set_transaction(h, "1001", three)
    set_transaction(h, "1002", one)
    h.poll()

    msgs = data_messages(h)
    assert [m["headers"]["streamPosition"] for m in msgs] == [str(i) for i in three + one + update]
    assert [m["trailHeader"]["TransInd"] for m in msgs] == [0, 1, 2, 3, 3]
    assert [m["headers"]["transactionEventCounter"] for m in msgs] == [1, 2, 3, 1, 1]
    assert [m["headers"]["transactionLastEvent"] for m in msgs] == [False, False, True, True, True]
    assert {m["headers"]["transactionId"] for m in msgs[:3]} == {f"{1001:032X}"}
    assert msgs[4]["headers"]["transactionId"] is None

    rows = change_rows(h)
    assert [r[PREFIX + "TransInd"] for r in rows] == [0, 1, 2, 3, 0, 2]
    assert [r[PREFIX + "BeforeAfter"] for r in rows] == ["A", "A", "B", "B", "B", "A"]
    assert [r[PREFIX + "transaction_id"] for r in rows[:4]] == [f"{1001:032X}"] * 3 + [f"{1002:032X}"]


@spark_on_one_database("postgresql")
def test_change_seq_increases_across_tables_cycles_and_a_restart(harness):
    h = harness
    switch_on(h)
    create_acct(h)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"), (1, "acct", "id=1", "a", None, "x"))
    h.poll()
    h.log((2, "acct", "id=1", "a", "x", "y"), (4, "usr", "idu=1"))
    late = h.log((1, "usr", "idu=9", "fname", None, "Zed"))
    with h.engine.begin() as conn:
        conn.execute(text(f"UPDATE {h.table('event_log')} SET event_time = '2001-01-01 00:00:00' "
                          f"WHERE record_id = {late[0]}"))
    h.poll()
    path = "spark" if h.config.spark.small_cycle_events == 0 else "driver"
    restarted = Harness(h.spark, h.db, h.output.parent, path=path)
    restarted.config = h.config
    restarted.log((1, "acct", "id=2", "a", None, "z"))
    restarted.poll()

    rows = all_change_rows(h, "usr", "acct")
    sequence = [r[PREFIX + "change_seq"] for r in rows]
    assert [r[PREFIX + "change_oper"] for r in rows] == ["I", "I", "B", "U", "D", "I", "I"]
    assert all(len(s) == 35 and s.isdigit() for s in sequence)
    assert sequence == sorted(sequence), "the late event's older time does not make the sequence go back"
    assert [int(s[16:]) for s in sequence] == [1, 2, 3, 3, 4, 5, 6]
    assert sequence[5][:16] == sequence[4][:16] > "2001"
    assert [m["headers"]["changeSequence"] for m in data_messages(h)] == sorted(set(sequence))


@spark_on_one_database("mariadb")
def test_metadata_is_emitted_again_with_the_next_version_after_a_column_is_added(harness):
    h = harness
    switch_on(h)
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    h.poll()
    h.db.execute(f"ALTER TABLE {h.table('usr')} ADD COLUMN nick VARCHAR(20)")
    h.log((1, "usr", "idu=2", "nick", None, "Bo"))
    h.poll()
    h.log((1, "usr", "idu=3", "fname", None, "Cy"))
    h.poll()

    usr = [m for m in metadata_messages(h) if m["lineage"]["table"] == "usr"]
    assert [m["lineage"]["tableVersion"] for m in usr] == [1, 2]
    first, second = usr
    assert "nick" not in first["tableStructure"]["tableColumns"]
    nick = second["tableStructure"]["tableColumns"]["nick"]
    assert nick["ordinal"] == 8 and nick["primaryKeyPosition"] == 0 and nick["length"] == 20
    assert second["tableStructure"]["tableColumns"]["idu"]["primaryKeyPosition"] == 1
    assert first["schemaId"] != second["schemaId"]
    assert second["lineage"]["server"] == "s1"

    data = data_messages(h)
    assert [m["headers"]["externalSchemaId"] for m in data] == [first["schemaId"], second["schemaId"],
                                                                 second["schemaId"]]
    assert "nick" not in data[0]["data"] and data[1]["data"]["nick"] == "Bo"
    for message in data:
        schema = usr[0] if message["headers"]["externalSchemaId"] == first["schemaId"] else usr[1]
        parsed = fastavro.parse_schema(json.loads(schema["dataSchema"]))
        assert fastavro.validation.validate(message, parsed, raise_errors=True)

    rows = change_rows(h)
    assert [r.get("nick") for r in rows] == [None, "Bo", None]
    assert "nick" not in pq.read_table(sorted((h.output / "changes" / "usr").glob("*.parquet"))[0]).column_names
    read = h.spark.read.option("mergeSchema", "true").parquet(str(h.output / "changes" / "usr"))
    assert sorted(r["nick"] or "" for r in read.select("nick").collect()) == ["", "", "Bo"]


@spark_on_one_database("sqlite")
def test_xds_change_tables_and_messages_agree_on_the_same_operations(harness):
    h = harness
    switch_on(h, partition_minutes=60)
    h.insert_usr(6, fname="Q", age=1)
    h.log(
        (1, "usr", "idu=1", "fname", None, "Ann"),
        (1, "usr", "idu=1", "age", None, "40"),
        (2, "usr", "idu=1", "age", "40", "41"),
        (4, "usr", "idu=2"),
        (6, "usr", "idu=6"),
        (3, "usr", "idu=7", "lname", None, "Moe"),
        (5, "usr", "idu=404"),
    )
    h.poll()

    xds = [(tag, assoc.split(",")[0], event) for tag, assoc, event in h.published().describe()]
    table_rows = [r for r in change_rows(h) if r[PREFIX + "change_oper"] != "B"]
    changes = [(r[PREFIX + "operation"], f"idu={r['idu']}", int(r[PREFIX + "stream_position"])) for r in table_rows]
    msgs = [(m["headers"]["operation"], f"idu={m['data']['idu']}", int(m["headers"]["streamPosition"]))
            for m in data_messages(h)]
    kinds = {"add": "INSERT", "delete": "DELETE", "modify": "UPDATE"}
    assert len(xds) == 5
    assert [(kinds[tag], key, event) for tag, key, event in xds] == changes == msgs
    assert all(r[PREFIX + "partition_name"] and len(r[PREFIX + "partition_name"]) == 31 for r in table_rows)


def sqlite_harness(spark, sqlite_database, tmp_path) -> Harness:
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    switch_on(h)
    return h


def test_a_column_named_like_a_header_stops_the_cycle_before_anything_is_acknowledged(
    spark, sqlite_database, tmp_path
):
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    h.db.execute("ALTER TABLE usr ADD COLUMN header__operation VARCHAR(10)")
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))

    with pytest.raises(StageFailedError) as failed:
        h.poll()
    assert failed.value.stage == "changes"
    assert "header__operation" in failed.value.reason and "header_prefix" in failed.value.reason
    assert set(h.statuses().values()) == {"N"}

    h.config = dataclasses.replace(
        h.config,
        output=dataclasses.replace(
            h.config.output, change_tables=ChangeTablesConfig(enabled=True, header_prefix="cdc_")
        ),
    )
    h.poll()
    (row,) = change_rows(h)
    assert row["cdc_change_oper"] == "I" and row["header__operation"] is None
    assert set(h.statuses().values()) == {"S"}


def test_a_killed_cycle_leaves_staged_files_that_the_next_cycle_removes(spark, sqlite_database, tmp_path):
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    (h.output / "changes" / "usr").mkdir(parents=True)
    (h.output / "messages").mkdir()
    stale = [
        h.output / "changes" / "usr" / ".000000000001-00000.parquet.staged",
        h.output / "messages" / ".000000000001-00000.jsonl.staged",
        h.output / "messages" / ".000000000001.jsonl.tmp",
    ]
    for path in stale:
        path.write_bytes(b"half")
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    h.poll()

    assert not any(path.exists() for path in stale)
    assert [r["fname"] for r in change_rows(h)] == ["Ann"]
    assert [m["data"]["fname"] for m in data_messages(h)] == ["Ann"]


def test_an_unreadable_change_sequence_file_stops_the_cycle_with_its_name(spark, sqlite_database, tmp_path):
    h = sqlite_harness(spark, sqlite_database, tmp_path)
    h.output.mkdir()
    (h.output / ".change-sequence").write_text("twelve\n")
    h.log((1, "usr", "idu=1", "fname", None, "Ann"))

    with pytest.raises(StageFailedError, match=r"change sequence file .*\.change-sequence"):
        h.poll()
    assert set(h.statuses().values()) == {"N"}
