"""Metadata and data messages: the vendor's layout, masks, Avro schemas that accept the messages,
and table versions that survive restarts."""
from __future__ import annotations

import base64
import calendar
import datetime as dt
import json
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fastavro
import fastavro.validation
import pytest
from hunting import budget
from hypothesis import example, given, settings
from hypothesis import strategies as st

from publisher.config import MessagesConfig
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import ValueType
from publisher.outputs.durable import JSON_LINE_BREAKS
from publisher.outputs.messages.build import (
    TableVersions,
    TableVersionsError,
    avro_name,
    data_message,
    data_schema,
    field_names,
    json_line,
    message_key,
    metadata_message,
    schema_id,
    table_signature,
)
from publisher.rules.changes import DELETE, INSERT, UPDATE, Change, StampedChange, TransactionPlace

UTC = dt.timezone.utc
LABEL = "crm"
BORN = calendar.timegm((1990, 5, 17, 8, 30, 0, 0, 0, 0))
"""1990-05-17T08:30:00Z in epoch seconds, as TIME values are published."""
EVENT_TIME = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
PHOTO = bytes([0xAA, 0xAA, 0x00, 0xFF])


def usr_columns() -> list[ColumnInfo]:
    return [
        ColumnInfo("idu", ValueType.INT, True, ordinal=1, sql_type="INTEGER", key_position=1),
        ColumnInfo("fname", ValueType.STRING, False, ordinal=2, sql_type="VARCHAR(64)", length=64),
        ColumnInfo("lname", ValueType.STRING, False, ordinal=3, sql_type="VARCHAR(64)", length=64),
        ColumnInfo("photo", ValueType.OCTET, False, ordinal=4, sql_type="BLOB"),
        ColumnInfo("age", ValueType.INT, False, ordinal=5, sql_type="INTEGER"),
        ColumnInfo("active", ValueType.STATE, False, ordinal=6, sql_type="BOOLEAN"),
        ColumnInfo("born", ValueType.TIME, False, ordinal=7, sql_type="TIMESTAMP"),
        ColumnInfo("salary", ValueType.STRING, False, ordinal=8, sql_type="NUMERIC(10, 2)", precision=10, scale=2),
    ]


USR = TableInfo("usr", tuple(usr_columns()))
FULL_ROW = {
    "idu": "1",
    "fname": "Ann",
    "lname": "Lee",
    "photo": base64.b64encode(PHOTO).decode("ascii"),
    "age": "42",
    "active": "true",
    "born": str(BORN),
    "salary": "1234.50",
}
ALL_OPTIONS = [
    MessagesConfig(enabled=True, external_schema_id=ids, trail_header=trail)
    for ids in (False, True)
    for trail in (False, True)
]
PLAIN = MessagesConfig(enabled=True)


def make_change(
    operation: str,
    after: Mapping[str, str | None],
    before: Mapping[str, str | None] | None = None,
    changed: tuple[str, ...] = (),
    table: TableInfo = USR,
    record_id: int = 101,
    transaction_id: str | None = "7",
    event_time: dt.datetime | None = EVENT_TIME,
    fetched: bool = False,
) -> Change:
    return Change(table.name, operation, record_id, event_time, transaction_id, after, before, changed, fetched)


def stamped(change: Change, index: int = 0, total: int = 1, number: int = 1) -> StampedChange:
    return StampedChange(change, f"2024010203040500{number:019d}", TransactionPlace(index, total, index, total))


def message(change: Change, options: MessagesConfig = PLAIN, table: TableInfo = USR, **place: int) -> dict[str, Any]:
    return data_message(stamped(change, **place), table, LABEL, options, schema_id(table, 1, LABEL, options))


def ordinals(mask: str) -> set[int]:
    """The 1-based ordinals whose bits a little-endian hex mask sets."""
    value = int.from_bytes(bytes.fromhex(mask), "little")
    return {bit + 1 for bit in range(value.bit_length()) if value >> bit & 1}


def an_insert() -> Change:
    return make_change(INSERT, dict(FULL_ROW), changed=tuple(FULL_ROW))


