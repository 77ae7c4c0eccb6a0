"""Generated schemas and DML for the consumer-mirror property test.

A scenario is 1-3 tables of a dialect (keys of every type the database offers, single and
compound, key-only link tables, non-key columns of every kind, NULLs) and a list of steps:
DML transactions interleaved with polls of random `query_limit` and `batch_size`. A logical
scenario (`logical_scenarios`) has logical classes: parents with child tables whose rows are
the values of multi-valued attributes, and references between classes, and DML on both.

Steps name rows abstractly (the n-th existing row, the n-th deleted key), so that they stay
meaningful while Hypothesis shrinks them; `execute` resolves them against the database and
records the SQL that really ran, as a `Script` that `run_script` replays exactly, for the
regression tests a failure is turned into. All values are SQL literals, so the printed
statements are the statements that ran, with no bound parameters left out.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from lxml import etree
from sqlalchemy import Connection

# --- values as SQL literals ----------------------------------------------------------------------

TEXT_ALPHABET = "aZ09 ,;'+\"=\\<>&%:#é日😀"
"""Letters and digits, a space, every character a table_key quotes, XML's own, one that
looks like a bind parameter (`:`), and unicode in and beyond the BMP."""
OFFSETS = ("+00:00", "+02:00", "-05:30", "+14:00", "-12:00")


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def cast(text: str, sql_type: str) -> str:
    return f"CAST({quoted(text)} AS {sql_type})"


def texts(max_size: int, alphabet: str = TEXT_ALPHABET) -> st.SearchStrategy[str]:
    """Text of the alphabet, sometimes with trailing spaces or empty."""
    base = st.text(alphabet, max_size=max_size)
    padded = st.builds(lambda t, n: (t + " " * n)[:max_size], st.text(alphabet, min_size=1, max_size=max_size),
                       st.integers(1, 3))
    return st.one_of(base, padded)


def integers(bits: int) -> st.SearchStrategy[str]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1).map(str)


DATES = st.dates(dt.date(1800, 1, 1), dt.date(2300, 12, 31))
DATETIMES = st.datetimes(dt.datetime(1800, 1, 1), dt.datetime(2300, 12, 31))
WHOLE_SECONDS = DATETIMES.map(lambda d: d.replace(microsecond=0))
SOME_DATETIMES = st.one_of(WHOLE_SECONDS, DATETIMES)
TIMES = st.times()


def _iso(value: dt.datetime | dt.time) -> str:
    return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()


def with_offset(values: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    return st.builds(lambda v, o: _iso(v) + o, values, st.sampled_from(OFFSETS))


def decimals(places: int | None, limit: int) -> st.SearchStrategy[str]:
    return st.decimals(Decimal(-limit) + Decimal(1) / 100, Decimal(limit) - Decimal(1) / 100, places=places,
                       allow_nan=False, allow_infinity=False).map(str)


FLOATS = st.floats(allow_nan=False, allow_infinity=False)
FLOATS32 = st.floats(allow_nan=False, allow_infinity=False, width=32)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(TEXT_ALPHABET, max_size=4),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(TEXT_ALPHABET, max_size=3), children,
                                                                      max_size=3),
    max_leaves=5,
)


class SqlType:
    """A column type: its DDL, a strategy of SQL literals its column accepts, and whether it
    may be (part of) a primary key. Shown as its DDL alone."""

    def __init__(self, ddl: str, literals: st.SearchStrategy[str], key: bool = True) -> None:
        self.ddl, self.literals, self.key = ddl, literals, key

    def __repr__(self) -> str:
        return repr(self.ddl)


def _pg_interval(months: int, days: int, micros: int) -> str:
    return cast(f"{months} mons {days} days {micros} microseconds", "interval")


def _pg_text_array(items: list[str | None]) -> str:
    return "CAST(ARRAY[" + ", ".join("NULL" if i is None else quoted(i) for i in items) + "] AS text[])"


def _pg_int_array(items: list[int | None]) -> str:
    return cast("{" + ",".join("NULL" if i is None else str(i) for i in items) + "}", "integer[]")


POSTGRESQL_TYPES = (
    SqlType("integer", integers(32)),
    SqlType("text", texts(10).map(quoted)),
    SqlType("smallint", integers(16)),
    SqlType("bigint", integers(64)),
    SqlType("numeric(10,2)", decimals(2, 10**8)),
    SqlType("varchar(12)", texts(12).map(quoted)),
    SqlType("char(6)", texts(6).map(quoted)),
    SqlType("boolean", st.sampled_from(["TRUE", "FALSE"])),
    SqlType("date", DATES.map(lambda d: cast(d.isoformat(), "date"))),
    SqlType("timestamp", SOME_DATETIMES.map(lambda d: cast(_iso(d), "timestamp"))),
    SqlType("timestamptz", with_offset(SOME_DATETIMES).map(lambda t: cast(t, "timestamptz"))),
    SqlType("uuid", st.uuids().map(lambda u: cast(str(u), "uuid"))),
    SqlType("bytea", st.binary(max_size=12).map(lambda b: cast("\\x" + b.hex(), "bytea"))),
    SqlType("numeric", decimals(None, 10**12)),
    SqlType("double precision", FLOATS.map(lambda f: cast(repr(f), "double precision"))),
    SqlType("real", FLOATS32.map(lambda f: cast(repr(f), "real"))),
    SqlType("json", JSON_VALUES.map(lambda v: cast(json.dumps(v, ensure_ascii=False), "json")), key=False),  # no =
    SqlType("jsonb", JSON_VALUES.map(lambda v: cast(json.dumps(v, ensure_ascii=False), "jsonb"))),
    SqlType("integer[]", st.lists(st.none() | st.integers(-99, 99), max_size=3).map(_pg_int_array)),
    SqlType("text[]", st.lists(st.none() | st.text(TEXT_ALPHABET, max_size=4), max_size=3).map(_pg_text_array)),
    SqlType("interval", st.builds(_pg_interval, st.integers(-30, 30), st.integers(-40, 40),
                                  st.integers(-(10**11), 10**11))),
    SqlType("time", TIMES.map(lambda t: cast(_iso(t), "time"))),
    SqlType("timetz", with_offset(TIMES).map(lambda t: cast(t, "timetz"))),
)

SQLITE_TYPES = (
    SqlType("INTEGER", integers(64)),
    SqlType("TEXT", texts(10).map(quoted)),
    SqlType("VARCHAR(12)", texts(12).map(quoted)),
    SqlType("NUMERIC", st.one_of(integers(32), decimals(2, 10**8))),
    SqlType("REAL", FLOATS.map(repr)),
    SqlType("BOOLEAN", st.sampled_from(["1", "0"])),
    SqlType("DATE", DATES.map(lambda d: quoted(d.isoformat()))),
    SqlType("TIMESTAMP", st.one_of(WHOLE_SECONDS.map(lambda d: quoted(_iso(d))),
                                   DATETIMES.map(lambda d: quoted(d.strftime("%Y-%m-%d %H:%M:%S.%f"))))),
    SqlType("BLOB", st.binary(max_size=12).map(lambda b: f"X'{b.hex()}'"), key=False),
    SqlType("JSON", JSON_VALUES.map(lambda v: quoted(json.dumps(v, ensure_ascii=False)))),
)


MARIADB_ALPHABET = TEXT_ALPHABET + "AeE🙂"
"""With letters that differ from others by case or accent alone, which MariaDB's default
collation (utf8mb4_general_ci) calls equal, and a second character beyond the BMP."""
EQUAL_TEXTS = ("a", "A", "a ", "A  ", "é", "E", "e ")
"""Texts utf8mb4_general_ci (case- and accent-insensitive, PAD SPACE) calls equal, though each
is stored and published as written (a CHAR drops the trailing spaces)."""


def mariadb_texts(max_size: int) -> st.SearchStrategy[str]:
    """Text, often one that the collation calls equal to another (so that keys collide, change
    case in place, and are deleted and inserted again in another case)."""
    return st.one_of(texts(max_size, MARIADB_ALPHABET), st.sampled_from(EQUAL_TEXTS),
                     st.builds(str.__add__, st.sampled_from(EQUAL_TEXTS), st.text("aAé", max_size=2)))


def mariadb_float(value: float) -> str:
    """A DOUBLE literal (an exponent makes it one; `0.1` alone would be a DECIMAL)."""
    text = repr(value)
    return text if "e" in text else text + "e0"


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _next_floats32(value: float) -> list[str]:
    """A float and its float32 neighbours, which MariaDB's text of a FLOAT (six significant
    digits) spells alike."""
    bits = struct.unpack("<i", struct.pack("<f", value))[0]
    near = [struct.unpack("<f", struct.pack("<i", b))[0] for b in (bits, bits + 1, bits - 1)]
    return [mariadb_float(f) for f in near if math.isfinite(f)]


MARIADB_DATETIMES = st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59))
MARIADB_TIMESTAMPS = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))
"""TIMESTAMP's range, a day inside it, whatever the changing session's time zone."""
MARIADB_TIMES = st.builds(lambda sign, seconds, micros: ("-" if sign and (seconds or micros) else "")
                          + f"{seconds // 3600}:{seconds // 60 % 60:02}:{seconds % 60:02}.{micros:06}",
                          st.booleans(), st.integers(0, 838 * 3600 + 59 * 60 + 58), st.integers(0, 999_999))
"""TIME(6): a duration of -838:59:59 to 838:59:59, not only a time of day."""


def _ms(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


MARIADB_UNSIGNED_BEYOND_63_BITS = False
"""Whether BIGINT UNSIGNED values beyond 2**63 - 1 are generated: as keys they are refused as E
(test_mariadb_unsigned_bigint_keys_beyond_the_signed_range); off until that is fixed."""


def _unsigned(bits: int) -> st.SearchStrategy[str]:
    top = 2**bits - 1 if bits < 64 or MARIADB_UNSIGNED_BEYOND_63_BITS else 2**63 - 1
    return st.one_of(st.integers(0, top), st.integers(top - 8, top)).map(str)


MARIADB_TYPES = (
    SqlType("INT", integers(32)),
    SqlType("VARCHAR(12)", mariadb_texts(12).map(quoted)),
    SqlType("BIGINT", integers(64)),
    SqlType("BIGINT UNSIGNED", _unsigned(64)),
    SqlType("INT UNSIGNED", _unsigned(32)),
    SqlType("SMALLINT", integers(16)),
    SqlType("TINYINT", integers(8)),
    SqlType("TINYINT UNSIGNED", _unsigned(8)),
    SqlType("BOOLEAN", st.sampled_from(["TRUE", "FALSE", "1", "0"])),  # TINYINT(1); 2 or -1 is E, see MARIADB_TYPES
    SqlType("DECIMAL(10,2)", decimals(2, 10**8)),
    SqlType("DECIMAL(30,10)", decimals(10, 10**19)),
    SqlType("DOUBLE", FLOATS.map(mariadb_float)),
    SqlType("FLOAT", FLOATS32.map(mariadb_float)),
    SqlType("CHAR(6)", mariadb_texts(6).map(quoted)),
    SqlType("VARCHAR(10) COLLATE utf8mb4_bin", mariadb_texts(10).map(quoted)),
    SqlType("VARCHAR(10) COLLATE utf8mb4_nopad_bin", mariadb_texts(10).map(quoted)),
    SqlType("VARBINARY(12)", st.binary(max_size=12).map(lambda b: f"X'{b.hex()}'")),
    SqlType("BINARY(4)", st.binary(max_size=4).map(lambda b: f"X'{b.ljust(4, bytes(1)).hex()}'")),  # as padded
    SqlType("DATE", st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)).map(lambda d: quoted(d.isoformat()))),
    SqlType("DATETIME", MARIADB_DATETIMES.map(lambda d: quoted(_iso(d.replace(microsecond=0))))),
    SqlType("DATETIME(6)", MARIADB_DATETIMES.map(lambda d: quoted(d.strftime("%Y-%m-%d %H:%M:%S.%f")))),
    SqlType("TIMESTAMP(3)", MARIADB_TIMESTAMPS.map(lambda d: quoted(_ms(d)))),
    SqlType("TIME(6)", MARIADB_TIMES.map(quoted)),
    SqlType("YEAR", st.one_of(st.integers(1901, 2155).map(str), st.just("0"))),
    SqlType("UUID", st.builds(lambda u, upper: quoted(str(u).upper() if upper else str(u)),
                              st.uuids(version=4) | st.uuids(version=1), st.booleans())),  # MariaDB refuses variant 0
    SqlType("ENUM('a','B','c d')", st.sampled_from(["'a'", "'A'", "'B'", "'b'", "'c d'"])),
    SqlType("TEXT", mariadb_texts(20).map(quoted), key=False),  # a key needs a prefix length
    SqlType("BLOB", st.binary(max_size=12).map(lambda b: f"X'{b.hex()}'"), key=False),
    SqlType("JSON", JSON_VALUES.map(lambda v: quoted(json.dumps(v, ensure_ascii=False))), key=False),
)
"""MariaDB's types (10.11): every one a key can be, and the value-only TEXT, BLOB and JSON (a
LONGTEXT checked by JSON_VALID, kept as written). Not INET6, which `install` refuses (SQLAlchemy
does not know it), nor BIT, refused too. A BOOLEAN (TINYINT(1)) holds any TINYINT, but is
published as a boolean: 2 or -1 is E by design, and the consumer keeps the value before it.
Text columns take the database's default collation, case- and accent-insensitive and PAD SPACE,
except where the type names another."""

TYPES = {"postgresql": POSTGRESQL_TYPES, "sqlite": SQLITE_TYPES, "mariadb": MARIADB_TYPES}

# --- tables --------------------------------------------------------------------------------------

TABLE_NAMES = ("usr", "Member", "order")
KEY_NAMES = ("k0", "K1", "group")
VALUE_NAMES = ("v0", "Value", "select", "v 3")


def identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: SqlType
    key: bool


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[ColumnSpec, ...]
    """In the table's order, which need not be the key's."""
    key: tuple[str, ...]
    """The primary key's columns in its own order."""
    constraint: str = ""
    """More of the CREATE TABLE after the primary key (a child table's foreign key)."""

    def column(self, name: str) -> ColumnSpec:
        return next(c for c in self.columns if c.name == name)

    @property
    def key_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(self.column(n) for n in self.key)

    @property
    def value_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if not c.key)

    def ddl(self) -> str:
        columns = [f"{identifier(c.name)} {c.type.ddl}" + (" NOT NULL" if c.key else "") for c in self.columns]
        key = ", ".join(identifier(n) for n in self.key)
        return f"CREATE TABLE {identifier(self.name)} ({', '.join(columns)}, PRIMARY KEY ({key}){self.constraint})"


