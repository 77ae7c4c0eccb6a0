"""The Avro encoder compiled per schema writes exactly fastavro's bytes: for schemas of every kind
it covers (and others, which it leaves to fastavro), for values of the exact types (which it must
write itself) and for any other values (which it may leave to fastavro, whose bytes or error
then stand), and for the data messages the project builds, as built and as read back."""
from __future__ import annotations

import base64
import collections
import datetime as dt
import io
import json
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hunting import budget, property_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st

from publisher.config import MessagesConfig
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.values import COLUMN_VALUE_TYPES, ValueType
from publisher.outputs.messages.avro import SingleObjectEncoder
from publisher.outputs.messages.avro_binary import compile_writer
from publisher.outputs.messages.build import data_message, data_schema, json_line
from publisher.rules.changes import DELETE, INSERT, UPDATE, Change, StampedChange, TransactionPlace

INT = 1 << 31
LONG = 1 << 63


class Text(str):
    """A str of another type: fastavro writes it as a string, the compiled writer leaves it."""


def fastavro_outcome(schema: dict[str, Any], message: Any) -> tuple[str, Any]:
    """What the encoder gave before it was compiled: the single-object marker, fastavro's own
    fingerprint and fastavro's encoding of a copy of the message; or fastavro's error."""
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    prefix = b"\xc3\x01" + bytes.fromhex(fastavro_fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
    out = io.BytesIO()
    try:
        fastavro.schemaless_writer(out, parsed, dict(message))
    except Exception as exc:
        return "error", (type(exc), str(exc))
    return "bytes", prefix + out.getvalue()


def outcome(encode: Any, message: Any) -> tuple[str, Any]:
    try:
        return "bytes", encode(message)
    except Exception as exc:
        return "error", (type(exc), str(exc))


def compiled(schema: dict[str, Any]) -> Any:
    named: dict[str, Any] = {}
    return compile_writer(fastavro.parse_schema(json.loads(json.dumps(schema)), named), named, b"")


NOISE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-LONG - 2, -LONG + 2) | st.integers(LONG - 2, LONG + 2),
    st.floats(), st.text(st.characters(codec=None, categories=["Cs", "Lu"]), max_size=3), st.binary(max_size=3),
    st.builds(Text, st.text(max_size=3)), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(collections.OrderedDict()),
)
"""Values of no particular type: out of range, of subclasses, with lone surrogates."""

PRIMITIVE_VALUES = {
    "null": st.none(), "boolean": st.booleans(), "int": st.integers(-INT, INT - 1),
    "long": st.integers(-LONG, LONG - 1) | st.integers(-1100, 1100), "double": st.floats(),
    "string": st.text() | st.text(min_size=1000, max_size=1100), "bytes": st.binary() | st.binary(min_size=1020),
}
"""Values of the exact types each covered type takes, with lengths and numbers about the sizes
the writer looks up rather than computes."""
UNCOVERED = [
    ("float", st.floats(width=32)), ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, st.sampled_from("AB")),
    ({"type": "array", "items": "long"}, st.lists(st.integers(0, 9))),
    ({"type": "map", "values": "string"}, st.dictionaries(st.text(), st.text())),
    (["null", "string", "long"], st.none() | st.text() | st.integers(0, 9)),
    ({"type": "long", "logicalType": "timestamp-millis"}, st.integers(0, 1 << 40)),
    ({"type": "fixed", "name": "F", "size": 2}, st.binary(min_size=2, max_size=2)),
]


@st.composite
def types(draw: Any, names: list[str], defined: list[tuple[str, Any]], depth: int, dirty: bool) -> tuple:
    """(schema, values, covered) of one field's type; records get names from `names`."""
    kind = draw(st.sampled_from(["primitive", "union", "record", "reference", "uncovered"] if depth < 2 else
                                ["primitive", "union", "reference", "uncovered"]))
    if kind == "uncovered":
        schema, values = draw(st.sampled_from(UNCOVERED))
        if isinstance(schema, dict) and "name" in schema:
            schema = {**schema, "name": names.pop()}
        return schema, values, False
    if kind == "record":
        return draw(records(names, defined, depth + 1, dirty))
    if kind == "reference" and defined:
        name, values = draw(st.sampled_from(defined))
        schema, covered = name, True
    else:
        primitive = draw(st.sampled_from(sorted(PRIMITIVE_VALUES)))
        schema, covered = draw(st.sampled_from([primitive, {"type": primitive}])), True
        values = PRIMITIVE_VALUES[primitive]
    if kind != "primitive" and values is not PRIMITIVE_VALUES["null"]:
        branches = [schema, "null"]
        return (draw(st.sampled_from([branches, branches[::-1]])), st.none() | values, covered)
    return schema, values, covered


@st.composite
def records(draw: Any, names: list[str], defined: list[tuple[str, Any]], depth: int, dirty: bool) -> tuple:
    name = names.pop()
    fields, values, covered = [], {}, True
    for number in range(draw(st.integers(0, 5))):
        schema, value, field_covered = draw(types(names, defined, depth, dirty))
        field: dict[str, Any] = {"name": f"f{number}", "type": schema}
        if isinstance(schema, list) and schema[0] == "null" and draw(st.booleans()):
            field["default"] = None
        fields.append(field)
        values[field["name"]] = (value | NOISE) if dirty else value
        covered = covered and field_covered
    record = st.fixed_dictionaries(values)
    if dirty:
        record = record.flatmap(lambda d: st.sampled_from([d, dict(list(d.items())[1:]), {**d, "extra": 1}]))
    defined.append((draw(st.sampled_from([name, f"ns.{name}"])), record))
    return {"type": "record", "name": name, "fields": fields}, record, covered


