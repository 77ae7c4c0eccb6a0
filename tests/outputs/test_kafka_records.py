"""The records the Kafka sender builds from a cycle's message file, without a broker: the Avro
value is what fastavro reads back with the schema its fingerprint names, and an integer beyond
64 bits keeps its exact key (JSON) or is refused naming its record (Avro)."""
from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import fastavro
import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from test_messages import FULL_ROW, USR

from publisher.config import MessagesConfig
from publisher.outputs.messages.avro import crc64_avro
from publisher.outputs.messages.broker import BrokerError
from publisher.outputs.messages.build import data_message, data_schema, json_line, metadata_message
from publisher.outputs.messages.kafka import TableVersion, _Encoders, _records
from publisher.rules.changes import INSERT, Change, StampedChange, TransactionPlace

OPTIONS = MessagesConfig(enabled=True, broker="kafka://127.0.0.1:9092", trail_header=True)


def message_file(tmp_path: Path, *rows: dict[str, str | None]) -> Path:
    lines = [json_line(metadata_message(USR, 1, "crm", OPTIONS, dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))]
    for number, row in enumerate(rows, start=1):
        change = Change("usr", INSERT, 40 + number, None, None, row, None, tuple(row), False)
        stamped = StampedChange(change, f"{'0' * 16}{number:019d}", TransactionPlace(0, 1, 0, 1))
        lines.append(json_line(data_message(stamped, USR, "crm", OPTIONS, None)))
    path = tmp_path / "000000000001.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def versions(options: MessagesConfig) -> dict[str, TableVersion]:
    return {"usr": TableVersion(USR, "crm.usr.v1-x", data_schema(USR, "crm", options))}


def test_an_avro_value_is_what_fastavro_reads_with_the_schema_its_fingerprint_names(tmp_path):
    options = MessagesConfig(**{**OPTIONS.__dict__, "encoding": "avro"})
    row = {**FULL_ROW, "idu": "7", "fname": "Zoë\u2028"}
    path = message_file(tmp_path, row)
    metadata, data = _records(path, _Encoders(options, versions(options)), str)
    lines = path.read_bytes().splitlines()
    schema = fastavro.parse_schema(json.loads(json.loads(lines[0])["dataSchema"]))
    expected = bytes.fromhex(fastavro_fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    assert data.value[:10] == b"\xc3\x01" + expected
    assert metadata.headers[1] == ("fingerprint", expected.hex().encode())
    assert fastavro.schemaless_reader(io.BytesIO(data.value[10:]), schema, None) == json.loads(lines[1])
    assert data.key == b"idu=7"


def test_an_integer_beyond_64_bits_keeps_its_exact_key_in_json_and_is_refused_by_record_in_avro(tmp_path):
    huge = str(10**30 + 1)
    path = message_file(tmp_path, {"idu": huge, "age": huge})
    (_, data) = _records(path, _Encoders(OPTIONS, versions(OPTIONS)), str)
    assert data.key == f"idu={huge}".encode()
    assert json.loads(data.value)["data"]["age"] == 10**30 + 1

    avro = MessagesConfig(**{**OPTIONS.__dict__, "encoding": "avro"})
    with pytest.raises(BrokerError, match="record_id 41.* cannot be encoded as avro"):
        list(_records(path, _Encoders(avro, versions(avro)), lambda m: f"record_id {m['headers']['streamPosition']}"))


def test_crc64_avro_gives_the_fingerprint_the_avro_specification_lists():
    """The specification's test data (share/test/data/schema-tests.txt): "null" has the 64-bit
    fingerprint 7195948357588979594."""
    assert crc64_avro(b'"null"') == 7195948357588979594