@st.composite
def table_specs(draw: st.DrawFn, dialect: str, name: str, keys: int | None = None) -> TableSpec:
    types = TYPES[dialect]
    key_types = [t for t in types if t.key]
    keys = draw(st.integers(1, 3)) if keys is None else keys
    key_only = draw(st.integers(0, 4)) == 4
    values = 0 if key_only else draw(st.integers(1, 4))
    key_columns = [ColumnSpec(KEY_NAMES[i], draw(st.sampled_from(key_types)), True) for i in range(keys)]
    value_columns = [ColumnSpec(VALUE_NAMES[i], draw(st.sampled_from(types)), False) for i in range(values)]
    key_order = tuple(c.name for c in draw(st.permutations(key_columns)))
    columns = tuple(draw(st.permutations(key_columns + value_columns)))
    return TableSpec(name, columns, key_order)


@st.composite
def schemas(draw: st.DrawFn, dialect: str) -> tuple[TableSpec, ...]:
    count = draw(st.integers(1, 3))
    return tuple(draw(table_specs(dialect, TABLE_NAMES[i])) for i in range(count))


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Insert:
    table: int
    values: tuple[str, ...]
    """A literal per column of the table (NULL for a NULL)."""


@dataclass(frozen=True)
class Reinsert:
    """Insert a key deleted earlier again (the pick-th deleted key), with new non-key values."""

    table: int
    pick: int
    values: tuple[str, ...]
    """A literal per non-key column."""


@dataclass(frozen=True)
class Update:
    """Set columns (the key's too) of the pick-th existing row."""

    table: int
    pick: int
    changes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class UpdateAll:
    """Set non-key columns of every row in one statement."""

    table: int
    changes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Delete:
    table: int
    pick: int


@dataclass(frozen=True)
class DeleteAll:
    table: int


@dataclass(frozen=True)
class Transaction:
    """Several statements committed together."""

    steps: tuple[Any, ...]


@dataclass(frozen=True)
class Poll:
    query_limit: int
    batch_size: int


@dataclass(frozen=True)
class Snapshot:
    """`publisher snapshot` of every published table, `chunk_rows` rows per transaction; with
    `direct`, `snapshot --direct` (and with `ranges`, every table in key ranges on Spark)."""

    chunk_rows: int
    direct: bool = False
    ranges: bool = False


