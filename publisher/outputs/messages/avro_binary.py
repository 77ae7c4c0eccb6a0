"""The Avro binary encoding of one record schema, compiled once into a Python function.

fastavro's writer walks the schema for every message and resolves each union by validating the
value against its branches, which costs about 25 µs for a data message of thirty fields; a
function generated for the schema writes the same bytes in a fraction of that.

It covers what a data schema holds: records (named and referred to by name, not recursive),
null, boolean, int, long, double, string, bytes, and unions of null with one of those. For
any other schema `compile_writer` gives None. The function writes only values of the exact
Python type its branch takes (a bool is no long, a str subclass no string), in range, in dicts
that hold exactly the record's fields; anything else raises, and the caller gives that message
to fastavro, whose bytes (or error) are then the answer, so the two never disagree.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

_SMALL = 1024
"""Varints of -_SMALL <= n < _SMALL (and of lengths below _SMALL) are looked up, not computed."""
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)
_LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
_MAX_LINES = 20_000
"""A schema whose records, inlined at each reference, would take more lines is left to fastavro."""


class Refused(Exception):
    """A value the compiled function does not write; fastavro decides what it is."""


class Unsupported(Exception):
    """A schema the compiler does not cover."""


def varint(value: int) -> bytes:
    """The zig-zag variable-length encoding Avro gives an int or long (-2**63 <= value < 2**63)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINTS = tuple(varint(n) for n in range(-_SMALL, _SMALL))
_SIZES = _VARINTS[_SMALL:]
_NAMESPACE: dict[str, Any] = {
    "Refused": Refused, "_varint": varint, "_VARINTS": _VARINTS, "_SIZES": _SIZES,
    "_double": struct.Struct("<d").pack,
}


class _Source:
    """The lines of the generated function; each value gets a variable of its own."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.lines: list[str] = []
        self.count = 0
        self.open: set[str] = set()

    def emit(self, indent: int, text: str) -> None:
        if len(self.lines) >= _MAX_LINES:
            raise Unsupported("schema too large to inline")
        self.lines.append("    " * indent + text)

    def variable(self) -> str:
        self.count += 1
        return f"v{self.count}"


def _resolved(schema: Any, named: Mapping[str, Any]) -> Any:
    """A type as a primitive name, a record dict or a union list; Unsupported otherwise."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        if schema in named:
            return _resolved(named[schema], named)
        raise Unsupported(f"unknown type {schema!r}")
    if isinstance(schema, list):
        return schema
    if isinstance(schema, dict) and "logicalType" not in schema:
        kind = schema.get("type")
        if kind == "record":
            return schema
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return kind
    raise Unsupported(f"type {schema!r}")


def _number(src: _Source, var: str, indent: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    src.emit(indent, f"if type({var}) is not int or not {low} <= {var} <= {high}: raise Refused")
    src.emit(indent, f"out += _VARINTS[{var} + {_SMALL}] if {-_SMALL} <= {var} < {_SMALL} else _varint({var})")


def _sized(src: _Source, var: str, indent: int) -> None:
    src.emit(indent, f"n = len({var})")
    src.emit(indent, f"out += _SIZES[n] if n < {_SMALL} else _varint(n)")
    src.emit(indent, f"out += {var}")


def _primitive(src: _Source, kind: str, var: str, indent: int) -> None:
    if kind == "null":
        src.emit(indent, f"if {var} is not None: raise Refused")
    elif kind == "boolean":
        src.emit(indent, f"if {var} is True: out += b'\\x01'")
        src.emit(indent, f"elif {var} is False: out += b'\\x00'")
        src.emit(indent, "else: raise Refused")
    elif kind in ("int", "long"):
        _number(src, var, indent, _INT_RANGE if kind == "int" else _LONG_RANGE)
    elif kind == "double":
        src.emit(indent, f"if type({var}) is not float: raise Refused")
        src.emit(indent, f"out += _double({var})")
    elif kind == "string":
        src.emit(indent, f"if type({var}) is not str: raise Refused")
        src.emit(indent, f"{var} = {var}.encode()")
        _sized(src, var, indent)
    else:
        src.emit(indent, f"if type({var}) is not bytes: raise Refused")
        _sized(src, var, indent)


_PRIMITIVES = ("null", "boolean", "int", "long", "double", "string", "bytes")


def _record(src: _Source, schema: dict[str, Any], var: str, indent: int) -> None:
    name = schema.get("name", "")
    if name in src.open:
        raise Unsupported(f"recursive record {name}")
    src.open.add(name)
    fields = schema["fields"]
    src.emit(indent, f"if type({var}) is not dict or len({var}) != {len(fields)}: raise Refused")
    for field in fields:
        value = src.variable()
        src.emit(indent, f"{value} = {var}[{field['name']!r}]")
        _value(src, field["type"], value, indent)
    src.open.discard(name)


def _union(src: _Source, branches: list[Any], var: str, indent: int) -> None:
    kinds = [_resolved(branch, src.named) for branch in branches]
    if len(kinds) != 2 or kinds.count("null") != 1:
        raise Unsupported(f"union {branches!r}")
    null = kinds.index("null")
    src.emit(indent, f"if {var} is None: out += {varint(null)!r}")
    src.emit(indent, "else:")
    src.emit(indent + 1, f"out += {varint(1 - null)!r}")
    _value(src, branches[1 - null], var, indent + 1)


def _value(src: _Source, schema: Any, var: str, indent: int) -> None:
    kind = _resolved(schema, src.named)
    if isinstance(kind, str):
        _primitive(src, kind, var, indent)
    elif isinstance(kind, list):
        _union(src, kind, var, indent)
    else:
        _record(src, kind, var, indent)


def compile_writer(schema: Any, named: Mapping[str, Any], prefix: bytes = b"") -> Callable[[Any], bytes] | None:
    """A function from a value of `schema` (as fastavro's `parse_schema` gives it, with the named
    types it filled in) to `prefix` and the value's Avro binary encoding; None for a schema it
    does not cover. The function raises `Refused` (or another error) for a value it does not write."""
    src = _Source(named)
    try:
        _value(src, schema, "message", 1)
    except Unsupported:
        return None
    code = "\n".join(["def write(message):", f"    out = bytearray({prefix!r})", *src.lines,
                      "    return bytes(out)"])
    namespace = dict(_NAMESPACE)
    exec(compile(code, "<avro writer>", "exec"), namespace)
    writer: Callable[[Any], bytes] = namespace["write"]
    return writer