def an_update() -> Change:
    return make_change(
        UPDATE,
        {"idu": "1", "fname": "Anne", "age": "43"},
        before={"idu": "1", "fname": "Ann", "age": "42"},
        changed=("fname", "age"),
    )


def a_delete() -> Change:
    return make_change(DELETE, {"idu": "1"}, changed=("idu",))


def parsed(options: MessagesConfig, table: TableInfo = USR) -> Any:
    return fastavro.parse_schema(data_schema(table, LABEL, options))


def wide_table(count: int) -> TableInfo:
    return TableInfo("wide", tuple(
        ColumnInfo(f"c{i}", ValueType.INT, i == 1, ordinal=i, sql_type="INTEGER", key_position=int(i == 1))
        for i in range(1, count + 1)
    ))


class TestMasks:
    def test_the_vendor_example_columns_1_2_and_4_changed_is_0B(self) -> None:
        change = make_change(
            UPDATE,
            {"idu": "2", "fname": "Bo", "photo": "qqo="},
            before={"idu": "1", "fname": "Al", "photo": "u7s="},
            changed=("idu", "fname", "photo"),
        )
        assert message(change)["headers"]["changeMask"] == "0B"

    def test_bits_follow_ordinals_not_the_order_columns_are_listed(self) -> None:
        shuffled = TableInfo("usr", tuple(reversed(usr_columns())))
        change = make_change(UPDATE, {"idu": "1", "fname": "Bo", "photo": "qqo="}, changed=("idu", "fname", "photo"))
        assert message(change, table=shuffled)["headers"]["changeMask"] == "0B"

    def test_trailing_zero_bytes_are_dropped_and_leading_ones_kept(self) -> None:
        wide = wide_table(12)
        row = {f"c{i}": str(i) for i in range(1, 13)}
        first = message(make_change(UPDATE, row, changed=("c1",), table=wide), table=wide)
        assert first["headers"]["changeMask"] == "01"
        assert first["headers"]["columnMask"] == "FF0F"
        ninth = message(make_change(UPDATE, row, changed=("c9",), table=wide), table=wide)
        assert ninth["headers"]["changeMask"] == "0001"

    def test_column_mask_tells_a_carried_null_from_a_column_not_carried(self) -> None:
        change = make_change(
            UPDATE,
            {"idu": "1", "fname": "Ann", "lname": None},
            before={"idu": "1", "fname": "Anne", "lname": "Lee"},
            changed=("fname", "lname"),
        )
        msg = message(change)
        assert msg["data"]["lname"] is None and msg["data"]["photo"] is None
        assert ordinals(msg["headers"]["changeMask"]) == {2, 3}
        assert ordinals(msg["headers"]["columnMask"]) == {1, 2, 3}
        assert msg["headers"]["columnMask"] != msg["headers"]["changeMask"]

    def test_column_mask_of_an_update_includes_the_before_image_columns(self) -> None:
        change = make_change(UPDATE, {"idu": "1", "age": "5"}, before={"idu": "1", "age": "4", "born": "0"},
                             changed=("age",))
        assert ordinals(message(change)["headers"]["columnMask"]) == {1, 5, 7}

    def test_a_delete_carries_and_marks_only_the_key(self) -> None:
        msg = message(a_delete())
        assert msg["headers"]["changeMask"] == "01"
        assert msg["headers"]["columnMask"] == "01"
        assert msg["data"] == {"idu": 1, "fname": None, "lname": None, "photo": None, "age": None,
                               "active": None, "born": None, "salary": None}
        assert msg["beforeData"] is None