def _maybe_null(literals: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """NULL one time in four; shrinks towards NULL, so a value that matters stays in a reproduction."""
    return st.integers(0, 3).flatmap(lambda i: st.just("NULL") if i == 0 else literals)


def _value(column: ColumnSpec) -> st.SearchStrategy[str]:
    return column.type.literals if column.key else _maybe_null(column.type.literals)


KINDS = ("insert",) * 6 + ("update",) * 6 + ("delete",) * 3 + ("reinsert",) * 2 + ("update_all", "delete_all")
"""How often each kind of statement comes (shrinking goes towards the first)."""


@st.composite
def dml_steps(draw: st.DrawFn, tables: Sequence[TableSpec]) -> Any:
    index = draw(st.integers(0, len(tables) - 1))
    table = tables[index]
    kind = draw(st.sampled_from(KINDS))
    if kind == "insert" or (kind == "update_all" and not table.value_columns):
        return Insert(index, tuple(draw(_value(c)) for c in table.columns))
    if kind == "reinsert":
        return Reinsert(index, draw(st.integers(0, 50)), tuple(draw(_value(c)) for c in table.value_columns))
    if kind == "update":
        names = draw(st.lists(st.sampled_from([c.name for c in table.columns]), min_size=1, max_size=3, unique=True))
        return Update(index, draw(st.integers(0, 50)), tuple((n, draw(_value(table.column(n)))) for n in names))
    if kind == "update_all":
        names = draw(st.lists(st.sampled_from([c.name for c in table.value_columns]), min_size=1, max_size=2,
                              unique=True))
        return UpdateAll(index, tuple((n, draw(_value(table.column(n)))) for n in names))
    if kind == "delete":
        return Delete(index, draw(st.integers(0, 50)))
    return DeleteAll(index)


@st.composite
def new_rows(draw: st.DrawFn, tables: Sequence[TableSpec]) -> Insert:
    index = draw(st.integers(0, len(tables) - 1))
    return Insert(index, tuple(draw(_value(c)) for c in tables[index].columns))


def polls() -> st.SearchStrategy[Poll]:
    return st.builds(Poll, st.integers(1, 50), st.integers(1, 10))


@st.composite
def steps(draw: st.DrawFn, tables: Sequence[TableSpec], max_steps: int = 20) -> list[Any]:
    """A few inserts first, so that most steps find rows to change, then anything. The counts are
    drawn evenly (a list strategy keeps most lists short) and shrink towards one step."""
    single = dml_steps(tables)
    together = st.lists(single, min_size=2, max_size=4).map(lambda s: Transaction(tuple(s)))
    step = st.one_of(single, together, polls())
    inserts = [draw(new_rows(tables)) for _ in range(draw(st.integers(0, 8)))]
    return inserts + [draw(step) for _ in range(draw(st.integers(1, max_steps)))]


@dataclass(frozen=True)
class Scenario:
    dialect: str
    tables: tuple[TableSpec, ...]
    steps: tuple[Any, ...]
    children: tuple[ChildSpec, ...] = ()
    """The logical classes' child tables (the last of `tables`), see `logical_scenarios`."""
    column_references: tuple[tuple[int, str, int], ...] = ()
    """(table, column, referenced table): parent columns published as references."""
    before_install: int = 0
    """The first steps run before capture is installed (rows no trigger sees; a snapshot follows)."""

    @property
    def published(self) -> list[str]:
        """The tables whose capture is installed: all but the children, installed with their class."""
        children = {c.table for c in self.children}
        return [t.name for i, t in enumerate(self.tables) if i not in children]

    def classes(self) -> dict[str, Any]:
        return class_configs(self.tables, self.children, self.column_references)


@st.composite
def scenarios(draw: st.DrawFn, dialect: str, max_steps: int = 20) -> Scenario:
    tables = draw(schemas(dialect))
    return Scenario(dialect, tables, tuple(draw(steps(tables, max_steps))))


def _snapshots() -> st.SearchStrategy[Snapshot]:
    """Logged or direct, and direct in key ranges one time in four."""
    return st.builds(Snapshot, st.integers(1, 7), st.booleans(), st.integers(0, 3).map(lambda i: i == 0))


@st.composite
def with_snapshots(draw: st.DrawFn, scenarios: st.SearchStrategy[Scenario], before_install: bool = True) -> Scenario:
    """A scenario with 1-2 snapshots at random moments; with `before_install`, its first inserts
    run before capture is installed and a snapshot comes right after the install."""
    scenario = draw(scenarios)
    steps = list(scenario.steps)
    for _ in range(draw(st.integers(1, 2))):
        steps.insert(draw(st.integers(0, len(steps))), draw(_snapshots()))
    leading = 0
    if before_install:
        while leading < len(steps) and isinstance(steps[leading], Insert):
            leading += 1
        leading = draw(st.integers(0, leading))
        if leading:
            steps.insert(leading, draw(_snapshots()))
    return dataclasses.replace(scenario, steps=tuple(steps), before_install=leading)


# --- logical classes -----------------------------------------------------------------------------
#
# A parent table (any generated key) with 1-2 child tables whose rows are the values of a
# multi-valued attribute, and sometimes a second class whose child's values (and a column of its
# own) reference the first class. A child's link columns copy the parent's key columns' types;
# they are found by a foreign key (ON DELETE CASCADE, sometimes ON UPDATE CASCADE too), else by
# the parent's key column names, else by position (the child's primary key lists them in the
# parent's key order). The DML keeps every child row attached to an existing parent, as an
# application would: children are inserted for existing parents, moved along with a parent's
# key, and deleted with their parent (by the cascade or by explicit statements).

CLASS_NAMES = ("usr", "Member")
PLAIN_NAME = "order"
CHILD_SUFFIXES = ("set", "Many")
ATTRIBUTE_NAMES = ("phone", "Alias")
LINK_NAMES = ("p0", "P1", "of")
CHILD_VALUE_NAMES = ("val", "Value", "to")
NOTE_NAMES = ("note", "v 3")
REFERENCE_COLUMN = "ref"
FOREIGN_KEYS = ("delete", "update", "", "")
"""A child's foreign key to its parent: ON DELETE CASCADE, ON UPDATE CASCADE too, or none."""
SQLITE_VALUES_FIRST = False
"""Whether field-style DML on SQLite may log a value before its parent's insert (values of a new
object inserted before it, values moved to a new key before their parent, and ON UPDATE
CASCADE, which SQLite runs before the parent's own triggers). SQLite's windows may end between
two statements of a transaction, and a value in the cycle before its parent's insert is
published as a <modify> ahead of the object's <add>, which the consumer refuses
(test_sqlite_a_value_in_the_cycle_before_its_parents_insert); off until that is fixed."""


@dataclass(frozen=True)
class Allowed:
    """What a logical scenario may do that fails for a known reason in some dialects and styles
    (see SQLITE_VALUES_FIRST): log values before their parent's insert."""

    values_first: bool = True


def allowed(dialect: str, style: str) -> Allowed:
    """Everything, but what fails for a known reason in the dialect and style."""
    return Allowed(SQLITE_VALUES_FIRST or style != "field" or dialect != "sqlite")


@dataclass(frozen=True)
class ChildSpec:
    """A child table (`table`, an index into the scenario's tables) of the class `parent`."""

    table: int
    parent: int
    attribute: str
    value: str
    """The value column."""
    links: tuple[str, ...]
    """The columns holding the parent's key, in the parent's key order."""
    foreign_key: str
    """"delete", "update" (see FOREIGN_KEYS) or "" (none)."""
    references: int | None = None
    """The table whose keys the values are (the attribute is a reference), or None."""
    note: str | None = None
    """A non-key column, whose changes change no value."""
    pool: tuple[str, ...] = ()
    """Values most steps take, so that values come back, move and meet again."""


def class_configs(tables: Sequence[TableSpec], children: Sequence[ChildSpec],
                  column_references: Sequence[tuple[int, str, int]] = ()) -> dict[str, Any]:
    """The `Config.classes` of a logical schema, in table order."""
    from publisher.config import ClassConfig

    multi: dict[int, dict[str, str]] = {}
    refs: dict[int, dict[str, str]] = {}
    for child in children:
        multi.setdefault(child.parent, {})[child.attribute] = f"{tables[child.table].name}.{child.value}"
        if child.references is not None:
            refs.setdefault(child.parent, {})[child.attribute] = tables[child.references].name
    for table, column, target in column_references:
        refs.setdefault(table, {})[column] = tables[target].name
    return {tables[i].name: ClassConfig(multi_valued=multi.get(i, {}), references=refs.get(i, {}))
            for i in sorted(multi.keys() | refs.keys())}


@st.composite
def child_table_specs(draw: st.DrawFn, dialect: str, parent: TableSpec, name: str, value_type: SqlType | None = None,
                      values_first: bool = True) -> tuple[TableSpec, str, tuple[str, ...], str, str | None]:
    """A child table of `parent`: (spec, value column, link columns in the parent's key order,
    foreign key, note column)."""
    types = TYPES[dialect]
    foreign_key = draw(st.sampled_from(FOREIGN_KEYS))
    if foreign_key == "update" and dialect == "sqlite" and not values_first:
        foreign_key = "delete"  # SQLite's ON UPDATE CASCADE logs the values before the parent's key change
    if foreign_key == "update" and dialect == "mariadb":
        foreign_key = "delete"  # install refuses it: a cascade fires no trigger on MariaDB
    same_names = draw(st.booleans())
    parent_key = parent.key_columns
    links = [ColumnSpec(c.name if same_names else LINK_NAMES[i], c.type, True) for i, c in enumerate(parent_key)]
    value_name = draw(st.sampled_from(CHILD_VALUE_NAMES))
    value = ColumnSpec(value_name, value_type or draw(st.sampled_from([t for t in types if t.key])), True)
    note = ColumnSpec(draw(st.sampled_from(NOTE_NAMES)), draw(st.sampled_from(types)), False) \
        if draw(st.integers(0, 2)) == 0 else None
    if foreign_key or same_names:
        key = tuple(c.name for c in draw(st.permutations([*links, value])))
    else:  # found by position: the primary key names the links in the parent's key order
        at = draw(st.integers(0, len(links)))
        key = tuple(c.name for c in [*links[:at], value, *links[at:]])
    columns = tuple(draw(st.permutations([*links, value] + ([note] if note else []))))
    constraint = ""
    if foreign_key:
        constraint = (f", FOREIGN KEY ({', '.join(identifier(c.name) for c in links)}) REFERENCES "
                      f"{identifier(parent.name)} ({', '.join(identifier(n) for n in parent.key)}) ON DELETE CASCADE"
                      + (" ON UPDATE CASCADE" if foreign_key == "update" else ""))
    spec = TableSpec(name, columns, key, constraint)
    return spec, value_name, tuple(c.name for c in links), foreign_key, note.name if note else None


def _same_second(literal: Callable[[dt.datetime], str]) -> st.SearchStrategy[list[str]]:
    return st.builds(lambda d, fractions: [literal(d.replace(microsecond=f)) for f in fractions], WHOLE_SECONDS,
                     st.lists(st.integers(1, 999_999), min_size=2, max_size=3, unique=True))


def _next_floats(f: float) -> list[str]:
    return [repr(f), repr(math.nextafter(f, math.inf)), repr(math.nextafter(f, -math.inf))]


SAME_TEXT = {
    ("postgresql", "timestamp"): _same_second(lambda d: cast(_iso(d), "timestamp")),
    ("postgresql", "timestamptz"): _same_second(lambda d: cast(_iso(d) + "+02:00", "timestamptz")),
    ("sqlite", "TIMESTAMP"): _same_second(lambda d: quoted(d.strftime("%Y-%m-%d %H:%M:%S.%f"))),
    ("sqlite", "REAL"): FLOATS.filter(lambda f: f != 0 and math.isfinite(math.nextafter(f, math.inf))
                                      and math.isfinite(math.nextafter(f, -math.inf))).map(_next_floats),
    ("mariadb", "DATETIME(6)"): _same_second(lambda d: quoted(d.strftime("%Y-%m-%d %H:%M:%S.%f"))),
    ("mariadb", "TIMESTAMP(3)"): st.builds(lambda d, ms: [quoted(_ms(d.replace(microsecond=m * 1000))) for m in ms],
                                           MARIADB_TIMESTAMPS, st.lists(st.integers(0, 999), min_size=2, max_size=3,
                                                                        unique=True)),
    ("mariadb", "FLOAT"): FLOATS32.filter(lambda f: f != 0).map(_next_floats32),
}
"""Of a dialect's types, distinct values that publish the same text (timestamps within one
second: XDS times are whole seconds; SQLite REALs that differ past their 15th digit; MariaDB
FLOATs that differ past their 6th), which a child's pool is half the time: removing one must
not take the text from the consumer while another row holds it
(test_two_timestamps_of_one_second_are_one_published_value)."""

EQUAL_BY_COLLATION = {
    ("mariadb", "VARCHAR(12)"): st.lists(st.sampled_from(EQUAL_TEXTS), min_size=2, max_size=4, unique=True)
    .map(lambda ts: [quoted(t) for t in ts]),
    ("mariadb", "CHAR(6)"): st.lists(st.sampled_from(EQUAL_TEXTS), min_size=2, max_size=4, unique=True)
    .map(lambda ts: [quoted(t) for t in ts]),
}
"""Of a dialect's types, distinct texts the column's collation calls equal, another pool a
child may have: a value changed from 'a' to 'A' changes in place (one key, two texts)."""


@st.composite
def logical_schemas(draw: st.DrawFn, dialect: str, allowed: Allowed = Allowed()
                    ) -> tuple[tuple[TableSpec, ...], tuple[ChildSpec, ...], tuple[tuple[int, str, int], ...]]:
    """(tables, children, column references): the class usr (any key) with 1-2 children; half
    the time the class Member whose child's values reference a class with a one-column key
    (usr when it has one), and sometimes a column of Member too; a plain table now and then."""
    first = draw(table_specs(dialect, CLASS_NAMES[0], keys=draw(st.sampled_from((1, 1, 2, 3)))))
    parents = [first]
    if draw(st.booleans()):
        parents.append(draw(table_specs(dialect, CLASS_NAMES[1])))
    if draw(st.integers(0, 3)) == 0:
        parents.append(draw(table_specs(dialect, PLAIN_NAME)))
    target = next((i for i in range(min(2, len(parents))) if len(parents[i].key) == 1), None)
    column_references: list[tuple[int, str, int]] = []
    plan: list[tuple[int, int | None]] = [(0, None)] * draw(st.integers(1, 2))
    if len(parents) > 1 and parents[1].name == CLASS_NAMES[1]:
        refer = target is not None and draw(st.integers(0, 3)) > 0
        plan.append((1, target if refer else None))
        if target is not None and draw(st.booleans()):
            member = parents[1]
            ref = ColumnSpec(REFERENCE_COLUMN, parents[target].key_columns[0].type, False)
            at = draw(st.integers(0, len(member.columns)))
            parents[1] = TableSpec(member.name, (*member.columns[:at], ref, *member.columns[at:]), member.key)
            column_references.append((1, REFERENCE_COLUMN, target))
    tables = list(parents)
    children = []
    for n, (parent, references) in enumerate(plan):
        count = sum(1 for p, _ in plan[:n] if p == parent)
        value_type = None if references is None else tables[references].key_columns[0].type
        spec, value, links, foreign_key, note = draw(child_table_specs(
            dialect, tables[parent], f"{tables[parent].name}_{CHILD_SUFFIXES[count]}", value_type,
            allowed.values_first))
        values = spec.column(value).type
        same_text = SAME_TEXT.get((dialect, values.ddl), EQUAL_BY_COLLATION.get((dialect, values.ddl)))
        if same_text is not None and draw(st.booleans()):
            pool = draw(same_text)
        else:
            pool = draw(st.lists(values.literals, min_size=1, max_size=3))
        children.append(ChildSpec(len(tables), parent, ATTRIBUTE_NAMES[count], value, links, foreign_key,
                                  references, note, tuple(pool)))
        tables.append(spec)
    return tuple(tables), tuple(children), tuple(column_references)


@dataclass(frozen=True)
class AddValue:
    """Insert a value for the pick-th existing parent; of a reference, the refer-th existing
    referenced key when there is one (else `value`, which may name no object)."""

    child: int
    """An index into the scenario's children."""
    parent: int
    value: str
    refer: int | None = None
    note: str = "NULL"


@dataclass(frozen=True)
class RemoveValue:
    child: int
    pick: int


@dataclass(frozen=True)
class ChangeValue:
    """Set the value of the pick-th child row."""

    child: int
    pick: int
    value: str
    refer: int | None = None


@dataclass(frozen=True)
class MoveValue:
    """Move the pick-th child row to the `parent`-th existing parent (update its link columns),
    with a new value too when `value` is set."""

    child: int
    pick: int
    parent: int
    value: str | None = None
    refer: int | None = None


@dataclass(frozen=True)
class MoveValues:
    """Move every value of the `pick`-th parent to the `parent`-th, in one statement, unless one
    is there already."""

    child: int
    pick: int
    parent: int


@dataclass(frozen=True)
class ChangeNote:
    """Set a child's non-key column: of the pick-th row, of every row when pick is None."""

    child: int
    pick: int | None
    note: str


@dataclass(frozen=True)
class RemoveValues:
    """Delete every value of the `parent`-th parent's attribute, of every parent if None."""

    child: int
    parent: int | None


@dataclass(frozen=True)
class NewObject:
    """Insert a parent row and values of its attributes, in one transaction (values_first:
    the values of children without a foreign key before the parent)."""

    table: int
    values: tuple[str, ...]
    adds: tuple[tuple[int, str, int | None], ...]
    """(child, value, refer) as in AddValue."""
    values_first: bool = False


@dataclass(frozen=True)
class RekeyObject:
    """Change the key of the pick-th parent, its values moving along: by a foreign key's ON
    UPDATE CASCADE, else by updates of the children's link columns, after the parent's update
    or (values_first) before it; not at all when a foreign key without ON UPDATE CASCADE
    holds values."""

    table: int
    pick: int
    changes: tuple[tuple[str, str], ...]
    values_first: bool = False


@dataclass(frozen=True)
class DeleteObject:
    """Delete the pick-th parent with its children: explicit statements first, or the cascade
    (without a foreign key, explicit statements after the parent's)."""

    table: int
    pick: int
    children_first: bool


@dataclass(frozen=True)
class ReplaceObject:
    """Delete the pick-th parent with its children and insert it again (new non-key values,
    new values of its attributes), in one transaction."""

    table: int
    pick: int
    children_first: bool
    values: tuple[str, ...]
    """A literal per non-key column."""
    adds: tuple[tuple[int, str, int | None], ...]


@dataclass(frozen=True)
class SetReference:
    """Set a reference column of the pick-th row to the refer-th existing referenced key."""

    table: int
    pick: int
    column: str
    target: int
    """The referenced table."""
    refer: int


CHILD_KINDS = ("add",) * 5 + ("remove",) * 2 + ("change",) * 2 + ("move",) * 2 + (
    "move_changed", "move_all", "note", "remove_values", "clear")
OBJECT_KINDS = ("new", "new", "delete", "replace", "rekey", "reference")
PICKS = st.integers(0, 50)


def _refer(child: ChildSpec) -> st.SearchStrategy[int | None]:
    """Of a reference, an existing key three times in four."""
    return st.none() if child.references is None else st.integers(0, 3).flatmap(
        lambda i: st.none() if i == 0 else PICKS)


def _child_value(tables: Sequence[TableSpec], child: ChildSpec) -> st.SearchStrategy[tuple[str, int | None]]:
    """A value: of the child's pool three times in four."""
    literals = tables[child.table].column(child.value).type.literals
    pooled = st.integers(0, 3).flatmap(lambda i: literals if i == 0 or not child.pool else st.sampled_from(child.pool))
    return st.tuples(pooled, _refer(child))


@st.composite
def child_steps(draw: st.DrawFn, tables: Sequence[TableSpec], children: Sequence[ChildSpec]) -> Any:
    index = draw(st.integers(0, len(children) - 1))
    child = children[index]
    kind = draw(st.sampled_from(CHILD_KINDS))
    if kind == "note" and child.note is None:
        kind = "add"
    if kind == "add":
        value, refer = draw(_child_value(tables, child))
        note = draw(_value(tables[child.table].column(child.note))) if child.note else "NULL"
        return AddValue(index, draw(PICKS), value, refer, note)
    if kind == "remove":
        return RemoveValue(index, draw(PICKS))
    if kind == "change":
        value, refer = draw(_child_value(tables, child))
        return ChangeValue(index, draw(PICKS), value, refer)
    if kind == "move":
        return MoveValue(index, draw(PICKS), draw(PICKS))
    if kind == "move_changed":
        value, refer = draw(_child_value(tables, child))
        return MoveValue(index, draw(PICKS), draw(PICKS), value, refer)
    if kind == "move_all":
        return MoveValues(index, draw(PICKS), draw(PICKS))
    if kind == "note":
        assert child.note is not None
        return ChangeNote(index, draw(st.none() | PICKS), draw(_value(tables[child.table].column(child.note))))
    if kind == "remove_values":
        return RemoveValues(index, draw(PICKS))
    return RemoveValues(index, None)


@st.composite
def _adds(draw: st.DrawFn, tables: Sequence[TableSpec], children: Sequence[ChildSpec],
          parent: int) -> tuple[tuple[int, str, int | None], ...]:
    mine = [i for i, c in enumerate(children) if c.parent == parent]
    if not mine:
        return ()
    adds = []
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.sampled_from(mine))
        adds.append((index, *draw(_child_value(tables, children[index]))))
    return tuple(adds)


