"""A metadata message per table version, a data message per change.

Messages are plain JSON-ready dicts built from `Change` records, with no Spark import, so the
driver and the executors build them alike. Each table version's data messages are described by
an Avro schema (the metadata message's dataSchema) that a consumer can validate them with.
"""
from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from publisher.config import MessagesConfig
from publisher.errors import OutputStateError
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import TYPED, ValueType
from publisher.outputs.durable import JSON_LINE_BREAKS, write_atomically
from publisher.rules.changes import (
    DELETE,
    UPDATE,
    StampedChange,
    as_utc,
    column_mask,
    record_length,
    trans_ind,
    transaction_hex,
)

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_AVRO = re.compile(r"[^A-Za-z0-9_]")
_AVRO_TYPES = {
    ValueType.INT: "long",
    ValueType.STATE: "boolean",
    ValueType.TIME: "string",
    ValueType.OCTET: "string",
    ValueType.STRING: "string",
}
_TYPE_DOCS = {
    ValueType.TIME: "ISO 8601 date-time in UTC",
    ValueType.OCTET: "the bytes in base64",
}
_NULLABLE_STRING = ["null", "string"]
_VERSIONS_FORMAT = 1


def avro_name(column: str) -> str:
    """A name Avro accepts: the name itself when valid, else invalid characters as "_" and a
    leading digit prefixed with "_". Distinct names may meet; `field_names` keeps them apart."""
    if _AVRO_NAME.fullmatch(column):
        return column
    name = _NOT_AVRO.sub("_", column) or "_"
    return f"_{name}" if name[0].isdigit() else name


@functools.lru_cache(maxsize=1024)
def _fields(table: TableInfo) -> tuple[tuple[ColumnInfo, str], ...]:
    """Valid names are kept, so a renamed column never takes the name of one that needs none;
    renamed ones that meet get _2, _3... in table order."""
    taken = {c.name for c in table.data_columns if _AVRO_NAME.fullmatch(c.name)}
    fields = []
    for column in table.data_columns:
        if _AVRO_NAME.fullmatch(column.name):
            fields.append((column, column.name))
            continue
        base = candidate = avro_name(column.name)
        suffix = 2
        while candidate in taken:
            candidate = f"{base}_{suffix}"
            suffix += 1
        taken.add(candidate)
        fields.append((column, candidate))
    return tuple(fields)


def field_names(table: TableInfo) -> dict[str, str]:
    """Each data column's Avro field name (the key of `data` and `beforeData`), in table order."""
    return {column.name: field for column, field in _fields(table)}


def _namespace(schema_label: str, table: TableInfo) -> str:
    return f"{avro_name(schema_label)}.{avro_name(table.name)}"


def data_schema(table: TableInfo, schema_label: str, options: MessagesConfig) -> dict[str, Any]:
    """The Avro schema of the table's data messages, exactly as `data_message` lays them out."""
    namespace = _namespace(schema_label, table)
    headers: list[dict[str, Any]] = [
        {"name": "operation", "type": "string", "doc": "INSERT, UPDATE or DELETE"},
        {"name": "changeSequence", "type": "string"},
        {"name": "timestamp", "type": _NULLABLE_STRING, "doc": "ISO 8601 date-time in UTC of the change"},
        {"name": "streamPosition", "type": "string"},
        {"name": "transactionId", "type": _NULLABLE_STRING},
        {"name": "changeMask", "type": "string", "doc": "hex, little-endian: the columns the change changed"},
        {"name": "columnMask", "type": "string", "doc": "hex, little-endian: the columns the message carries"},
    ]
    if options.external_schema_id:
        headers.append({"name": "externalSchemaId", "type": "string"})
    headers += [
        {"name": "transactionEventCounter", "type": "long"},
        {"name": "transactionLastEvent", "type": "boolean"},
    ]
    columns = []
    for column, field in _fields(table):
        entry: dict[str, Any] = {"name": field, "type": ["null", _AVRO_TYPES[column.value_type]], "default": None}
        docs = [f"column {column.name}"] if field != column.name else []
        if column.value_type in _TYPE_DOCS:
            docs.append(_TYPE_DOCS[column.value_type])
        if docs:
            entry["doc"] = "; ".join(docs)
        columns.append(entry)
    fields: list[dict[str, Any]] = [
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "headers", "type": {"type": "record", "name": "Headers", "fields": headers}},
        {"name": "data", "type": {"type": "record", "name": "Data", "fields": columns}},
        {"name": "beforeData", "type": ["null", f"{namespace}.Data"], "default": None},
    ]
    if options.trail_header:
        fields.append({"name": "trailHeader", "type": {"type": "record", "name": "TrailHeader", "fields": [
            {"name": "HdrInd", "type": "string"},
            {"name": "IOType", "type": "string"},
            {"name": "TransInd", "type": "int"},
            {"name": "BeforeAfter", "type": "string"},
            {"name": "IOTime", "type": _NULLABLE_STRING},
            {"name": "FormatType", "type": "string"},
            {"name": "AuditPos", "type": "long"},
            {"name": "RecLength", "type": "int"},
        ]}})
    return {"type": "record", "name": "DataMessage", "namespace": namespace, "fields": fields}


