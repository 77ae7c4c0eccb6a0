"""Whatever the migrations and whenever they come, the consumer ends up with the tables.

A table keyed by one or two columns of the generated key types (schemas.TYPES) takes random
inserts, updates and deletes, polls at random moments, and migrations among them: a column added
(with a default or without), dropped, renamed, or retyped from INTEGER to a decimal that spells
its values anew (PostgreSQL and MariaDB; SQLite has no ALTER COLUMN). They run through
`publisher migrate` (SQLite, MariaDB, PostgreSQL) or, on PostgreSQL, as the application's own
tool runs them (its event trigger follows; the cycle that makes the capture anew publishes the
rows again). In both capture styles. After a drain, `verify` finds no difference, the values of
the columns dropped or renamed away aside (retired), and no application statement failed.

CI runs a fixed set of examples (derandomized); PUBLISHER_PROPERTY_EXAMPLES=n hunts (tests/hunting.py).
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hunting import HUNT, property_settings
from hypothesis import given, settings
from hypothesis import strategies as st
from schemas import SCRATCH, TYPES, Runner, fresh_database, identifier, quoted

from publisher.capture.install import install_capture
from publisher.config import STATUS_MODE, Config, DatabaseConfig, OutputConfig, PublisherSettings, RetiredColumns
from publisher.database import connect
from publisher.pipeline.cycle import run_cycle
from publisher.service.migrate import migrate, resync_owed
from publisher.service.mirror import check

DECIMAL = {"postgresql": "NUMERIC(14,3)", "mariadb": "DECIMAL(14,3)"}


@dataclass(frozen=True)
class Write:
    """An insert of the key-th key (or, if it exists, an update of one column, or a delete)."""

    key: int
    action: str
    column: int
    value: int


@dataclass(frozen=True)
class Migrate:
    op: str
    """add, add_default, drop, rename, retype"""
    column: int


@dataclass(frozen=True)
class Poll:
    pass


@dataclass(frozen=True)
class Case:
    dialect: str
    keys: tuple[tuple[str, str], ...]
    """(name, type DDL) of the key columns."""
    pool: tuple[tuple[str, ...], ...]
    """Key literals, distinct."""
    steps: tuple[Write | Migrate | Poll, ...]
    retired: str = "keep"
    """`retired_columns`: with "remove", a retired value left downstream is a difference."""


@st.composite
def cases(draw: st.DrawFn, dialect: str) -> Case:
    types = [t for t in TYPES[dialect] if t.key]
    key_types = draw(st.lists(st.sampled_from(types), min_size=1, max_size=2))
    keys = tuple((f"k{i}", t.ddl) for i, t in enumerate(key_types))
    pool = draw(st.lists(st.tuples(*(t.literals for t in key_types)), min_size=1, max_size=4,
                         unique_by=lambda literals: tuple(literals)))
    ops = ["add", "add_default", "drop", "rename"] + (["retype"] if dialect in DECIMAL else [])
    step = st.one_of(
        st.builds(Write, st.integers(0, len(pool) - 1), st.sampled_from(["write", "write", "delete"]),
                  st.integers(0, 5), st.integers(-10**6, 10**6)),
        st.builds(Migrate, st.sampled_from(ops), st.integers(0, 5)),
        st.just(Poll()),
    )
    return Case(dialect, keys, tuple(pool), tuple(draw(st.lists(step, min_size=1, max_size=14))),
                draw(st.sampled_from(["keep", "remove"])))


class Model:
    """The table's value columns as the migrations left them: name → INTEGER-like or text."""

    def __init__(self) -> None:
        self.columns: dict[str, str] = {"a": "text", "b": "int"}
        self.made = 0

    def fresh(self) -> str:
        self.made += 1
        return f"c{self.made}"

    def pick(self, index: int, kind: str | None = None) -> str | None:
        names = [name for name, k in self.columns.items() if kind is None or k == kind]
        return names[index % len(names)] if names else None


def literal(kind: str, value: int) -> str:
    return str(value) if kind != "text" else quoted(f"t{value}")