@st.composite
def new_objects(draw: st.DrawFn, tables: Sequence[TableSpec], children: Sequence[ChildSpec], bases: int,
                allowed: Allowed) -> Any:
    index = draw(st.integers(0, bases - 1))
    values = tuple(draw(_value(c)) for c in tables[index].columns)
    return NewObject(index, values, draw(_adds(tables, children, index)), allowed.values_first and draw(st.booleans()))


@st.composite
def object_steps(draw: st.DrawFn, tables: Sequence[TableSpec], children: Sequence[ChildSpec],
                 column_references: Sequence[tuple[int, str, int]], bases: int, allowed: Allowed) -> Any:
    kind = draw(st.sampled_from(OBJECT_KINDS))
    if kind == "reference" and column_references:
        table, column, target = draw(st.sampled_from(column_references))
        return SetReference(table, draw(PICKS), column, target, draw(PICKS))
    if kind in ("new", "reference"):
        return draw(new_objects(tables, children, bases, allowed))
    index = draw(st.sampled_from(sorted({c.parent for c in children})))
    if kind == "rekey":
        key = tables[index].key_columns
        names = draw(st.lists(st.sampled_from([c.name for c in key]), min_size=1, max_size=len(key), unique=True))
        return RekeyObject(index, draw(PICKS), tuple((n, draw(_value(tables[index].column(n)))) for n in names),
                           allowed.values_first and draw(st.booleans()))
    children_first = draw(st.booleans())
    if kind == "delete":
        return DeleteObject(index, draw(PICKS), children_first)
    values = tuple(draw(_value(c)) for c in tables[index].value_columns)
    return ReplaceObject(index, draw(PICKS), children_first, values, draw(_adds(tables, children, index)))


