"""Change tables as the vendor page lays them out: header columns, change mask bits, before-images,
trail header, typed Parquet values and the directory of each table. Expected values are worked
out by hand from the page's rules, not taken from the code."""
from __future__ import annotations

import base64
import calendar
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from publisher.config import ChangeTablesConfig
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import ValueType
from publisher.outputs.changes.tables import (
    HEADER_FIELDS,
    TRAIL_FIELDS,
    ChangeTableError,
    change_table_rows,
    change_table_schema,
    header_columns,
    table_directory,
    write_change_table_files,
)
from publisher.rules.changes import Change, StampedChange, TransactionPlace

UTC = dt.timezone.utc
PLAIN = ChangeTablesConfig(enabled=True)
TRAIL = ChangeTablesConfig(enabled=True, trail_header=True)
ALONE = TransactionPlace(index=0, total=1, row_index=0, rows=1)
ALONE_WITH_BEFORE = TransactionPlace(index=0, total=1, row_index=0, rows=2)
WHEN = dt.datetime(2017, 3, 13, 13, 0, 0, tzinfo=UTC)
SEQ = "2017031313000000" + "0" * 18 + "5"

# Columns listed out of table order on purpose: the ordinal decides.
USR = TableInfo(
    "usr",
    (
        ColumnInfo("born", ValueType.TIME, False, ordinal=7),
        ColumnInfo("idu", ValueType.INT, True, ordinal=1),
        ColumnInfo("fname", ValueType.STRING, False, ordinal=2),
        ColumnInfo("lname", ValueType.STRING, False, ordinal=3),
        ColumnInfo("photo", ValueType.OCTET, False, ordinal=4),
        ColumnInfo("age", ValueType.INT, False, ordinal=5),
        ColumnInfo("active", ValueType.STATE, False, ordinal=6),
    ),
)
USR_COLUMNS = ["idu", "fname", "lname", "photo", "age", "active", "born"]
FULL_ROW = {"idu": "7", "fname": "Ann", "lname": "Lee", "photo": "AAE=", "age": "41", "active": "true", "born": "0"}


def change(
    operation: str,
    after: Mapping[str, str | None],
    changed: tuple[str, ...],
    before: Mapping[str, str | None] | None = None,
    *,
    table: str = "usr",
    record_id: int = 1001,
    event_time: dt.datetime | None = WHEN,
    transaction_id: str | None = "12345",
    fetched: bool = False,
) -> Change:
    return Change(table, operation, record_id, event_time, transaction_id, after, before, changed, fetched)


def stamped(c: Change, seq: str = SEQ, place: TransactionPlace = ALONE) -> StampedChange:
    return StampedChange(c, seq, place)


def update_of_fname_and_age() -> Change:
    return change(
        "UPDATE",
        after={"idu": "7", "fname": "Bea", "age": "42"},
        changed=("fname", "age"),
        before={"idu": "7", "fname": "Ann", "age": "41"},
    )


def mask(row: dict, options: ChangeTablesConfig = PLAIN) -> bytes:
    return row[options.header_prefix + "change_mask"]


class TestHeaderColumns:
    def test_eight_prefixed_header_fields_in_the_pages_order(self) -> None:
        assert header_columns(PLAIN) == (
            "header__change_seq",
            "header__change_oper",
            "header__change_mask",
            "header__stream_position",
            "header__operation",
            "header__transaction_id",
            "header__timestamp",
            "header__partition_name",
        )

    def test_trail_fields_follow_only_when_asked(self) -> None:
        names = header_columns(ChangeTablesConfig(header_prefix="h_", trail_header=True))
        assert len(names) == 16
        assert names[:8] == tuple("h_" + f for f in HEADER_FIELDS)
        assert names[8:] == ("h_HdrInd", "h_IOType", "h_TransInd", "h_BeforeAfter",
                             "h_IOTime", "h_FormatType", "h_AuditPos", "h_RecLength")
        assert TRAIL_FIELDS == tuple(n[2:] for n in names[8:])