class TestDataMessage:
    def test_insert_has_typed_values_and_headers(self) -> None:
        msg = message(an_insert())
        assert msg["schema"] == "crm" and msg["table"] == "usr"
        assert msg["data"] == {
            "idu": 1,
            "fname": "Ann",
            "lname": "Lee",
            "photo": "qqoA/w==",
            "age": 42,
            "active": True,
            "born": "1990-05-17T08:30:00Z",
            "salary": "1234.50",
        }
        assert msg["beforeData"] is None
        assert msg["headers"] == {
            "operation": "INSERT",
            "changeSequence": "20240102030405000000000000000000001",
            "timestamp": "2024-01-02T03:04:05Z",
            "streamPosition": "101",
            "transactionId": "00000000000000000000000000000007",
            "changeMask": "FF",
            "columnMask": "FF",
            "transactionEventCounter": 1,
            "transactionLastEvent": True,
        }
        assert "trailHeader" not in msg

    def test_update_carries_the_before_image(self) -> None:
        msg = message(an_update())
        assert msg["headers"]["operation"] == "UPDATE"
        assert msg["data"]["fname"] == "Anne" and msg["data"]["age"] == 43
        assert msg["beforeData"]["fname"] == "Ann" and msg["beforeData"]["age"] == 42
        assert msg["beforeData"]["lname"] is None
        assert set(msg["beforeData"]) == set(msg["data"])

    def test_update_without_logged_old_values_has_no_before_data(self) -> None:
        change = make_change(UPDATE, {"idu": "1", "age": "9"}, changed=("age",), fetched=True)
        assert message(change)["beforeData"] is None

    def test_event_time_is_given_in_utc_and_may_be_missing(self) -> None:
        plus_two = dt.timezone(dt.timedelta(hours=2))
        local = make_change(DELETE, {"idu": "1"}, event_time=dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=plus_two))
        assert message(local)["headers"]["timestamp"] == "2024-01-02T03:04:05Z"
        unknown = make_change(DELETE, {"idu": "1"}, event_time=None, transaction_id=None)
        headers = message(unknown)["headers"]
        assert headers["timestamp"] is None and headers["transactionId"] is None

    def test_external_schema_id_is_the_table_versions_id(self) -> None:
        options = MessagesConfig(enabled=True, external_schema_id=True)
        msg = message(an_insert(), options)
        assert msg["headers"]["externalSchemaId"] == schema_id(USR, 1, LABEL, options)
        assert "externalSchemaId" not in message(an_insert())["headers"]

    def test_external_schema_id_without_an_id_is_refused(self) -> None:
        options = MessagesConfig(enabled=True, external_schema_id=True)
        with pytest.raises(ValueError, match="schema id"):
            data_message(stamped(an_insert()), USR, LABEL, options, None)

    def test_a_change_of_another_table_is_refused(self) -> None:
        with pytest.raises(ValueError, match="'usr'"):
            message(an_insert(), table=wide_table(3))

    @pytest.mark.parametrize(
        ("change", "before_after", "io_type"),
        [(an_insert(), "A", "INSERT"), (an_update(), "A", "UPDATE"), (a_delete(), "B", "DELETE")],
    )
    def test_trail_header(self, change: Change, before_after: str, io_type: str) -> None:
        trail = message(change, MessagesConfig(enabled=True, trail_header=True))["trailHeader"]
        assert trail["HdrInd"] == "E"
        assert trail["IOType"] == io_type
        assert trail["BeforeAfter"] == before_after
        assert trail["IOTime"] == "2024-01-02T03:04:05Z"
        assert trail["FormatType"] == "R"
        assert trail["AuditPos"] == 101

    def test_trail_header_of_a_fetched_delete(self) -> None:
        change = make_change(DELETE, {"idu": "1"}, record_id=2**40, fetched=True)
        trail = message(change, MessagesConfig(enabled=True, trail_header=True))["trailHeader"]
        assert trail["FormatType"] == "F"
        assert trail["AuditPos"] == 2**40
        assert trail["RecLength"] == len(b'{"idu":"1"}')

    def test_a_transaction_of_three(self) -> None:
        options = MessagesConfig(enabled=True, trail_header=True)
        msgs = [message(an_update(), options, index=i, total=3) for i in range(3)]
        assert [m["headers"]["transactionEventCounter"] for m in msgs] == [1, 2, 3]
        assert [m["headers"]["transactionLastEvent"] for m in msgs] == [False, False, True]
        assert [m["trailHeader"]["TransInd"] for m in msgs] == [0, 1, 2]

    def test_a_transaction_of_one(self) -> None:
        msg = message(an_update(), MessagesConfig(enabled=True, trail_header=True), index=0, total=1)
        assert msg["headers"]["transactionEventCounter"] == 1
        assert msg["headers"]["transactionLastEvent"] is True
        assert msg["trailHeader"]["TransInd"] == 3