@st.composite
def logical_steps(draw: st.DrawFn, tables: Sequence[TableSpec], children: Sequence[ChildSpec],
                  column_references: Sequence[tuple[int, str, int]], max_steps: int, allowed: Allowed) -> list[Any]:
    """A few new objects with values first, then anything: the generic DML on the parents (and
    the plain table), the children's, and the objects' with their children, alone or several in
    one transaction, and polls."""
    bases = len(tables) - len(children)
    single = st.one_of(dml_steps(tables[:bases]), child_steps(tables, children), child_steps(tables, children),
                       object_steps(tables, children, column_references, bases, allowed))
    together = st.lists(single, min_size=2, max_size=4).map(lambda s: Transaction(tuple(s)))
    step = st.one_of(single, together, polls())
    first = [draw(new_objects(tables, children, bases, allowed)) for _ in range(draw(st.integers(0, 6)))]
    return first + [draw(step) for _ in range(draw(st.integers(1, max_steps)))]


@st.composite
def logical_scenarios(draw: st.DrawFn, dialect: str, allowed: Allowed = Allowed(), max_steps: int = 20) -> Scenario:
    """A logical schema and steps, doing what is `allowed` (see `allowed`)."""
    tables, children, column_references = draw(logical_schemas(dialect, allowed))
    steps = draw(logical_steps(tables, children, column_references, max_steps, allowed))
    return Scenario(dialect, tables, tuple(steps), children, column_references)


# --- running -------------------------------------------------------------------------------------

Script = list[Any]
"""What ran, in order: a tuple of SQL statements per committed transaction, `Poll`s and
`Snapshot`s, and INSTALL where capture was installed after the first statements."""
INSTALL = "install"


MARIADB_SESSION = ("SET SESSION sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,ANSI_QUOTES,"
                   "NO_BACKSLASH_ESCAPES,NO_ENGINE_SUBSTITUTION', time_zone = '-05:30'")
"""A MariaDB changing session: identifiers in double quotes and a backslash that is only a
character, so that the generated SQL means on MariaDB what it means elsewhere; strict, so that
a value the column cannot hold fails rather than being cut; and a time zone that is not the
publisher's (a TIMESTAMP's text depends on it)."""


