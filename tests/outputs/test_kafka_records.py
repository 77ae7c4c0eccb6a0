"""The records the Kafka sender builds, without a broker: the Avro value is what fastavro reads
back with the schema its fingerprint names, an integer beyond 64 bits keeps its exact key (JSON)
or is refused naming its record (Avro), and records built beside the lines equal the records
read back from the message file, and kept as columns the garbage collector need not walk."""
from __future__ import annotations

import datetime as dt
import gc
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from test_messages import FULL_ROW, USR

from publisher.config import MessagesConfig
from publisher.outputs.messages.avro import crc64_avro
from publisher.outputs.messages.broker import BrokerError
from publisher.outputs.messages.build import data_message, data_schema, json_line, metadata_message
from publisher.outputs.messages.records import RECORD_OVERHEAD, RecordColumns, TableVersion
from publisher.rules.changes import INSERT, Change, StampedChange, TransactionPlace

OPTIONS = MessagesConfig(enabled=True, broker="kafka://127.0.0.1:9092", trail_header=True)


def messages(*rows: dict[str, str | None]) -> list[dict[str, Any]]:
    built = [metadata_message(USR, 1, "crm", OPTIONS, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))]
    for number, row in enumerate(rows, start=1):
        change = Change("usr", INSERT, 40 + number, None, None, row, None, tuple(row), False)
        stamped = StampedChange(change, f"{'0' * 16}{number:019d}", TransactionPlace(0, 1, 0, 1))
        built.append(data_message(stamped, USR, "crm", OPTIONS, None))
    return built


def message_file(tmp_path: Path, *rows: dict[str, str | None]) -> Path:
    path = tmp_path / "000000000001.jsonl"
    path.write_bytes(b"".join(json_line(message) for message in messages(*rows)))
    return path


def versions(options: MessagesConfig) -> dict[str, TableVersion]:
    return {"usr": TableVersion(USR, "crm.usr.v1-x", data_schema(USR, "crm", options))}


def read(path: Path, options: MessagesConfig, describe=str) -> list[tuple[str, bytes, bytes, list, int]]:
    records = RecordColumns(options, versions(options))
    records.read(path, describe)
    return list(zip(records.topics, records.keys, records.values, records.headers(), records.sizes, strict=True))


def test_an_avro_value_is_what_fastavro_reads_with_the_schema_its_fingerprint_names(tmp_path):
    options = MessagesConfig(**{**OPTIONS.__dict__, "encoding": "avro"})
    row = {**FULL_ROW, "idu": "7", "fname": "Zoë\u2028"}
    path = message_file(tmp_path, row)
    metadata, data = read(path, options)
    lines = path.read_bytes().splitlines()
    schema = fastavro.parse_schema(json.loads(json.loads(lines[0])["dataSchema"]))
    expected = bytes.fromhex(fastavro_fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    assert data[2][:10] == b"\xc3\x01" + expected
    assert metadata[3][1] == ("fingerprint", expected.hex().encode())
    assert fastavro.schemaless_reader(io.BytesIO(data[2][10:]), schema, None) == json.loads(lines[1])
    assert data[1] == b"idu=7"


def test_an_integer_beyond_64_bits_keeps_its_exact_key_in_json_and_is_refused_by_record_in_avro(tmp_path):
    huge = str(10**30 + 1)
    path = message_file(tmp_path, {"idu": huge, "age": huge})
    (_, data) = read(path, OPTIONS)
    assert data[1] == f"idu={huge}".encode()
    assert json.loads(data[2])["data"]["age"] == 10**30 + 1

    avro = MessagesConfig(**{**OPTIONS.__dict__, "encoding": "avro"})
    with pytest.raises(BrokerError, match="^broker kafka://127.0.0.1:9092: record_id 41 cannot be encoded as avro"):
        read(path, avro, lambda m: f"record_id {m['headers']['streamPosition']}")


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_records_built_beside_the_lines_are_the_records_read_back_and_sized_as_sent(tmp_path, encoding):
    options = MessagesConfig(**{**OPTIONS.__dict__, "encoding": encoding})
    rows = {**FULL_ROW, "idu": "7", "fname": "Zoë"}, {"idu": "8", "fname": None}
    path = message_file(tmp_path, *rows)
    built = RecordColumns(options, versions(options))
    for message in messages(*rows):  # as a part builds them: the message before JSON, and its line
        built.add(json_line(message)[:-1], message, str)
    held = read(path, options)
    assert list(zip(built.topics, built.keys, built.values, built.headers(), built.sizes, strict=True)) == held
    for _, key, value, headers, size in held:
        as_bytes = [(name, v.encode() if isinstance(v, str) else v) for name, v in headers]
        assert size == RECORD_OVERHEAD + len(key) + len(value) + sum(len(n) + len(v) for n, v in as_bytes)
    assert [dict(headers)["event-id"] for _, _, _, headers, _ in held[1:]] == ["41", "42"]
    assert [topic for topic, *_ in held] == ["publisher.metadata.crm.usr", "publisher.data.crm.usr",
                                            "publisher.data.crm.usr"]


def test_crc64_avro_gives_the_fingerprint_the_avro_specification_lists():
    """The specification's test data (share/test/data/schema-tests.txt): "null" has the 64-bit
    fingerprint 7195948357588979594."""
    assert crc64_avro(b'"null"') == 7195948357588979594


def test_a_cycles_records_leave_the_garbage_collector_nothing_to_track():
    """Kept until the last is acknowledged, a record's columns hold strings and numbers only: a
    list of header tuples per record would lengthen every collection of the cycle's writing."""
    rows = [{**FULL_ROW, "idu": str(number)} for number in range(2_000)]
    built = messages(*rows)
    lines = [json_line(message)[:-1] for message in built]
    records = RecordColumns(OPTIONS, versions(OPTIONS))
    records.add(lines[0], built[0], str)
    gc.collect()
    tracked = len(gc.get_objects())
    for line, message in zip(lines[1:], built[1:], strict=True):
        records.add(line, message, str)
    gc.collect()
    assert len(gc.get_objects()) - tracked < 20, "a tracked object per record"
    headers = list(records.headers())
    assert headers[0][0] == ("schemaId", built[0]["schemaId"].encode())
    assert [dict(h)["event-id"] for h in headers[1:]] == [m["headers"]["streamPosition"] for m in built[1:]]
