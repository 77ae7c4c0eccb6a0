"""Generated schemas and DML for the consumer-mirror property test.

A scenario is 1-3 tables of a dialect (keys of every type the database offers, single and
compound, key-only link tables, non-key columns of every kind, NULLs) and a list of steps:
DML transactions interleaved with polls of random `query_limit` and `batch_size`.

Steps name rows abstractly (the n-th existing row, the n-th deleted key), so that they stay
meaningful while Hypothesis shrinks them; `execute` resolves them against the database and
records the SQL that really ran, as a `Script` that `run_script` replays exactly, for the
regression tests a failure is turned into. All values are SQL literals, so the printed
statements are the statements that ran, with no bound parameters left out.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
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


def texts(max_size: int) -> st.SearchStrategy[str]:
    """Text of the alphabet, sometimes with trailing spaces or empty."""
    base = st.text(TEXT_ALPHABET, max_size=max_size)
    padded = st.builds(lambda t, n: (t + " " * n)[:max_size], st.text(TEXT_ALPHABET, min_size=1, max_size=max_size),
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

TYPES = {"postgresql": POSTGRESQL_TYPES, "sqlite": SQLITE_TYPES}

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
        return f"CREATE TABLE {identifier(self.name)} ({', '.join(columns)}, PRIMARY KEY ({key}))"


@st.composite
def table_specs(draw: st.DrawFn, dialect: str, name: str) -> TableSpec:
    types = TYPES[dialect]
    key_types = [t for t in types if t.key]
    keys = draw(st.integers(1, 3))
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


@st.composite
def scenarios(draw: st.DrawFn, dialect: str, max_steps: int = 20) -> Scenario:
    tables = draw(schemas(dialect))
    return Scenario(dialect, tables, tuple(draw(steps(tables, max_steps))))


# --- running -------------------------------------------------------------------------------------

Script = list[Any]
"""What ran, in order: a tuple of SQL statements per committed transaction, and `Poll`s."""


class Runner:
    """Runs DML on a test database: unqualified names resolve in its schema (PostgreSQL)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL search_path TO {identifier(self.db.schema)}")
            yield conn

    @staticmethod
    def run(conn: Connection, statement: str) -> Any:
        return conn.execution_options(no_parameters=True).exec_driver_sql(statement)

    def key_literals(self, conn: Connection, table: TableSpec) -> list[tuple[str, ...]]:
        """The key of every row, as literals that select it again, in a stable order."""
        if self.db.dialect == "sqlite":
            shown = ", ".join(f"quote({identifier(c.name)})" for c in table.key_columns)
        else:
            shown = ", ".join(f"{identifier(c.name)}::text" for c in table.key_columns)
        rows = self.run(conn, f"SELECT {shown} FROM {identifier(table.name)}").all()
        if self.db.dialect == "postgresql":
            rows = [tuple(_pg_key_literal(c, v) for c, v in zip(table.key_columns, row)) for row in rows]
        return sorted(tuple(r) for r in rows)

    def exists(self, conn: Connection, table: TableSpec, key: Sequence[str], besides: Sequence[str] = ()) -> bool:
        where = _where(table, key)
        if besides:
            where += f" AND NOT ({_where(table, besides)})"
        return self.run(conn, f"SELECT count(*) FROM {identifier(table.name)} WHERE {where}").scalar_one() > 0


def _pg_key_literal(column: ColumnSpec, text: str) -> str:
    return text if column.type.ddl in ("integer", "smallint", "bigint") else cast(text, column.type.ddl)


def _where(table: TableSpec, key: Sequence[str]) -> str:
    return " AND ".join(f"{identifier(c.name)} = {v}" for c, v in zip(table.key_columns, key))


def _insert(table: TableSpec, values: dict[str, str]) -> str:
    names = ", ".join(identifier(c.name) for c in table.columns)
    return f"INSERT INTO {identifier(table.name)} ({names}) VALUES ({', '.join(values[c.name] for c in table.columns)})"