class Runner:
    """Runs DML on a test database: unqualified names resolve in its schema (PostgreSQL) or
    database (MariaDB, in MARIADB_SESSION's settings)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL search_path TO {identifier(self.db.schema)}")
            elif self.db.dialect == "mariadb":  # session settings, put back before the connection is pooled
                conn.exec_driver_sql(f"USE `{self.db.schema}`")
                conn.exec_driver_sql(MARIADB_SESSION)
                try:
                    yield conn
                finally:
                    conn.exec_driver_sql("SET SESSION sql_mode = DEFAULT, time_zone = DEFAULT")
                return
            else:  # a child table's ON DELETE/UPDATE CASCADE; a no-op unless before the transaction's BEGIN
                conn.exec_driver_sql("PRAGMA foreign_keys = ON")
            yield conn

    @staticmethod
    def run(conn: Connection, statement: str) -> Any:
        return conn.execution_options(no_parameters=True).exec_driver_sql(statement)

    def key_literals(self, conn: Connection, table: TableSpec) -> list[tuple[str, ...]]:
        """The key of every row, as literals that select it again, in a stable order."""
        if self.db.dialect == "sqlite":
            shown = ", ".join(f"quote({identifier(c.name)})" for c in table.key_columns)
        elif self.db.dialect == "mariadb":
            shown = ", ".join(_mariadb_key_text(c) for c in table.key_columns)
        else:
            shown = ", ".join(f"{identifier(c.name)}::text" for c in table.key_columns)
        rows = self.run(conn, f"SELECT {shown} FROM {identifier(table.name)}").all()
        if self.db.dialect == "postgresql":
            rows = [tuple(_pg_key_literal(c, v) for c, v in zip(table.key_columns, row)) for row in rows]
        elif self.db.dialect == "mariadb":
            rows = [tuple(_mariadb_key_literal(c, v) for c, v in zip(table.key_columns, row)) for row in rows]
        return sorted(tuple(r) for r in rows)

    def exists(self, conn: Connection, table: TableSpec, key: Sequence[str], besides: Sequence[str] = ()) -> bool:
        where = _where(table, key)
        if besides:
            where += f" AND NOT ({_where(table, besides)})"
        return self.run(conn, f"SELECT count(*) FROM {identifier(table.name)} WHERE {where}").scalar_one() > 0


def _pg_key_literal(column: ColumnSpec, text: str) -> str:
    return text if column.type.ddl in ("integer", "smallint", "bigint") else cast(text, column.type.ddl)


MARIADB_UNQUOTED = ("INT", "BIGINT", "SMALLINT", "TINYINT", "BOOLEAN", "DECIMAL", "YEAR")


def _mariadb_key_text(column: ColumnSpec) -> str:
    """SQL for a text of a MariaDB key value from which `_mariadb_key_literal` makes a literal
    that selects it exactly: binary values in hex, a FLOAT with every digit of its double."""
    name = identifier(column.name)
    ddl = column.type.ddl
    if "BINARY" in ddl:
        return f"HEX({name})"
    if ddl == "FLOAT":
        return f"CAST(CAST({name} AS DOUBLE) AS CHAR)"
    return f"CAST({name} AS CHAR CHARACTER SET utf8mb4)"


def _mariadb_key_literal(column: ColumnSpec, text: str) -> str:
    ddl = column.type.ddl
    if "BINARY" in ddl:
        return f"X'{text}'"
    if ddl in ("FLOAT", "DOUBLE"):
        return text if "e" in text else text + "e0"
    if ddl.split("(")[0].split(" ")[0] in MARIADB_UNQUOTED:
        return text
    return quoted(text)


def _where(table: TableSpec, key: Sequence[str]) -> str:
    return " AND ".join(f"{identifier(c.name)} = {v}" for c, v in zip(table.key_columns, key))


def _insert(table: TableSpec, values: dict[str, str]) -> str:
    names = ", ".join(identifier(c.name) for c in table.columns)
    return f"INSERT INTO {identifier(table.name)} ({names}) VALUES ({', '.join(values[c.name] for c in table.columns)})"


def _set(changes: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{identifier(n)} = {v}" for n, v in changes)


class Execution:
    """Resolves a scenario's steps against the database as they run; `script` records what ran."""

    def __init__(self, runner: Runner, tables: Sequence[TableSpec], poll: Callable[[Poll | Snapshot], None],
                 children: Sequence[ChildSpec] = ()) -> None:
        self.runner = runner
        self.tables = tables
        self.poll = poll
        """Runs a Poll, or a Snapshot."""
        self.children = tuple(children)
        self.of_parent = {i: [c for c in self.children if c.parent == i] for i in range(len(tables))}
        self.deleted: dict[int, list[tuple[str, ...]]] = {i: [] for i in range(len(tables))}
        self.script: Script = []

    def step(self, step: Any) -> None:
        if isinstance(step, (Poll, Snapshot)):
            self.script.append(step)
            self.poll(step)
            return
        ran: list[str] = []
        with self.runner.transaction() as conn:
            for one in step.steps if isinstance(step, Transaction) else (step,):
                for statement in self.statements(conn, one):
                    self.runner.run(conn, statement)
                    ran.append(statement)
        if ran:
            self.script.append(tuple(ran))

    def _forget(self, index: int, key: tuple[str, ...]) -> None:
        if key not in self.deleted[index]:
            self.deleted[index].append(key)

    def statements(self, conn: Connection, step: Any) -> Iterator[str]:
        """The SQL of one step, each statement run before the next is chosen (a generator)."""
        logical = LOGICAL_STEPS.get(type(step))
        if logical is not None:
            yield from logical(self, conn, step)
        elif self.of_parent.get(step.table) and isinstance(step, (Delete, DeleteAll, Update)):
            yield from self._parent_step(conn, step)
        else:
            statement = self.statement(conn, step)
            if statement is not None:
                yield statement

    def statement(self, conn: Connection, step: Any) -> str | None:
        """The SQL of one step against the current rows, or None when it does not apply (no row to
        pick, or a key that would collide)."""
        table = self.tables[step.table]
        name = identifier(table.name)
        if isinstance(step, Insert):
            values = dict(zip((c.name for c in table.columns), step.values))
            key = tuple(values[c.name] for c in table.key_columns)
            return None if self.runner.exists(conn, table, key) else _insert(table, values)
        if isinstance(step, Reinsert):
            deleted = self.deleted[step.table]
            if not deleted:
                return None
            key = deleted[step.pick % len(deleted)]
            if self.runner.exists(conn, table, key):
                return None
            values = dict(zip((c.name for c in table.key_columns), key))
            values.update(zip((c.name for c in table.value_columns), step.values))
            return _insert(table, values)
        if isinstance(step, UpdateAll):
            return f"UPDATE {name} SET {_set(step.changes)}"
        if isinstance(step, DeleteAll):
            for key in self.runner.key_literals(conn, table):
                self._forget(step.table, key)
            return f"DELETE FROM {name}"
        rows = self.runner.key_literals(conn, table)
        if not rows:
            return None
        key = rows[step.pick % len(rows)]
        if isinstance(step, Delete):
            self._forget(step.table, key)
            return f"DELETE FROM {name} WHERE {_where(table, key)}"
        changes = dict(step.changes)
        new_key = tuple(changes.get(c.name, v) for c, v in zip(table.key_columns, key))
        if new_key != key:
            if self.runner.exists(conn, table, new_key, besides=key):
                return None
            self._forget(step.table, key)
        return f"UPDATE {name} SET {_set(step.changes)} WHERE {_where(table, key)}"

    # --- logical classes: parents with children, and the children's own DML ----------------------

    def _pick(self, conn: Connection, index: int, pick: int) -> tuple[str, ...] | None:
        rows = self.runner.key_literals(conn, self.tables[index])
        return rows[pick % len(rows)] if rows else None

    def _child_rows(self, conn: Connection, child: ChildSpec) -> list[tuple[tuple[str, ...], tuple[str, ...], str]]:
        """(key in the child's key order, links, value) of every child row."""
        table = self.tables[child.table]
        found = []
        for key in self.runner.key_literals(conn, table):
            row = dict(zip(table.key, key))
            found.append((key, tuple(row[n] for n in child.links), row[child.value]))
        return found

    def _child_key(self, child: ChildSpec, links: Sequence[str], value: str) -> tuple[str, ...]:
        row = dict(zip(child.links, links))
        row[child.value] = value
        return tuple(row[n] for n in self.tables[child.table].key)

    @staticmethod
    def _of(child: ChildSpec, links: Sequence[str]) -> str:
        return " AND ".join(f"{identifier(n)} = {v}" for n, v in zip(child.links, links))

    def _has_values(self, conn: Connection, child: ChildSpec, links: Sequence[str]) -> bool:
        table = identifier(self.tables[child.table].name)
        return self.runner.run(conn, f"SELECT count(*) FROM {table} WHERE {self._of(child, links)}").scalar_one() > 0

    def _reference(self, conn: Connection, child: ChildSpec, value: str, refer: int | None) -> str:
        if refer is None or child.references is None:
            return value
        key = self._pick(conn, child.references, refer)
        return value if key is None else key[0]

    def _add(self, conn: Connection, child: ChildSpec, links: Sequence[str], value: str,
             note: str = "NULL") -> Iterator[str]:
        table = self.tables[child.table]
        key = self._child_key(child, links, value)
        if self.runner.exists(conn, table, key):
            return
        values = dict(zip(table.key, key))
        if child.note is not None:
            values[child.note] = note
        yield _insert(table, values)

    def _remove_values(self, conn: Connection, child: ChildSpec, links: Sequence[str]) -> Iterator[str]:
        if self._has_values(conn, child, links):
            yield f"DELETE FROM {identifier(self.tables[child.table].name)} WHERE {self._of(child, links)}"

    def _delete_object(self, conn: Connection, index: int, key: tuple[str, ...], children_first: bool) -> Iterator[str]:
        """Delete a parent and its children: explicit deletes first, or the foreign keys'
        cascades (children without one: explicit deletes after the parent's)."""
        explicit = [c for c in self.of_parent[index] if children_first or not c.foreign_key]
        if children_first:
            for child in explicit:
                yield from self._remove_values(conn, child, key)
        self._forget(index, key)
        yield f"DELETE FROM {identifier(self.tables[index].name)} WHERE {_where(self.tables[index], key)}"
        if not children_first:
            for child in explicit:
                yield from self._remove_values(conn, child, key)

    def _held(self, conn: Connection, child: ChildSpec, key: Sequence[str]) -> bool:
        """Whether the child's values keep the parent from changing its key: a foreign key
        without ON UPDATE CASCADE holds them."""
        return child.foreign_key == "delete" and self._has_values(conn, child, key)

    def _parent_step(self, conn: Connection, step: Delete | DeleteAll | Update) -> Iterator[str]:
        """A generic step on a parent, its children kept attached: deleted with it (first,
        unless a cascade does it), moved with its key (by the cascade, or explicitly after it;
        not at all, when a foreign key without ON UPDATE CASCADE holds values to the old key)."""
        table = self.tables[step.table]
        children = self.of_parent[step.table]
        if isinstance(step, DeleteAll):
            for child in children:
                if not child.foreign_key and self._child_rows(conn, child):
                    yield f"DELETE FROM {identifier(self.tables[child.table].name)}"
            statement = self.statement(conn, step)
            assert statement is not None
            yield statement
            return
        key = self._pick(conn, step.table, step.pick)
        if key is None:
            return
        if isinstance(step, Delete):
            yield from self._delete_object(conn, step.table, key, True)
            return
        changes = dict(step.changes)
        new_key = tuple(changes.get(c.name, v) for c, v in zip(table.key_columns, key))
        moved = new_key != key or any(n in changes for n in table.key)
        if moved and any(self._held(conn, c, key) for c in children):
            return
        statement = self.statement(conn, step)
        if statement is None:
            return
        yield statement
        if new_key == key:
            return
        for child in children:
            if not child.foreign_key and self._has_values(conn, child, key):
                links = ", ".join(f"{identifier(n)} = {v}" for n, v in zip(child.links, new_key))
                yield f"UPDATE {identifier(self.tables[child.table].name)} SET {links} WHERE {self._of(child, key)}"

    def _add_value(self, conn: Connection, step: AddValue) -> Iterator[str]:
        child = self.children[step.child]
        parent = self._pick(conn, child.parent, step.parent)
        if parent is not None:
            yield from self._add(conn, child, parent, self._reference(conn, child, step.value, step.refer), step.note)

    def _remove_value(self, conn: Connection, step: RemoveValue) -> Iterator[str]:
        child = self.children[step.child]
        rows = self._child_rows(conn, child)
        if rows:
            table = self.tables[child.table]
            yield f"DELETE FROM {identifier(table.name)} WHERE {_where(table, rows[step.pick % len(rows)][0])}"

    def _change_value(self, conn: Connection, step: ChangeValue) -> Iterator[str]:
        child = self.children[step.child]
        table = self.tables[child.table]
        rows = self._child_rows(conn, child)
        if not rows:
            return
        key, links, _ = rows[step.pick % len(rows)]
        value = self._reference(conn, child, step.value, step.refer)
        if not self.runner.exists(conn, table, self._child_key(child, links, value), besides=key):
            yield f"UPDATE {identifier(table.name)} SET {_set([(child.value, value)])} WHERE {_where(table, key)}"

    def _move_value(self, conn: Connection, step: MoveValue) -> Iterator[str]:
        child = self.children[step.child]
        table = self.tables[child.table]
        rows = self._child_rows(conn, child)
        parent = self._pick(conn, child.parent, step.parent)
        if not rows or parent is None:
            return
        key, _, value = rows[step.pick % len(rows)]
        changes = list(zip(child.links, parent))
        if step.value is not None:
            value = self._reference(conn, child, step.value, step.refer)
            changes.append((child.value, value))
        if not self.runner.exists(conn, table, self._child_key(child, parent, value), besides=key):
            yield f"UPDATE {identifier(table.name)} SET {_set(changes)} WHERE {_where(table, key)}"

    def _move_values(self, conn: Connection, step: MoveValues) -> Iterator[str]:
        child = self.children[step.child]
        table = self.tables[child.table]
        source = self._pick(conn, child.parent, step.pick)
        target = self._pick(conn, child.parent, step.parent)
        if source is None or target is None or not self._has_values(conn, child, source):
            return
        for key, links, value in self._child_rows(conn, child):
            if links == source and self.runner.exists(conn, table, self._child_key(child, target, value), besides=key):
                return
        yield (f"UPDATE {identifier(table.name)} SET {_set(list(zip(child.links, target)))} "
               f"WHERE {self._of(child, source)}")

    def _change_note(self, conn: Connection, step: ChangeNote) -> Iterator[str]:
        child = self.children[step.child]
        table = self.tables[child.table]
        assert child.note is not None
        change = f"UPDATE {identifier(table.name)} SET {_set([(child.note, step.note)])}"
        if step.pick is None:
            yield change
            return
        rows = self._child_rows(conn, child)
        if rows:
            yield f"{change} WHERE {_where(table, rows[step.pick % len(rows)][0])}"

    def _remove_all_values(self, conn: Connection, step: RemoveValues) -> Iterator[str]:
        child = self.children[step.child]
        if step.parent is None:
            yield f"DELETE FROM {identifier(self.tables[child.table].name)}"
            return
        parent = self._pick(conn, child.parent, step.parent)
        if parent is not None:
            yield from self._remove_values(conn, child, parent)

    def _adds(self, conn: Connection, key: tuple[str, ...], adds: Sequence[tuple[int, str, int | None]]
              ) -> Iterator[str]:
        for index, value, refer in adds:
            child = self.children[index]
            yield from self._add(conn, child, key, self._reference(conn, child, value, refer))

    def _new_object(self, conn: Connection, step: NewObject) -> Iterator[str]:
        table = self.tables[step.table]
        values = dict(zip((c.name for c in table.columns), step.values))
        key = tuple(values[c.name] for c in table.key_columns)
        if self.runner.exists(conn, table, key):
            return
        first = [a for a in step.adds if step.values_first and not self.children[a[0]].foreign_key]
        yield from self._adds(conn, key, first)
        yield _insert(table, values)
        yield from self._adds(conn, key, [a for a in step.adds if a not in first])

    def _rekey_object(self, conn: Connection, step: RekeyObject) -> Iterator[str]:
        table = self.tables[step.table]
        key = self._pick(conn, step.table, step.pick)
        if key is None:
            return
        changes = dict(step.changes)
        new_key = tuple(changes.get(c.name, v) for c, v in zip(table.key_columns, key))
        children = self.of_parent[step.table]
        if new_key == key or self.runner.exists(conn, table, new_key, besides=key):
            return
        if any(self._held(conn, c, key) for c in children):
            return
        moves = [f"UPDATE {identifier(self.tables[c.table].name)} SET {_set(list(zip(c.links, new_key)))} "
                 f"WHERE {self._of(c, key)}" for c in children if not c.foreign_key and self._has_values(conn, c, key)]
        self._forget(step.table, key)
        yield from moves if step.values_first else ()
        yield f"UPDATE {identifier(table.name)} SET {_set(step.changes)} WHERE {_where(table, key)}"
        yield from () if step.values_first else moves

    def _delete(self, conn: Connection, step: DeleteObject) -> Iterator[str]:
        key = self._pick(conn, step.table, step.pick)
        if key is not None:
            yield from self._delete_object(conn, step.table, key, step.children_first)

    def _replace_object(self, conn: Connection, step: ReplaceObject) -> Iterator[str]:
        table = self.tables[step.table]
        key = self._pick(conn, step.table, step.pick)
        if key is None:
            return
        yield from self._delete_object(conn, step.table, key, step.children_first)
        values = dict(zip((c.name for c in table.key_columns), key))
        values.update(zip((c.name for c in table.value_columns), step.values))
        yield _insert(table, values)
        yield from self._adds(conn, key, step.adds)

    def _set_reference(self, conn: Connection, step: SetReference) -> Iterator[str]:
        table = self.tables[step.table]
        key = self._pick(conn, step.table, step.pick)
        value = self._pick(conn, step.target, step.refer)
        if key is not None and value is not None:
            yield f"UPDATE {identifier(table.name)} SET {_set([(step.column, value[0])])} WHERE {_where(table, key)}"