class TestChangeMask:
    def test_with_eight_header_columns_the_first_data_column_is_bit_8(self) -> None:
        [row] = change_table_rows(stamped(change("UPDATE", {"idu": "7"}, ("idu",))), USR, PLAIN)
        assert mask(row) == bytes([0b00000000, 0b00000001])

    def test_update_of_fname_and_age_sets_bits_9_and_12(self) -> None:
        c = change("UPDATE", {"idu": "7", "fname": "Bea", "age": "42"}, ("fname", "age"))
        [row] = change_table_rows(stamped(c), USR, PLAIN)
        assert mask(row) == b"\x00\x12"

    def test_trailing_zero_bytes_are_dropped(self) -> None:
        [row] = change_table_rows(stamped(change("UPDATE", {"idu": "7", "fname": "B"}, ("fname",))), USR, PLAIN)
        assert len(mask(row)) == 2
        assert mask(row) == b"\x00\x02"

    def test_insert_marks_every_carried_column(self) -> None:
        [full] = change_table_rows(stamped(change("INSERT", FULL_ROW, tuple(USR_COLUMNS))), USR, PLAIN)
        assert mask(full) == b"\x00\x7f"
        [some] = change_table_rows(stamped(change("INSERT", {"idu": "7", "born": "0"}, ("idu", "born"))), USR, PLAIN)
        assert mask(some) == bytes([0, 0b01000001])

    def test_delete_marks_only_the_key_columns(self) -> None:
        [row] = change_table_rows(stamped(change("DELETE", {"idu": "7"}, ("idu",))), USR, PLAIN)
        assert mask(row) == b"\x00\x01"
        assert row["header__change_oper"] == "D"
        assert row["header__operation"] == "DELETE"
        assert row["idu"] == 7
        assert [row[name] for name in USR_COLUMNS[1:]] == [None] * 6

    def test_prefix_does_not_move_the_bits(self) -> None:
        options = ChangeTablesConfig(header_prefix="x")
        c = change("UPDATE", {"idu": "7", "fname": "Bea", "age": "42"}, ("fname", "age"))
        [row] = change_table_rows(stamped(c), USR, options)
        assert mask(row, options) == b"\x00\x12"


class TestBeforeImage:
    def test_before_image_comes_first_with_the_same_change_seq(self) -> None:
        seq = "2017031313000000" + "0000000000000001001"
        before, update = change_table_rows(stamped(update_of_fname_and_age(), seq), USR, PLAIN)
        assert before["header__change_seq"] == update["header__change_seq"] == seq
        assert (before["header__change_oper"], before["header__operation"]) == ("B", "BEFOREIMAGE")
        assert (update["header__change_oper"], update["header__operation"]) == ("U", "UPDATE")

    def test_before_image_mask_is_empty(self) -> None:
        before, update = change_table_rows(stamped(update_of_fname_and_age()), USR, PLAIN)
        assert mask(before) == b""
        assert mask(update) == b"\x00\x12"

    def test_each_row_carries_its_own_values(self) -> None:
        before, update = change_table_rows(stamped(update_of_fname_and_age()), USR, PLAIN)
        assert {n: before[n] for n in USR_COLUMNS} == {
            "idu": 7, "fname": "Ann", "lname": None, "photo": None, "age": 41, "active": None, "born": None,
        }
        assert {n: update[n] for n in USR_COLUMNS} == {
            "idu": 7, "fname": "Bea", "lname": None, "photo": None, "age": 42, "active": None, "born": None,
        }

    def test_update_without_logged_values_is_one_row(self) -> None:
        rows = change_table_rows(stamped(change("UPDATE", {"idu": "7", "age": "42"}, ("age",))), USR, PLAIN)
        assert [r["header__change_oper"] for r in rows] == ["U"]

    def test_before_image_on_an_insert_is_refused(self) -> None:
        bad = change("INSERT", {"idu": "7"}, ("idu",), before={"idu": "7"})
        with pytest.raises(ChangeTableError, match="usr"):
            change_table_rows(stamped(bad), USR, PLAIN)