def run_case(spark, case: Case, style: str, plain: bool, root: Path) -> tuple[list[str], list[str], dict]:  # type: ignore[no-untyped-def]
    """The case run; (differences, application failures, retired values) and its script."""
    folder = Path(tempfile.mkdtemp(dir=SCRATCH if SCRATCH.is_dir() else root))
    script: list[str] = []
    failures: list[str] = []
    try:
        with fresh_database(case.dialect, folder) as db:
            runner = Runner(db)
            columns = [f"{identifier(name)} {ddl} NOT NULL" for name, ddl in case.keys] + ["a VARCHAR(20)", "b INTEGER"]
            key = ", ".join(identifier(name) for name, _ in case.keys)
            with runner.transaction() as conn:
                runner.run(conn, f"CREATE TABLE usr ({', '.join(columns)}, PRIMARY KEY ({key}))")
            config = Config(database=DatabaseConfig(url=db.url, schema=db.schema, user="publisher_app"),
                            publisher=PublisherSettings(batch_size=7,
                                                        retired_columns=RetiredColumns(case.retired)),
                            output=OutputConfig(directory=str(folder / "out")))
            engine = connect(config)
            install_capture(config, engine, ["usr"], style)  # type: ignore[arg-type]
            model = Model()
            table = db.qualified("usr")

            def poll() -> None:
                run_cycle(spark, engine, config)
                resync_owed(config, engine, STATUS_MODE)

            for step in case.steps:
                if isinstance(step, Poll):
                    script.append("-- poll")
                    poll()
                elif isinstance(step, Migrate):
                    statement = migration(step, model, table, case.dialect)
                    if statement is None:
                        continue
                    script.append(statement)
                    if plain:
                        db.execute(statement)
                    else:
                        migrate(config, statement)
                else:
                    write(runner, case, step, model, script, failures)
            for _ in range(10):
                polled = run_cycle(spark, engine, config)
                resync_owed(config, engine, STATUS_MODE)
                if polled.idle and not polled.reshaped:  # a reshaped cycle logged its resync's events
                    break
            (folder / "out").mkdir(exist_ok=True)  # no document yet: a consumer that holds nothing
            result = check(config, engine)
            engine.dispose()
            return [str(d) for d in result.differences], failures, {"script": script, "retired": result.retired}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def migration(step: Migrate, model: Model, table: str, dialect: str) -> str | None:
    """The DDL of a migration step on the model's columns, the model updated; None if none applies."""
    if step.op in ("add", "add_default"):
        name = model.fresh()
        kind = "int" if step.column % 2 else "text"
        model.columns[name] = kind
        default = f" DEFAULT {literal(kind, step.column)}" if step.op == "add_default" else ""
        return f"ALTER TABLE {table} ADD COLUMN {name} {'INTEGER' if kind == 'int' else 'VARCHAR(20)'}{default}"
    if step.op == "drop":
        name = model.pick(step.column)
        if name is None:
            return None
        del model.columns[name]
        return f"ALTER TABLE {table} DROP COLUMN {name}"
    if step.op == "rename":
        name = model.pick(step.column)
        if name is None:
            return None
        new = model.fresh()
        model.columns[new] = model.columns.pop(name)
        return f"ALTER TABLE {table} RENAME COLUMN {name} TO {new}"
    name = model.pick(step.column, "int")
    if name is None:
        return None
    model.columns[name] = "decimal"
    if dialect == "postgresql":
        return f"ALTER TABLE {table} ALTER COLUMN {name} TYPE {DECIMAL[dialect]}"
    return f"ALTER TABLE {table} MODIFY {name} {DECIMAL[dialect]}"


