"""Avro data messages on a real Kafka-protocol broker (Tansu), read back as a consumer would:
each record's schema found among the metadata messages by the fingerprint it carries, decoded by
fastavro, and folded into rows that equal the table's after inserts, updates, deletes and a
migration; and a publisher killed between sending and acknowledging sends the same records again."""
from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from tansu import Read, Tansu, read_prefix
from test_crash import crash_at, poll_until_drained, prepare, statuses

from publisher.cli import main

pytestmark = pytest.mark.database


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory):
    broker = Tansu(tmp_path_factory.mktemp("tansu") / "tansu.log").start()
    yield broker
    broker.stop()


def site(db: Any, directory: Path, broker: Tansu, path: str = "driver") -> tuple[Path, str]:
    """A configuration of `test_crash.prepare` (usr with triggers, a workload logged) sending
    Avro to the broker, under a topic prefix of its own."""
    config = prepare(db, directory, path)
    prefix = f"t{uuid.uuid4().hex[:10]}"
    with open(config, "a", encoding="utf-8") as out:
        out.write(f'broker = "{broker.url}"\nbroker_subject = "{prefix}"\nencoding = "avro"\n')
    return config, prefix


def schemas_by_fingerprint(metadata: list[Read]) -> dict[bytes, tuple[dict[str, Any], Read]]:
    """Each metadata message's data schema (parsed by fastavro), by its fingerprint as fastavro
    computes it."""
    found = {}
    for record in metadata:
        message = json.loads(record.value)
        parsed = fastavro.parse_schema(json.loads(message["dataSchema"]))
        digest = bytes.fromhex(fastavro_fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
        found[digest] = (parsed, record)
    return found


def decoded(held: dict[str, list[Read]], table: str = "usr") -> list[tuple[Read, dict[str, Any], Read]]:
    """(record, message, metadata record of its schema) per Avro data record, in offset order."""
    (data_topic,) = [t for t in held if ".data." in t and t.endswith("." + table)]
    (metadata_topic,) = [t for t in held if ".metadata." in t and t.endswith("." + table)]
    schemas = schemas_by_fingerprint(held[metadata_topic])
    out = []
    for record in held[data_topic]:
        assert record.value[:2] == b"\xc3\x01", "Avro single-object marker"
        parsed, metadata = schemas[record.value[2:10]]
        out.append((record, fastavro.schemaless_reader(io.BytesIO(record.value[10:]), parsed, None), metadata))
    return out


def fold(messages: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The rows a consumer keeps from the data messages: an insert (or a snapshot's row) sets
    the columns it carries, an update changes them, a delete removes the row."""
    rows: dict[int, dict[str, Any]] = {}
    for message in messages:
        data, before, headers = message["data"], message["beforeData"], message["headers"]
        fields = list(data)
        mask = int.from_bytes(bytes.fromhex(headers["columnMask"]), "little")
        carried = {name: data[name] for i, name in enumerate(fields) if mask >> i & 1}
        if headers["operation"] == "DELETE":
            rows.pop(data["idu"], None)
        elif headers["operation"] == "UPDATE":
            old = rows.pop(before["idu"] if before and before.get("idu") is not None else data["idu"], {})
            rows[data["idu"]] = {**old, **carried}
        else:
            rows[data["idu"]] = {name: carried.get(name) for name in fields}
    return rows


def table_rows(db: Any, columns: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    return {int(row[0]): dict(zip(columns[1:], row[1:])) for row in
            db.rows(f"SELECT {', '.join(columns)} FROM {db.qualified('usr')} ORDER BY idu")}


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_avro_data_messages_decode_by_fingerprint_to_the_tables_rows_across_a_migration(
    spark, sqlite_database, tmp_path, tansu, path
):
    db = sqlite_database
    config, prefix = site(db, tmp_path / "site", tansu, path)
    poll_until_drained(db, config)
    held = read_prefix(tansu.servers, prefix)
    assert fold([m for _, m, _ in decoded(held)]) == {
        idu: {"idu": idu, **row} for idu, row in table_rows(db, ("idu", "fname", "lname")).items()}

    usr = db.qualified("usr")
    assert main(["migrate", "-c", str(config), "-e", f"ALTER TABLE {usr} ADD COLUMN nick VARCHAR(16)"]) == 0
    db.execute(f"UPDATE {usr} SET nick = 'Annie' WHERE idu = 1", f"DELETE FROM {usr} WHERE idu = 5",
               f"INSERT INTO {usr} (idu, fname, nick) VALUES (8, 'Gus', 'G')")
    poll_until_drained(db, config)

    held = read_prefix(tansu.servers, prefix)
    records = decoded(held)
    expected = table_rows(db, ("idu", "fname", "lname", "nick"))
    assert {5, 8} - set(expected) == {5} and expected[1]["nick"] == "Annie"
    assert fold([m for _, m, _ in records]) == {idu: {"idu": idu, **row} for idu, row in expected.items()}

    versions = [json.loads(r.value)["lineage"]["tableVersion"] for r in held[f"{prefix}.metadata.main.usr"]]
    assert versions == [1, 2]
    lines = [json.loads(line) for p in sorted((tmp_path / "site" / "out" / "messages").glob("*.jsonl"))
             for line in p.read_text(encoding="utf-8").splitlines()]
    assert [m for _, m, _ in records] == [m for m in lines if "headers" in m], "the Avro says what the JSON says"
    first_of_v2 = min(r.timestamp for r, _, meta in records if json.loads(meta.value)["lineage"]["tableVersion"] == 2)
    (v2,) = [r for r in held[f"{prefix}.metadata.main.usr"] if json.loads(r.value)["lineage"]["tableVersion"] == 2]
    assert v2.timestamp <= first_of_v2, "the new version's metadata message first"
    for record, message, metadata in records:
        assert record.headers["schemaId"] == json.loads(metadata.value)["schemaId"].encode(), "schemaId ties to it"
        assert metadata.headers["fingerprint"] == record.value[2:10].hex().encode()
        assert record.key == f"idu={message['data']['idu']}".encode()
        assert record.headers["event-id"] == message["headers"]["streamPosition"].encode()
        assert record.headers["operation"] == message["headers"]["operation"].encode()


@pytest.mark.process
@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_kill_between_sending_and_acknowledging_sends_the_same_records_again(
    spark, sqlite_database, tmp_path, tansu, path
):
    db = sqlite_database
    config, prefix = site(db, tmp_path / "site", tansu, path)
    crash_at("before_acknowledge", config, tmp_path / "markers")
    assert set(statuses(db).values()) == {"N"}, "nothing acknowledged"
    sent = decoded(read_prefix(tansu.servers, prefix))
    assert sent

    poll_until_drained(db, config)
    held = read_prefix(tansu.servers, prefix)
    records = decoded(held)
    assert len(held[f"{prefix}.metadata.main.usr"]) == 1
    assert len(records) == 2 * len(sent), "the repeat sends the cycle's records once more"
    for (first, message, _), (again, repeated, _) in zip(sent, records[len(sent):], strict=True):
        assert (again.topic, again.partition, again.key) == (first.topic, first.partition, first.key)
        assert {k: v for k, v in again.headers.items() if k != "changeSequence"} == {
            k: v for k, v in first.headers.items() if k != "changeSequence"}
        assert again.headers["changeSequence"] > first.headers["changeSequence"], "change numbers are never reused"
        assert {**repeated, "headers": {**repeated["headers"], "changeSequence": None}} == {
            **message, "headers": {**message["headers"], "changeSequence": None}}