LOGICAL_STEPS: dict[type, Callable[[Execution, Connection, Any], Iterator[str]]] = {
    AddValue: Execution._add_value,
    RemoveValue: Execution._remove_value,
    ChangeValue: Execution._change_value,
    MoveValue: Execution._move_value,
    MoveValues: Execution._move_values,
    ChangeNote: Execution._change_note,
    RemoveValues: Execution._remove_all_values,
    NewObject: Execution._new_object,
    RekeyObject: Execution._rekey_object,
    DeleteObject: Execution._delete,
    ReplaceObject: Execution._replace_object,
    SetReference: Execution._set_reference,
}


# --- a whole case: schema, capture, script, drain, verification --------------------------------

OTHER_USER = "publisher_app"
"""A user no test database logs in as, so that trigger-logged rows on PostgreSQL are not loopback."""
DRAIN = Poll(query_limit=10_000, batch_size=128)
DRAIN_CYCLES = 5
REPORT_LINES = 60
SCRATCH = Path("/dev/shm")
"""Where an example's SQLite file and documents go when the machine has it: in memory, a
commit costs no fsync, and examples run several times faster."""


@contextmanager
def fresh_database(dialect: str, folder: Path) -> Iterator[Any]:
    """A database of its own for one example: a SQLite file, a PostgreSQL schema or a MariaDB database."""
    from conftest import open_database

    databases = open_database(dialect, folder)
    db = next(databases)
    try:
        yield db
    finally:
        for _ in databases:
            pass