class TestAvroSchema:
    @pytest.mark.parametrize("options", ALL_OPTIONS, ids=lambda o: f"ids={o.external_schema_id},trail={o.trail_header}")
    @pytest.mark.parametrize("make", [an_insert, an_update, a_delete], ids=["insert", "update", "delete"])
    def test_the_schema_accepts_the_messages(self, options: MessagesConfig, make: Any) -> None:
        msg = json.loads(json_line(message(make(), options)))
        assert fastavro.validation.validate(msg, parsed(options), raise_errors=True)

    def test_the_schema_names_every_column_in_table_order(self) -> None:
        schema = data_schema(USR, LABEL, PLAIN)
        data = next(f for f in schema["fields"] if f["name"] == "data")["type"]
        assert [f["name"] for f in data["fields"]] == [c.name for c in usr_columns()]
        types = {f["name"]: f["type"] for f in data["fields"]}
        assert types["idu"] == ["null", "long"]
        assert types["active"] == ["null", "boolean"]
        assert types["born"] == ["null", "string"]
        assert all(f["default"] is None for f in data["fields"])

    def test_a_string_where_a_long_is_is_rejected(self) -> None:
        msg = json.loads(json_line(message(an_insert())))
        msg["data"]["age"] = "forty-two"
        with pytest.raises(fastavro.validation.ValidationError):
            fastavro.validation.validate(msg, parsed(PLAIN), raise_errors=True)

    def test_a_missing_header_is_rejected(self) -> None:
        options = MessagesConfig(enabled=True, external_schema_id=True)
        msg = json.loads(json_line(message(an_insert(), options)))
        del msg["headers"]["externalSchemaId"]
        with pytest.raises(fastavro.validation.ValidationError):
            fastavro.validation.validate(msg, parsed(options), raise_errors=True)

    def test_a_trail_header_field_of_the_wrong_type_is_rejected(self) -> None:
        msg = json.loads(json_line(message(an_insert(), MessagesConfig(enabled=True, trail_header=True))))
        msg["trailHeader"]["TransInd"] = "3"
        with pytest.raises(fastavro.validation.ValidationError):
            fastavro.validation.validate(msg, parsed(MessagesConfig(enabled=True, trail_header=True)),
                                         raise_errors=True)

    def test_labels_and_tables_that_are_not_avro_names_still_give_a_schema(self) -> None:
        table = TableInfo("order items", USR.columns)
        schema = data_schema(table, "my-db.2024", PLAIN)
        fastavro.parse_schema(schema)
        change = Change("order items", INSERT, 1, EVENT_TIME, None, dict(FULL_ROW), None, tuple(FULL_ROW), False)
        msg = data_message(stamped(change), table, "my-db.2024", PLAIN, None)
        assert fastavro.validation.validate(json.loads(json_line(msg)), fastavro.parse_schema(schema))


class TestFieldNames:
    def test_avro_names_are_kept_and_others_sanitised(self) -> None:
        assert avro_name("fname") == "fname"
        assert avro_name("_x9") == "_x9"
        assert avro_name("first name") == "first_name"
        assert avro_name("1st") == "_1st"
        assert avro_name("prix-€") == "prix__"
        assert avro_name("") == "_"

    def test_a_column_that_is_not_an_avro_name_gets_a_field_and_validates(self) -> None:
        table = TableInfo("people", (
            ColumnInfo("id", ValueType.INT, True, ordinal=1, sql_type="INTEGER", key_position=1),
            ColumnInfo("first name", ValueType.STRING, False, ordinal=2, sql_type="TEXT"),
        ))
        change = make_change(INSERT, {"id": "3", "first name": "Zoë"}, changed=("id", "first name"), table=table)
        msg = json.loads(json_line(message(change, table=table)))
        assert msg["data"] == {"id": 3, "first_name": "Zoë"}
        assert fastavro.validation.validate(msg, parsed(PLAIN, table), raise_errors=True)
        columns = metadata_message(table, 1, LABEL, PLAIN, EVENT_TIME)["tableStructure"]["tableColumns"]
        assert columns["first name"]["field"] == "first_name"
        assert columns["id"]["field"] == "id"

    def test_sanitised_names_never_take_a_real_columns_name(self) -> None:
        table = TableInfo("t", (
            ColumnInfo("first name", ValueType.STRING, False, ordinal=1),
            ColumnInfo("first_name", ValueType.STRING, True, ordinal=2, key_position=1),
            ColumnInfo("first-name", ValueType.STRING, False, ordinal=3),
        ))
        names = field_names(table)
        assert names["first_name"] == "first_name"
        assert len(set(names.values())) == 3
        assert names == field_names(TableInfo("t", tuple(reversed(table.columns))))
        fastavro.parse_schema(data_schema(table, LABEL, PLAIN))