class TestHeaderValues:
    def test_position_transaction_and_time(self) -> None:
        [row] = change_table_rows(stamped(change("INSERT", {"idu": "7"}, ("idu",), record_id=98765)), USR, PLAIN)
        assert row["header__stream_position"] == "98765"
        assert row["header__transaction_id"] == "00000000000000000000000000003039"
        assert row["header__timestamp"] == dt.datetime(2017, 3, 13, 13, tzinfo=UTC)
        assert row["header__partition_name"] is None

    def test_unknown_time_and_transaction_are_null(self) -> None:
        c = change("INSERT", {"idu": "7"}, ("idu",), event_time=None, transaction_id=None)
        [row] = change_table_rows(stamped(c), USR, ChangeTablesConfig(partition_minutes=240))
        assert row["header__timestamp"] is None
        assert row["header__transaction_id"] is None
        assert row["header__partition_name"] is None

    @pytest.mark.parametrize(
        ("minutes", "time", "expected"),
        [
            (240, dt.datetime(2017, 3, 13, 13, 0, tzinfo=UTC), "20170313T120000_20170313T160000"),
            (240, dt.datetime(2017, 3, 13, 12, 0, tzinfo=UTC), "20170313T120000_20170313T160000"),
            (240, dt.datetime(2017, 3, 13, 23, 59, 59, 999999, tzinfo=UTC), "20170313T200000_20170314T000000"),
            (30, dt.datetime(2017, 3, 13, 12, 45, 10, tzinfo=UTC), "20170313T123000_20170313T130000"),
            (1440, dt.datetime(2017, 12, 31, 7, 0, tzinfo=UTC), "20171231T000000_20180101T000000"),
            (60, dt.datetime(2017, 3, 13, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
             "20170313T070000_20170313T080000"),
        ],
    )
    def test_partition_name_is_the_period_holding_the_event(self, minutes: int, time: dt.datetime,
                                                           expected: str) -> None:
        [row] = change_table_rows(stamped(change("INSERT", {"idu": "7"}, ("idu",), event_time=time)), USR,
                                  ChangeTablesConfig(partition_minutes=minutes))
        assert row["header__partition_name"] == expected


class TestTrailHeader:
    def test_first_data_bit_moves_to_16(self) -> None:
        [row] = change_table_rows(stamped(change("UPDATE", {"idu": "7"}, ("idu",))), USR, TRAIL)
        assert mask(row, TRAIL) == b"\x00\x00\x01"
        _, update = change_table_rows(stamped(update_of_fname_and_age(), place=ALONE_WITH_BEFORE), USR, TRAIL)
        assert mask(update, TRAIL) == b"\x00\x00\x12"

    def test_update_with_before_image_in_a_transaction_of_its_own(self) -> None:
        c = change(
            "UPDATE",
            after={"idu": "7", "fname": "Bea"},
            changed=("fname",),
            before={"idu": "7", "fname": "Ann"},
            record_id=555,
            fetched=True,
        )
        before, update = change_table_rows(stamped(c, place=ALONE_WITH_BEFORE), USR, TRAIL)
        assert before["header__TransInd"] == 0
        assert update["header__TransInd"] == 2
        assert before["header__HdrInd"] == update["header__HdrInd"] == "E"
        assert before["header__IOType"] == update["header__IOType"] == "UPDATE"
        assert (before["header__BeforeAfter"], update["header__BeforeAfter"]) == ("B", "A")
        assert (before["header__FormatType"], update["header__FormatType"]) == ("R", "F")
        assert before["header__AuditPos"] == update["header__AuditPos"] == 555
        assert before["header__IOTime"] == update["header__IOTime"] == WHEN
        assert before["header__RecLength"] == len('{"idu":"7","fname":"Ann"}')
        assert update["header__RecLength"] == len('{"idu":"7","fname":"Bea"}')

    def test_three_changes_of_one_transaction_read_first_middle_last(self) -> None:
        places = [TransactionPlace(i, 3, i, 3) for i in range(3)]
        marks = [
            change_table_rows(stamped(change("INSERT", {"idu": str(i)}, ("idu",)), place=p), USR, TRAIL)[0]
            ["header__TransInd"]
            for i, p in enumerate(places)
        ]
        assert marks == [0, 1, 2]

    def test_lone_insert_is_the_only_record(self) -> None:
        [row] = change_table_rows(stamped(change("INSERT", {"idu": "7"}, ("idu",))), USR, TRAIL)
        assert row["header__TransInd"] == 3
        assert row["header__BeforeAfter"] == "A"
        assert row["header__FormatType"] == "R"
        assert row["header__RecLength"] == len('{"idu":"7"}')

    def test_delete_is_a_before_record(self) -> None:
        [row] = change_table_rows(stamped(change("DELETE", {"idu": "7"}, ("idu",))), USR, TRAIL)
        assert (row["header__IOType"], row["header__BeforeAfter"]) == ("DELETE", "B")

    def test_middle_update_of_a_transaction_counts_rows_not_changes(self) -> None:
        # insert (row 0), this update (rows 1 and 2), a delete (row 3): four rows in all.
        place = TransactionPlace(index=1, total=3, row_index=1, rows=4)
        before, update = change_table_rows(stamped(update_of_fname_and_age(), place=place), USR, TRAIL)
        assert (before["header__TransInd"], update["header__TransInd"]) == (1, 1)


class TestSchema:
    def test_header_then_data_columns_in_table_order_with_types(self) -> None:
        schema = change_table_schema(USR, TRAIL)
        utc = pa.timestamp("us", tz="UTC")
        assert list(zip(schema.names, schema.types)) == [
            ("header__change_seq", pa.string()),
            ("header__change_oper", pa.string()),
            ("header__change_mask", pa.binary()),
            ("header__stream_position", pa.string()),
            ("header__operation", pa.string()),
            ("header__transaction_id", pa.string()),
            ("header__timestamp", utc),
            ("header__partition_name", pa.string()),
            ("header__HdrInd", pa.string()),
            ("header__IOType", pa.string()),
            ("header__TransInd", pa.int8()),
            ("header__BeforeAfter", pa.string()),
            ("header__IOTime", utc),
            ("header__FormatType", pa.string()),
            ("header__AuditPos", pa.int64()),
            ("header__RecLength", pa.int32()),
            ("idu", pa.int64()),
            ("fname", pa.string()),
            ("lname", pa.string()),
            ("photo", pa.binary()),
            ("age", pa.int64()),
            ("active", pa.bool_()),
            ("born", utc),
        ]

    def test_header_name_collision_names_the_column(self) -> None:
        table = TableInfo("odd", (ColumnInfo("id", ValueType.INT, True, ordinal=1),
                                  ColumnInfo("HEADER__Operation", ValueType.STRING, False, ordinal=2)))
        with pytest.raises(ChangeTableError, match=r"'HEADER__Operation'.*header_prefix"):
            change_table_schema(table, PLAIN)
        change_table_schema(table, ChangeTablesConfig(header_prefix="meta_"))

    def test_trail_names_collide_only_when_trail_header_is_on(self) -> None:
        table = TableInfo("odd", (ColumnInfo("header__hdrind", ValueType.STRING, True, ordinal=1),))
        change_table_schema(table, PLAIN)
        with pytest.raises(ChangeTableError, match="header__hdrind"):
            change_table_schema(table, TRAIL)


class TestBadChanges:
    def test_column_the_table_lacks(self) -> None:
        with pytest.raises(ChangeTableError, match=r"'usr'.*'nick'"):
            change_table_rows(stamped(change("INSERT", {"idu": "7", "nick": "x"}, ("idu",))), USR, PLAIN)

    def test_operation_other_than_insert_update_delete(self) -> None:
        with pytest.raises(ChangeTableError, match=r"'usr'.*'UPSERT'"):
            change_table_rows(stamped(change("UPSERT", {"idu": "7"}, ("idu",))), USR, PLAIN)

    def test_integer_beyond_64_bits(self) -> None:
        too_big = str(2**63)
        with pytest.raises(ChangeTableError, match=r"'usr'.*'age'"):
            change_table_rows(stamped(change("INSERT", {"idu": "7", "age": too_big}, ("idu", "age"))), USR, PLAIN)
        [row] = change_table_rows(stamped(change("INSERT", {"idu": str(-(2**63))}, ("idu",))), USR, PLAIN)
        assert row["idu"] == -(2**63)

    def test_change_of_a_table_not_in_the_catalog(self, tmp_path: Path) -> None:
        with pytest.raises(ChangeTableError, match="'ghost'"):
            write_change_table_files([stamped(change("INSERT", {"idu": "1"}, ("idu",), table="ghost"))],
                                     {"usr": USR}, tmp_path, "part.parquet", PLAIN)


class TestTableDirectory:
    @pytest.mark.parametrize("name", ["usr", "Orders_2024", "sales.q1", "a$b-c", "x_"])
    def test_plain_names_are_kept(self, name: str) -> None:
        assert table_directory(name) == name

    @pytest.mark.parametrize(
        ("name", "expected"),
        [("a/b", "%a%2Fb"), (".x", "%.x"), ("_x", "%_x"), ("..", "%.."), ("a b", "%a%20b"), ("é", "%%C3%A9")],
    )
    def test_other_names_are_percent_encoded_behind_a_prefix(self, name: str, expected: str) -> None:
        directory = table_directory(name)
        assert directory == expected
        assert "/" not in directory
        assert not directory.startswith((".", "_"))
        assert unquote(directory[1:]) == name

    def test_no_two_names_share_a_directory(self) -> None:
        names = ["a/b", "a%2Fb", "%a%2Fb", ".x", "%.x", "x", "_x", "~x", "a b", "a%20b"]
        assert len({table_directory(n) for n in names}) == len(names)


class TestParquetFiles:
    def test_rows_read_back_typed_in_order(self, tmp_path: Path) -> None:
        photo = b"\x89PNG\x00\xff"
        born_text = str(calendar.timegm((1990, 5, 17, 8, 30, 15, 0, 0, 0)))
        insert = change(
            "INSERT",
            {"idu": "7", "fname": "Ann", "lname": "Lee", "photo": base64.b64encode(photo).decode("ascii"),
             "age": "41", "active": "true", "born": born_text},
            tuple(USR_COLUMNS),
            record_id=10,
        )
        update = change("UPDATE", {"idu": "7", "active": "false"}, ("active",), {"idu": "7", "active": "true"},
                        record_id=11)
        delete = change("DELETE", {"idu": "7"}, ("idu",), record_id=12)
        seqs = ["2017031313000000" + f"{n:019d}" for n in (1, 2, 3)]
        written = write_change_table_files(
            [stamped(c, s) for c, s in zip([insert, update, delete], seqs)], {"usr": USR}, tmp_path,
            "part-0001.parquet", PLAIN,
        )
        assert written == {"usr": 4}
        read = pq.read_table(tmp_path / "usr" / "part-0001.parquet")
        assert read.schema.field("born").type == pa.timestamp("us", tz="UTC")
        rows = read.to_pylist()
        assert [(r["header__change_seq"][-1], r["header__change_oper"]) for r in rows] == [
            ("1", "I"), ("2", "B"), ("2", "U"), ("3", "D"),
        ]
        first = rows[0]
        assert first["idu"] == 7
        assert first["photo"] == photo
        assert first["age"] == 41
        assert first["active"] is True
        assert first["born"] == dt.datetime(1990, 5, 17, 8, 30, 15, tzinfo=UTC)
        assert first["header__timestamp"] == WHEN
        assert first["header__change_mask"] == b"\x00\x7f"
        assert [r["active"] for r in rows[1:]] == [True, False, None]
        assert [r["header__change_mask"] for r in rows[1:]] == [b"", b"\x00\x20", b"\x00\x01"]

    def test_each_table_gets_its_own_directory(self, tmp_path: Path) -> None:
        odd = TableInfo("a/b", (ColumnInfo("k", ValueType.STRING, True, ordinal=1),))
        changes = [
            stamped(change("INSERT", {"k": "one"}, ("k",), table="a/b")),
            stamped(change("INSERT", {"idu": "1"}, ("idu",))),
            stamped(change("INSERT", {"k": "two"}, ("k",), table="a/b")),
        ]
        written = write_change_table_files(changes, {"usr": USR, "a/b": odd}, tmp_path, "f.parquet", TRAIL)
        assert written == {"a/b": 2, "usr": 1}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["%a%2Fb", "usr"]
        odd_rows = pq.read_table(tmp_path / "%a%2Fb" / "f.parquet").to_pylist()
        assert [r["k"] for r in odd_rows] == ["one", "two"]
        assert odd_rows[0]["header__RecLength"] == len('{"k":"one"}')
        assert odd_rows[0]["header__TransInd"] == 3

    def test_no_changes_no_files(self, tmp_path: Path) -> None:
        assert write_change_table_files([], {"usr": USR}, tmp_path, "f.parquet", PLAIN) == {}
        assert list(tmp_path.iterdir()) == []