def write(runner: Runner, case: Case, step: Write, model: Model, script: list[str], failures: list[str]) -> None:
    """The step's statement in a transaction of its own; any failure is the application's."""
    names = [name for name, _ in case.keys]
    literals = case.pool[step.key]
    where = " AND ".join(f"{identifier(n)} = {v}" for n, v in zip(names, literals, strict=True))
    with runner.transaction() as conn:
        exists = runner.run(conn, f"SELECT COUNT(*) FROM usr WHERE {where}").scalar_one() > 0
    column = model.pick(step.column)
    if not exists:
        values = [*literals] + ([literal(model.columns[column], step.value)] if column else [])
        listed = [identifier(n) for n in names] + ([column] if column else [])
        statement = f"INSERT INTO usr ({', '.join(listed)}) VALUES ({', '.join(values)})"
    elif step.action == "delete":
        statement = f"DELETE FROM usr WHERE {where}"
    elif column is not None:
        statement = f"UPDATE usr SET {column} = {literal(model.columns[column], step.value)} WHERE {where}"
    else:
        return
    script.append(statement)
    try:
        with runner.transaction() as conn:
            runner.run(conn, statement)
    except Exception as exc:
        failures.append(f"{statement}: {exc}")


WAYS = [("sqlite", False), ("mariadb", False), ("postgresql", False), ("postgresql", True)]


@pytest.mark.parametrize("style", ["field", "row"])
@pytest.mark.parametrize(("dialect", "plain"), WAYS, ids=[f"{d}-{'plain' if p else 'migrate'}" for d, p in WAYS])
def test_the_consumer_ends_with_the_tables_whatever_the_migrations(spark, dialect, plain, style, tmp_path):
    @settings(**property_settings(HUNT or 6))
    @given(cases(dialect))
    def check_case(case: Case) -> None:
        differences, failures, found = run_case(spark, case, style, plain, tmp_path)
        shown = "\n".join(found["script"])
        assert failures == [], f"{failures}\n{shown}"
        assert differences == [], f"{differences}\n{case.keys}\n{shown}"
        assert case.retired == "keep" or found["retired"] == {}, f"{found['retired']}\n{shown}"

    check_case()


@pytest.mark.parametrize(("dialect", "plain"), WAYS, ids=[f"{d}-{'plain' if p else 'migrate'}" for d, p in WAYS])
def test_an_object_whose_pending_insert_named_only_a_dropped_column_is_published(spark, dialect, plain, tmp_path):
    """The property's find, shrunk: a row inserted with a value of a column dropped before its
    events were published. A dropped column the consumer keeps no value of publishes nothing
    again, so the insert's event for it still says the object was inserted."""
    case = Case(dialect, (("k0", "VARCHAR(12)"),), (("''",),),
                (Write(0, "write", 0, 0), Write(0, "write", 0, 0), Migrate("drop", 0)))
    differences, failures, found = run_case(spark, case, "field", plain, tmp_path)
    assert (failures, differences) == ([], []), "\n".join(found["script"])


@pytest.mark.parametrize(("dialect", "plain"), WAYS, ids=[f"{d}-{'plain' if p else 'migrate'}" for d, p in WAYS])
def test_a_row_query_back_in_the_cycle_does_not_beat_the_removal_of_a_retired_column(spark, dialect, plain,
                                                                                     tmp_path):
    """The property's find, shrunk: row style, `retired_columns = "remove"`, an update logged
    before a drop and one after it publish in the cycle of the drop's removals; the row
    query-back sets the columns the table has now, so the removal of the dropped one stands."""
    case = Case(dialect, (("k0", "INT" if dialect == "mariadb" else "integer"),), (("0",),),
                (Write(0, "write", 0, 0), Poll(), Write(0, "write", 0, 0), Migrate("drop", 0),
                 Write(0, "write", 1, 0)), "remove")
    differences, failures, found = run_case(spark, case, "row", plain, tmp_path)
    assert (failures, differences, found["retired"]) == ([], [], {}), "\n".join(found["script"])


def test_a_column_added_by_the_last_statement_is_published_by_the_cycle_after_the_reshaping_one(spark, tmp_path):
    """The property's find, shrunk (PostgreSQL, plain DDL): nothing written after the ADD, so the
    cycle that finds the table reshaped has no event; the resync's come in the next."""
    case = Case("postgresql", (("k0", "integer"),), (("0",),),
                (Write(0, "write", 0, 0), Poll(), Migrate("add_default", 0)))
    differences, failures, found = run_case(spark, case, "field", True, tmp_path)
    assert (failures, differences) == ([], []), "\n".join(found["script"])