class TestMetadataMessage:
    def test_columns_as_the_vendor_describes_them(self) -> None:
        msg = metadata_message(USR, 3, LABEL, MessagesConfig(enabled=True, server="db-host", task="nightly"),
                               dt.datetime(2024, 6, 1, 12, 0, tzinfo=UTC))
        assert msg["lineage"] == {
            "server": "db-host",
            "task": "nightly",
            "schema": "crm",
            "table": "usr",
            "tableVersion": 3,
            "timestamp": "2024-06-01T12:00:00Z",
        }
        columns = msg["tableStructure"]["tableColumns"]
        assert list(columns) == ["idu", "fname", "lname", "photo", "age", "active", "born", "salary"]
        assert columns["idu"] == {"ordinal": 1, "type": "INTEGER", "length": None, "precision": None, "scale": None,
                                  "primaryKeyPosition": 1, "field": "idu"}
        assert columns["fname"]["type"] == "VARCHAR(64)" and columns["fname"]["length"] == 64
        assert columns["fname"]["primaryKeyPosition"] == 0
        assert (columns["salary"]["precision"], columns["salary"]["scale"]) == (10, 2)

    def test_data_schema_is_a_string_holding_the_avro_schema(self) -> None:
        options = MessagesConfig(enabled=True, trail_header=True)
        msg = metadata_message(USR, 1, LABEL, options, EVENT_TIME)
        assert isinstance(msg["dataSchema"], str)
        schema = fastavro.parse_schema(json.loads(msg["dataSchema"]))
        data = json.loads(json_line(message(an_update(), options)))
        assert fastavro.validation.validate(data, schema, raise_errors=True)
        assert msg["schemaId"] == schema_id(USR, 1, LABEL, options)

    def test_server_defaults_to_this_host(self) -> None:
        msg = metadata_message(USR, 1, LABEL, PLAIN, EVENT_TIME)
        assert msg["lineage"]["server"] == socket.gethostname()

    def test_naive_time_is_read_as_utc(self) -> None:
        msg = metadata_message(USR, 1, LABEL, PLAIN, dt.datetime(2024, 6, 1, 12, 0))
        assert msg["lineage"]["timestamp"] == "2024-06-01T12:00:00Z"

    def test_schema_id_names_the_version_and_changes_with_the_layout(self) -> None:
        first = schema_id(USR, 1, LABEL, PLAIN)
        assert first.startswith("crm.usr.v1-")
        assert first == schema_id(TableInfo("usr", tuple(usr_columns())), 1, LABEL, PLAIN)
        assert schema_id(USR, 2, LABEL, PLAIN).startswith("crm.usr.v2-")
        wider = TableInfo("usr", (*usr_columns(), ColumnInfo("note", ValueType.STRING, False, ordinal=9)))
        assert schema_id(wider, 1, LABEL, PLAIN) != first
        assert schema_id(USR, 1, LABEL, MessagesConfig(trail_header=True)) != first