def _set(changes: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{identifier(n)} = {v}" for n, v in changes)


class Execution:
    """Resolves a scenario's steps against the database as they run; `script` records what ran."""

    def __init__(self, runner: Runner, tables: Sequence[TableSpec], poll: Callable[[Poll], None]) -> None:
        self.runner = runner
        self.tables = tables
        self.poll = poll
        self.deleted: dict[int, list[tuple[str, ...]]] = {i: [] for i in range(len(tables))}
        self.script: Script = []

    def step(self, step: Any) -> None:
        if isinstance(step, Poll):
            self.script.append(step)
            self.poll(step)
            return
        ran: list[str] = []
        with self.runner.transaction() as conn:
            for one in step.steps if isinstance(step, Transaction) else (step,):
                statement = self.statement(conn, one)
                if statement is not None:
                    self.runner.run(conn, statement)
                    ran.append(statement)
        if ran:
            self.script.append(tuple(ran))

    def _forget(self, index: int, key: tuple[str, ...]) -> None:
        if key not in self.deleted[index]:
            self.deleted[index].append(key)

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
    """A database of its own for one example: a SQLite file or a PostgreSQL schema."""
    from conftest import _postgresql, _sqlite

    databases = _sqlite(folder) if dialect == "sqlite" else _postgresql()
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

    @property
    def ok(self) -> bool:
        return not self.differences and not self.pending

    def report(self) -> str:
        lines = [case_text(self.dialect, self.style, self.path, self.ddl, self.script)]
        lines += [f"after draining: {self.pending} event(s) still N; differences:"]
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


def case_text(dialect: str, style: str, path: str, ddl: Sequence[str], script: Script) -> str:
    """The case as Python, ready to paste into a regression test."""
    lines = [f"{dialect}, style={style!r}, path={path!r}", "ddl = ["]
    lines += [f"    {s!r}," for s in ddl]
    lines += ["]", "script = ["]
    for item in script:
        if isinstance(item, Poll):
            lines.append(f"    {item!r},")
        else:
            lines.append("    (" + "".join(f"{s!r}, " for s in item).rstrip() + "),")
    return "\n".join([*lines, "]"])


def make_harness(spark: Any, db: Any, folder: Path, path: str) -> Any:
    from harness import Harness

    return Harness(spark, db, folder, user=OTHER_USER, path=path, tables=())


def install(h: Any, ddl: Sequence[str], tables: Sequence[str], style: str) -> None:
    runner = Runner(h.db)
    with runner.transaction() as conn:
        for statement in ddl:
            runner.run(conn, statement)
    h.install(*tables, style=style)


def poll_with(h: Any, poll: Poll) -> None:
    h.reconfigure(query_limit=poll.query_limit, batch_size=poll.batch_size)
    h.poll()


def finish(h: Any, style: str, path: str, ddl: list[str], script: Script) -> Outcome:
    """Drain the event log, then compare the consumer mirror with the tables."""
    from publisher.service.mirror import verify

    h.output.mkdir(parents=True, exist_ok=True)  # no document at all is a valid outcome too
    for _ in range(DRAIN_CYCLES):
        if "N" not in h.statuses().values():
            break
        poll_with(h, DRAIN)
    pending = sum(1 for s in h.statuses().values() if s == "N")
    differences = verify(h.config, h.engine)
    return Outcome(h.dialect, style, path, ddl, script, differences, pending,
                   _event_log(h) if differences or pending else [],
                   _operations(h) if differences or pending else [])


def run_script(spark: Any, db: Any, folder: Path, path: str, style: str, ddl: Sequence[str],
               tables: Sequence[str], script: Script) -> Outcome:
    """Replay a recorded case exactly (a regression test of a failure the property test found)."""
    h = make_harness(spark, db, folder, path)
    install(h, ddl, tables, style)
    runner = Runner(db)
    for item in script:
        if isinstance(item, Poll):
            poll_with(h, item)
            continue
        with runner.transaction() as conn:
            for statement in item:
                runner.run(conn, statement)
    return finish(h, style, path, list(ddl), list(script))


def run_scenario(spark: Any, scenario: Scenario, style: str, path: str, root: Path) -> Outcome:
    """Create the scenario's tables in a database of their own, run its steps through the real
    triggers with polls in between, drain and verify."""
    folder = Path(tempfile.mkdtemp(dir=SCRATCH if SCRATCH.is_dir() else root))
    try:
        with fresh_database(scenario.dialect, folder) as db:
            h = make_harness(spark, db, folder, path)
            ddl = [t.ddl() for t in scenario.tables]
            install(h, ddl, [t.name for t in scenario.tables], style)
            execution = Execution(Runner(db), scenario.tables, lambda poll: poll_with(h, poll))
            try:
                for step in scenario.steps:
                    execution.step(step)
                return finish(h, style, path, ddl, execution.script)
            except Exception as exc:
                exc.add_note("while running, or draining after, the last step of:\n"
                             + case_text(scenario.dialect, style, path, ddl, execution.script))
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