@st.composite
def cases(draw: Any) -> tuple[dict[str, Any], Any, bool, bool]:
    dirty = draw(st.booleans())
    schema, values, covered = draw(records([f"R{n}" for n in range(40)], [], 0, dirty))
    message = draw(values)
    return {**schema, "namespace": "ns"}, message if isinstance(message, dict) else {}, covered, dirty


@settings(**property_settings(budget(300)))
@given(cases())
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [{"name": "f0", "type": "long"}]},
          {"f0": True}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [{"name": "f0", "type": "int"}]},
          {"f0": INT}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [{"name": "f0", "type": ["long", "null"]}]},
          {"f0": LONG}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [{"name": "f0", "type": ["null", "int"]}]},
          {"f0": INT}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [
    {"name": "f0", "type": ["null", {"type": "record", "name": "S", "fields": []}]}]},
    {"f0": {"-type": "x"}}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [{"name": "f0", "type": "double"}]},
          {"f0": 3}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [
    {"name": "f0", "type": ["null", "string"], "default": None}]}, {}, True, True))
@example(({"type": "record", "name": "R", "namespace": "ns", "fields": [{"name": "f0", "type": "string"}]},
          {"f0": "\ud800"}, True, True))
def test_the_compiled_writer_writes_fastavros_bytes_or_leaves_the_value_to_fastavro(case):
    schema, message, covered, dirty = case
    expected = fastavro_outcome(schema, message)
    assert outcome(SingleObjectEncoder(schema).encode, message) == expected

    writer = compiled(schema)
    assert (writer is not None) == covered, "covered schemas are compiled, the others are not"
    if writer is None:
        return
    if not dirty:
        assert expected[0] == "bytes", "values of the exact types are valid"
        assert b"\xc3\x01" + expected[1][2:10] + writer(message) == expected[1], "and the compiled writer writes them"
    else:
        result = outcome(writer, message)
        assert result[0] == "error" or b"\xc3\x01" + expected[1][2:10] + result[1] == expected[1]


def test_a_recursive_record_is_left_to_fastavro():
    schema = {"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]}
    assert compiled(schema) is None
    message = {"value": 1, "next": {"value": -2, "next": None}}
    assert outcome(SingleObjectEncoder(schema).encode, message) == fastavro_outcome(schema, message)


def test_a_value_fastavro_refuses_is_refused_with_fastavros_error():
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": ["null", "long"]}]}
    kind, (error, text) = outcome(SingleObjectEncoder(schema).encode, {"n": 10**30})
    assert kind == "error" and (error, text) == fastavro_outcome(schema, {"n": 10**30})[1]
    assert issubclass(error, ValueError)


NAMES = st.sampled_from(["idu", "fname", "first name", "1st", "prix-€", "x", "x_2", "_x"])
TEXTS = {
    ValueType.INT: st.integers(-LONG, LONG - 1).map(str),
    ValueType.STATE: st.sampled_from(["true", "false"]),
    ValueType.TIME: st.integers(-(1 << 31), 1 << 34).map(str),
    ValueType.OCTET: st.binary().map(lambda octets: base64.b64encode(octets).decode("ascii")),
    ValueType.STRING: st.text(),
}


@st.composite
def project_messages(draw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A data schema and a data message as the publisher builds them, for a table of drawn columns."""
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    kinds = [draw(st.sampled_from(COLUMN_VALUE_TYPES)) for _ in names]
    columns = tuple(ColumnInfo(name, kind, number == 0, ordinal=number + 1, key_position=int(number == 0))
                    for number, (name, kind) in enumerate(zip(names, kinds)))
    table = TableInfo("t-1", columns)
    options = MessagesConfig(enabled=True, trail_header=draw(st.booleans()), external_schema_id=draw(st.booleans()))

    def row() -> dict[str, str | None]:
        carried = draw(st.lists(st.sampled_from(names), unique=True))
        return {name: draw(st.none() | TEXTS[kinds[names.index(name)]]) for name in carried}

    operation = draw(st.sampled_from([INSERT, UPDATE, DELETE]))
    change = Change(table.name, operation, draw(st.integers(0, LONG - 1)),
                    draw(st.none() | st.datetimes(timezones=st.just(dt.UTC))), draw(st.none() | st.text(max_size=4)),
                    row(), row() if operation == UPDATE else None, tuple(draw(st.lists(st.sampled_from(names)))),
                    draw(st.booleans()))
    total = draw(st.integers(1, 5))
    index = draw(st.integers(0, total - 1))
    stamped = StampedChange(change, "0" * 35, TransactionPlace(index, total, index, total))
    return data_schema(table, "crm", options), data_message(stamped, table, "crm", options, "crm.t-1.v1-x")


@settings(**property_settings(budget(200)))
@given(project_messages())
def test_the_projects_data_messages_take_the_compiled_writer_and_get_fastavros_bytes(case):
    schema, message = case
    encoder = SingleObjectEncoder(schema)
    writer = compiled(schema)
    assert writer is not None
    for each in (message, json.loads(json_line(message))):
        expected = fastavro_outcome(schema, each)
        assert outcome(encoder.encode, each) == expected
        assert expected[0] == "bytes"
        assert b"\xc3\x01" + expected[1][2:10] + writer(each) == expected[1]


@pytest.mark.parametrize("value", [-(LONG), LONG - 1, -1025, -1024, 1023, 1024, 0, -1])
def test_longs_at_the_ends_of_the_range_and_of_the_looked_up_varints(value):
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "bytes"}]}
    message = {"n": value, "s": b"x" * (value % 2000 if abs(value) < 2000 else 7)}
    assert compiled(schema)(message) == fastavro_outcome(schema, message)[1][10:]