class TestTableVersions:
    def test_first_sighting_unchanged_and_changed(self, tmp_path: Path) -> None:
        versions = TableVersions.load(tmp_path / "versions.json")
        assert versions.advance([USR]) == [(USR, 1)]
        assert versions.version_of("usr") == 1
        assert versions.advance([TableInfo("usr", tuple(usr_columns()))]) == []
        wider = TableInfo("usr", (*usr_columns(), ColumnInfo("note", ValueType.STRING, False, ordinal=9)))
        assert versions.advance([wider]) == [(wider, 2)]
        assert versions.version_of("usr") == 2

    def test_a_type_change_is_a_new_version(self) -> None:
        columns = usr_columns()
        columns[1] = ColumnInfo("fname", ValueType.STRING, False, ordinal=2, sql_type="VARCHAR(128)", length=128)
        assert table_signature(TableInfo("usr", tuple(columns))) != table_signature(USR)

    def test_versions_survive_save_and_load(self, tmp_path: Path) -> None:
        path = tmp_path / "messages" / "versions.json"
        versions = TableVersions.load(path)
        versions.advance([USR, wide_table(3)])
        wider = TableInfo("usr", (*usr_columns(), ColumnInfo("note", ValueType.STRING, False, ordinal=9)))
        versions.advance([wider])
        versions.save()
        again = TableVersions.load(path)
        assert again.version_of("usr") == 2 and again.version_of("wide") == 1
        assert again.advance([wider, wide_table(3)]) == []
        assert again.advance([USR]) == [(USR, 3)]

    def test_an_unknown_table_has_no_version(self, tmp_path: Path) -> None:
        with pytest.raises(KeyError, match="usr"):
            TableVersions.load(tmp_path / "none.json").version_of("usr")

    @pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"format": 1, "tables": {"usr": {"version": "1"}}}',
                                         b"\xff\xfe"])
    def test_a_corrupt_file_names_its_path(self, tmp_path: Path, content: bytes) -> None:
        path = tmp_path / "versions.json"
        path.write_bytes(content)
        with pytest.raises(TableVersionsError, match=re.escape(str(path))):
            TableVersions.load(path)


class TestJsonLine:
    def test_line_breaks_are_escaped_so_a_message_is_one_line(self) -> None:
        change = make_change(INSERT, {"idu": "1", "fname": "a\u2028b\u2029c\x85d\ne"}, changed=("idu", "fname"))
        line = json_line(message(change))
        assert line.endswith(b"\n")
        assert b"\\u2028" in line and "\u2028".encode() not in line
        assert len(line.decode("utf-8").splitlines()) == 1
        assert json.loads(line)["data"]["fname"] == "a\u2028b\u2029c\x85d\ne"

    def test_compact_utf8(self) -> None:
        assert json_line({"a": "Zoë", "b": [1, None]}) == '{"a":"Zoë","b":[1,null]}\n'.encode()

    @settings(max_examples=budget(400))
    @given(st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.dictionaries(st.text(), inner, max_size=4) | st.lists(inner, max_size=4), max_leaves=12,
    ).map(lambda value: {"data": value}))
    @example({"data": {"fname": "\x00\x1f\x7f\x85\u2028\u2029\"\\/\ud7ff\ue000\U0010ffff\t\r\n\b\f"}})
    @example({"data": [2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**40]})
    def test_the_line_is_what_json_dumps_writes(self, message: dict[str, Any]) -> None:
        """The oracle is the standard library's encoder, which the format was first written with;
        an integer beyond 64 bits, which orjson refuses, takes that path."""
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        assert json_line(message) == (text.translate(JSON_LINE_BREAKS) + "\n").encode("utf-8")


def test_a_data_messages_object_is_named_by_its_key_columns_in_key_order() -> None:
    """What an error about a message (one too large for the broker) names it by."""
    table = TableInfo("line", (
        ColumnInfo("qty", ValueType.INT, False, ordinal=1, sql_type="INTEGER"),
        ColumnInfo("line no", ValueType.INT, True, ordinal=2, sql_type="INTEGER", key_position=2),
        ColumnInfo("order", ValueType.STRING, True, ordinal=3, sql_type="VARCHAR(9)", key_position=1),
    ))
    change = Change("line", INSERT, 7, EVENT_TIME, None, {"qty": "3", "line no": "2", "order": "A-1"}, None,
                    ("qty", "line no", "order"), False)
    message = data_message(StampedChange(change, "1", TransactionPlace(0, 1, 0, 1)), table, LABEL,
                           MessagesConfig(enabled=True), None)

    assert message_key(message, table) == "order=A-1+line no=2"


def test_building_messages_imports_no_spark() -> None:
    code = "import sys, publisher.outputs.messages.build; print(any(m.split('.')[0] == 'pyspark' for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).parents[2])
    assert result.stdout.strip() == "False"