@dataclass
class Outcome:
    """What a case ended with; `report()` is the reproduction a failure prints."""

    dialect: str
    style: str
    path: str
    ddl: list[str]
    script: Script
    differences: list[Any]
    pending: int
    events: list[tuple]
    documents: list[str]
    classes: Mapping[str, Any] | None = None
    rejected: int = 0
    """Events left E (a value that cannot be published)."""

    @property
    def ok(self) -> bool:
        return not self.differences and not self.pending

    def report(self) -> str:
        lines = [case_text(self.dialect, self.style, self.path, self.ddl, self.script, self.classes)]
        lines += [f"after draining: {self.pending} event(s) still N, {self.rejected} E; differences:"]
        lines += [f"  {d}" for d in self.differences] or ["  none"]
        lines.append("event log (record_id, status, type, table, key, column, old, new):")
        lines += self._relevant([str(e) for e in self.events], [f"'{e[3]}', '{e[4]}'" for e in self.events])
        lines.append("published operations:")
        lines += self._relevant(self.documents, self.documents)
        return "\n".join(lines)

    def _relevant(self, lines: list[str], about: list[str]) -> list[str]:
        """Every line of a short listing; of a long one, those about the objects that differ."""
        if len(lines) <= REPORT_LINES:
            return [f"  {line}" for line in lines]
        keys = {d.association.split(",table=")[0] for d in self.differences}
        kept = [f"  {line}" for line, text in zip(lines, about) if any(k in text for k in keys)]
        return kept + [f"  ... and {len(lines) - len(kept)} more about other objects"]


def case_text(dialect: str, style: str, path: str, ddl: Sequence[str], script: Script,
              classes: Mapping[str, Any] | None = None) -> str:
    """The case as Python, ready to paste into a regression test."""
    lines = [f"{dialect}, style={style!r}, path={path!r}"]
    if classes:
        lines += ["classes = {"] + [f"    {name!r}: {cls!r}," for name, cls in classes.items()] + ["}"]
    lines.append("ddl = [")
    lines += [f"    {s!r}," for s in ddl]
    lines += ["]", "script = ["]
    for item in script:
        if isinstance(item, (Poll, Snapshot)) or item == INSTALL:
            lines.append(f"    {item!r},")
        else:
            lines.append("    (" + "".join(f"{s!r}, " for s in item).rstrip() + "),")
    return "\n".join([*lines, "]"])


def make_harness(spark: Any, db: Any, folder: Path, path: str, classes: Mapping[str, Any] | None = None) -> Any:
    from harness import Harness

    h = Harness(spark, db, folder, user=OTHER_USER, path=path, tables=())
    if classes:
        h.config = dataclasses.replace(h.config, classes=dict(classes))
    return h


def install(h: Any, ddl: Sequence[str], tables: Sequence[str], style: str) -> None:
    runner = Runner(h.db)
    with runner.transaction() as conn:
        for statement in ddl:
            runner.run(conn, statement)
    h.install(*tables, style=style)


def poll_with(h: Any, poll: Poll | Snapshot) -> None:
    """A cycle, or a snapshot (whose events later cycles publish)."""
    if isinstance(poll, Snapshot):
        from publisher.snapshots.snapshot import snapshot, snapshot_directly

        if not poll.direct:
            snapshot(h.config, h.engine, chunk_rows=poll.chunk_rows)
        elif poll.ranges:
            snapshot_directly(h.config, h.engine, chunk_rows=poll.chunk_rows, spark=lambda: h.spark, parallel_rows=1)
        else:
            snapshot_directly(h.config, h.engine, chunk_rows=poll.chunk_rows)
        return
    h.reconfigure(query_limit=poll.query_limit, batch_size=poll.batch_size)
    h.poll()


def finish(h: Any, style: str, path: str, ddl: list[str], script: Script,
           classes: Mapping[str, Any] | None = None) -> Outcome:
    """Drain the event log, then compare the consumer mirror with the tables."""
    from publisher.service.mirror import verify

    h.output.mkdir(parents=True, exist_ok=True)  # no document at all is a valid outcome too
    for _ in range(DRAIN_CYCLES):
        if "N" not in h.statuses().values():
            break
        poll_with(h, DRAIN)
    statuses = list(h.statuses().values())
    pending, rejected = statuses.count("N"), statuses.count("E")
    differences = verify(h.config, h.engine)
    failed = differences or pending or rejected
    return Outcome(h.dialect, style, path, ddl, script, differences, pending,
                   _event_log(h) if failed else [], _operations(h) if failed else [], classes, rejected)


def run_script(spark: Any, db: Any, folder: Path, path: str, style: str, ddl: Sequence[str],
               tables: Sequence[str], script: Script, classes: Mapping[str, Any] | None = None) -> Outcome:
    """Replay a recorded case exactly (a regression test of a failure the property test found);
    `tables`: those to install capture on (a logical class's parent installs its children)."""
    h = make_harness(spark, db, folder, path, classes)
    install(h, ddl, () if INSTALL in script else tables, style)
    runner = Runner(db)
    for item in script:
        if item == INSTALL:
            h.install(*tables, style=style)
            continue
        if isinstance(item, (Poll, Snapshot)):
            poll_with(h, item)
            continue
        with runner.transaction() as conn:
            for statement in item:
                runner.run(conn, statement)
    return finish(h, style, path, list(ddl), list(script), classes)


def run_scenario(spark: Any, scenario: Scenario, style: str, path: str, root: Path) -> Outcome:
    """Create the scenario's tables in a database of their own, run its steps through the real
    triggers with polls in between, drain and verify."""
    folder = Path(tempfile.mkdtemp(dir=SCRATCH if SCRATCH.is_dir() else root))
    try:
        with fresh_database(scenario.dialect, folder) as db:
            classes = scenario.classes()
            h = make_harness(spark, db, folder, path, classes)
            ddl = [t.ddl() for t in scenario.tables]
            install(h, ddl, () if scenario.before_install else scenario.published, style)
            execution = Execution(Runner(db), scenario.tables, lambda poll: poll_with(h, poll), scenario.children)
            try:
                for index, step in enumerate(scenario.steps):
                    if index == scenario.before_install and index:
                        h.install(*scenario.published, style=style)
                        execution.script.append(INSTALL)
                    execution.step(step)
                return finish(h, style, path, ddl, execution.script, classes)
            except Exception as exc:
                exc.add_note("while running, or draining after, the last step of:\n"
                             + case_text(scenario.dialect, style, path, ddl, execution.script, classes))
                raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _event_log(h: Any) -> list[tuple]:
    c = h.config.event_log.columns
    return h.db.rows(
        f"SELECT {c.record_id}, {c.status}, {c.event_type}, {c.table_name}, {c.table_key}, {c.column_name}, "
        f"{c.old_value}, {c.new_value} FROM {h.table(h.config.event_log.table)} ORDER BY {c.record_id}"
    )


def _operations(h: Any) -> list[str]:
    found = []
    for path in sorted(h.output.glob("*.xml")):
        for op in etree.parse(str(path)).getroot().find("input"):
            found.append(f"{path.name}: " + etree.tostring(op, encoding="unicode").strip().replace("\n", " "))
    return found