def schema_id(table: TableInfo, version: int, schema_label: str, options: MessagesConfig) -> str:
    """Names the table version and fingerprints its data schema, so a consumer sees a new id
    whenever the layout of the data messages changes."""
    canonical = json.dumps(
        data_schema(table, schema_label, options), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return f"{schema_label}.{table.name}.v{version}-{hashlib.sha256(canonical.encode('ascii')).hexdigest()[:12]}"


def metadata_message(
    table: TableInfo, version: int, schema_label: str, options: MessagesConfig, now: dt.datetime
) -> dict[str, Any]:
    """What a consumer needs before the table version's data messages: columns and data schema."""
    return {
        "schemaId": schema_id(table, version, schema_label, options),
        "lineage": {
            "server": options.server or socket.gethostname(),
            "task": options.task,
            "schema": schema_label,
            "table": table.name,
            "tableVersion": version,
            "timestamp": _iso(now),
        },
        "tableStructure": {
            "tableColumns": {
                column.name: {
                    "ordinal": column.ordinal,
                    "type": column.sql_type,
                    "length": column.length,
                    "precision": column.precision,
                    "scale": column.scale,
                    "primaryKeyPosition": column.key_position,
                    "field": field,
                }
                for column, field in _fields(table)
            }
        },
        "dataSchema": json.dumps(data_schema(table, schema_label, options), ensure_ascii=False, separators=(",", ":")),
    }


def data_message(
    stamped: StampedChange, table: TableInfo, schema_label: str, options: MessagesConfig, schema_id: str | None
) -> dict[str, Any]:
    """One change as a data message of the table version `schema_id` names."""
    change, place = stamped.change, stamped.place
    if change.table != table.name:
        raise ValueError(f"change of table {change.table!r} given with table {table.name!r}")
    if options.external_schema_id and schema_id is None:
        raise ValueError("external_schema_id is on: a data message needs its table version's schema id")
    before = change.before if change.operation == UPDATE else None
    carried = set(change.after) | set(before or ())
    timestamp = None if change.event_time is None else _event_iso(change.event_time)
    headers: dict[str, Any] = {
        "operation": change.operation,
        "changeSequence": stamped.change_seq,
        "timestamp": timestamp,
        "streamPosition": str(change.record_id),
        "transactionId": transaction_hex(change.transaction_id),
        "changeMask": column_mask(table, change.changed).hex().upper(),
        "columnMask": column_mask(table, carried).hex().upper(),
    }
    if options.external_schema_id:
        headers["externalSchemaId"] = schema_id
    headers["transactionEventCounter"] = place.index + 1
    headers["transactionLastEvent"] = place.index == place.total - 1
    message: dict[str, Any] = {
        "schema": schema_label,
        "table": table.name,
        "headers": headers,
        "data": _record(table, change.after),
        "beforeData": None if before is None else _record(table, before),
    }
    if options.trail_header:
        message["trailHeader"] = {
            "HdrInd": "E",
            "IOType": change.operation,
            "TransInd": trans_ind(place.index, place.total),
            "BeforeAfter": "B" if change.operation == DELETE else "A",
            "IOTime": timestamp,
            "FormatType": "F" if change.fetched else "R",
            "AuditPos": change.record_id,
            "RecLength": record_length(change.after),
        }
    return message


def message_key(message: Mapping[str, Any], table: TableInfo) -> str:
    """The object a data message of `table` stands for, as `column=value` of its key columns in
    key order, joined by `+` (values as the message carries them)."""
    fields = field_names(table)
    keys = sorted((c for c in table.data_columns if c.key_position), key=lambda c: c.key_position)
    return "+".join(f"{c.name}={message['data'].get(fields[c.name])}" for c in keys)


def _record(table: TableInfo, values: Mapping[str, str | None]) -> dict[str, Any]:
    return {field: None if (text := values.get(name)) is None else (text if convert is None else convert(text))
            for name, field, convert in _json_converters(table)}


@functools.lru_cache(maxsize=1024)
def _json_converters(table: TableInfo) -> tuple[tuple[str, str, Callable[[str], Any] | None], ...]:
    """Per data column: its name, its field and how its published text becomes the JSON value
    (None: the text itself)."""
    return tuple((column.name, field, _JSON_OF.get(column.value_type)) for column, field in _fields(table))


def _json_time(text: str) -> str:
    time = TYPED[ValueType.TIME](text)
    assert isinstance(time, dt.datetime)
    return _iso(time)


def _json_octets(text: str) -> str:
    octets = TYPED[ValueType.OCTET](text)
    assert isinstance(octets, bytes)
    return base64.b64encode(octets).decode("ascii")


_JSON_OF: dict[ValueType, Callable[[str], Any]] = {
    ValueType.INT: TYPED[ValueType.INT],
    ValueType.STATE: TYPED[ValueType.STATE],
    ValueType.TIME: _json_time,
    ValueType.OCTET: _json_octets,
}
"""A published text as its JSON value: the typed value (`values.TYPED`), a date-time as ISO 8601
and bytes as base64; a string is its text."""


def _iso(time: dt.datetime) -> str:
    utc = as_utc(time)
    assert utc is not None
    return utc.isoformat().replace("+00:00", "Z")


_event_iso = functools.lru_cache(maxsize=1024)(_iso)
"""`_iso` of the changes' times, which a transaction's events mostly share; an equal instant in
another zone gives the same text."""


def json_line(message: Mapping[str, Any]) -> bytes:
    """One message as a line of compact UTF-8 JSON; line breaks that JSON leaves raw are escaped
    so that no line reader splits a message. orjson writes the bytes `json.dumps` would (a
    property in the tests holds them equal) in a twentieth of its time; what it refuses (an
    integer beyond 64 bits) goes through `json`."""
    try:
        raw = orjson.dumps(message)
    except orjson.JSONEncodeError:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return (text.translate(JSON_LINE_BREAKS) + "\n").encode("utf-8")
    if b"\xe2\x80" in raw or b"\xc2\x85" in raw:
        raw = _RAW_LINE_BREAKS.sub(lambda found: _ESCAPED[found.group()], raw)
    return raw + b"\n"


_ESCAPED = {chr(code).encode("utf-8"): escape.encode("ascii") for code, escape in JSON_LINE_BREAKS.items()}
_RAW_LINE_BREAKS = re.compile(b"|".join(re.escape(raw) for raw in _ESCAPED))


def table_signature(table: TableInfo) -> str:
    """A fingerprint of the table structure the metadata message states; a new one is a new
    table version."""
    structure = [
        [c.name, c.ordinal, c.sql_type, c.length, c.precision, c.scale, c.key_position, c.value_type.value]
        for c in table.data_columns
    ]
    canonical = json.dumps(structure, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


class TableVersionsError(OutputStateError):
    """The table versions file cannot be read; publishing on would restart or reuse versions."""


class TableVersions:
    """Each table's structure version, kept in a JSON file across runs so that a version number
    names one structure for good."""

    def __init__(self, path: Path, tables: Mapping[str, tuple[int, str]] | None = None) -> None:
        self.path = path
        self._tables: dict[str, tuple[int, str]] = dict(tables or {})

    @classmethod
    def load(cls, path: Path) -> TableVersions:
        """The versions `path` records; none when the file does not exist yet."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _corrupt(path, f"not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            raise _corrupt(path, 'expected an object with a "tables" object')
        if data.get("format") != _VERSIONS_FORMAT:
            raise _corrupt(path, f"format {data.get('format')!r}, expected {_VERSIONS_FORMAT}")
        tables: dict[str, tuple[int, str]] = {}
        for name, entry in data["tables"].items():
            version = entry.get("version") if isinstance(entry, dict) else None
            signature = entry.get("signature") if isinstance(entry, dict) else None
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise _corrupt(path, f"table {name!r}: expected a version of 1 or more, got {version!r}")
            if not isinstance(signature, str):
                raise _corrupt(path, f"table {name!r}: expected a signature string, got {signature!r}")
            tables[name] = (version, signature)
        return cls(path, tables)

    def advance(self, tables: Iterable[TableInfo], layout: str = "") -> list[tuple[TableInfo, int]]:
        """Record the tables' structures; the tables first seen (version 1) or changed since
        (version + 1), with their new version, which need a metadata message. `layout` names
        what else shapes the data messages (their options), so changing it is a new version too."""
        advanced = []
        for table in tables:
            signature = table_signature(table) if not layout else f"{table_signature(table)}/{layout}"
            version, known = self._tables.get(table.name, (0, None))
            if known == signature:
                continue
            self._tables[table.name] = (version + 1, signature)
            advanced.append((table, version + 1))
        return advanced

    def version_of(self, name: str) -> int:
        """The table's current version; KeyError for a table never advanced."""
        try:
            return self._tables[name][0]
        except KeyError:
            raise KeyError(f"table {name!r} has no version yet (advance it first)") from None

    def save(self) -> None:
        data = {
            "format": _VERSIONS_FORMAT,
            "tables": {
                name: {"version": version, "signature": signature}
                for name, (version, signature) in sorted(self._tables.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))


def _corrupt(path: Path, reason: str) -> TableVersionsError:
    return TableVersionsError(
        f"table versions file {path} is unreadable ({reason}); restore it, or delete it to start every "
        "table again at version 1"
    )
