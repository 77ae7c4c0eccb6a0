"""Avro single-object encoding of data messages (Avro specification, "Single-object encoding"):
the marker bytes C3 01, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer's schema
in Parsing Canonical Form, then the Avro binary encoding of the message.

The schema is the table version's `dataSchema`, which the metadata message carries; a consumer
finds it by fingerprint among the metadata messages it has read. The message dict is the one
the JSON line holds (dates as ISO 8601 text, bytes as base64), which is what `dataSchema`
describes, so the Avro and the JSON of one change say the same.
"""
from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Mapping
from typing import Any

from fastavro import parse_schema, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from publisher.outputs.messages.avro_binary import compile_writer

MARKER = b"\xc3\x01"
_EMPTY = 0xC15D213AA4D7A795
"""CRC-64-AVRO's initial value (the fingerprint of no bytes)."""


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ (_EMPTY & -(value & 1))
        table.append(value)
    return tuple(table)


_TABLE = _crc_table()


def crc64_avro(data: bytes) -> int:
    """The Rabin fingerprint the Avro specification gives as CRC-64-AVRO."""
    value = _EMPTY
    for byte in data:
        value = (value >> 8) ^ _TABLE[(value ^ byte) & 0xFF]
    return value


def fingerprint(schema: Mapping[str, Any] | str) -> bytes:
    """The 8 bytes, little-endian, of the CRC-64-AVRO of the schema's Parsing Canonical Form
    (a schema given as JSON text is parsed first)."""
    parsed = json.loads(schema) if isinstance(schema, str) else dict(schema)
    canonical = to_parsing_canonical_form(parse_schema(parsed))
    return crc64_avro(canonical.encode("utf-8")).to_bytes(8, "little")


@functools.lru_cache(maxsize=256)
def _compiled(schema: str, prefix: bytes) -> Callable[[Any], bytes] | None:
    """The writer compiled for a schema (as JSON text), kept across cycles: compiling takes about
    a millisecond, more than a small cycle's messages take to encode."""
    named: dict[str, Any] = {}
    return compile_writer(parse_schema(json.loads(schema), named), named, prefix)


class SingleObjectEncoder:
    """Encodes messages of one data schema; built once per table version and cycle. A writer
    compiled for the schema (`avro_binary`) encodes the messages it takes; fastavro the others,
    and any message of a schema the compiler does not cover."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._parsed = parse_schema(dict(schema))
        self.fingerprint = fingerprint(schema)
        self._prefix = MARKER + self.fingerprint
        self._compiled = _compiled(json.dumps(dict(schema)), self._prefix)

    def encode(self, message: Mapping[str, Any]) -> bytes:
        if self._compiled is not None:
            try:
                return self._compiled(message)
            except Exception:  # fastavro says what such a message is: its bytes, or the error
                pass
        return self.encode_generic(message)

    def encode_generic(self, message: Mapping[str, Any]) -> bytes:
        """The encoding by fastavro alone."""
        out = io.BytesIO()
        out.write(self._prefix)
        schemaless_writer(out, self._parsed, dict(message))
        return out.getvalue()
