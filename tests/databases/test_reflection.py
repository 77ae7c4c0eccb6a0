"""Reflection kept while the catalog is unchanged (`dialects.reflection`): every change of a
table's shape moves the catalog's version, so the next reflection sees it; nothing else does,
so a running publisher's cycles stop asking the catalog the same questions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from harness import Harness, drain

from publisher.databases.postgresql.dialect import VERSIONED_RELATIONS
from publisher.dialects import dialect_of
from publisher.dialects.reflection import reflection
from publisher.pipeline import planning

MIGRATIONS: dict[str, dict[str, list[str]]] = {
    "add a column": {"any": ["ALTER TABLE {t} ADD COLUMN extra INTEGER"]},
    "rename a column": {"any": ["ALTER TABLE {t} RENAME COLUMN name TO label"]},
    "drop a column": {"any": ["ALTER TABLE {t} DROP COLUMN name"]},
    "change a column's type": {"postgresql": ["ALTER TABLE {t} ALTER COLUMN name TYPE text"]},
    "let a column be NULL": {"postgresql": ["ALTER TABLE {t} ALTER COLUMN name DROP NOT NULL"]},
    "change a column's default": {"postgresql": ["ALTER TABLE {t} ALTER COLUMN name SET DEFAULT 'y'"]},
    "add a unique constraint": {"postgresql": ["ALTER TABLE {t} ADD CONSTRAINT u_name UNIQUE (name)"]},
    "create an index": {"any": ["CREATE INDEX i_name ON {t} (name)"]},
    "create a table": {"any": ["CREATE TABLE {s}other (id INTEGER PRIMARY KEY)"]},
    "drop a table": {"any": ["DROP TABLE {t}"]},
    "rename a table": {"any": ["ALTER TABLE {t} RENAME TO renamed"]},
    "create a view": {"any": ["CREATE VIEW {s}v AS SELECT id FROM {t}"]},
    "drop and create a table alike": {
        "any": ["DROP TABLE {t}", "CREATE TABLE {t} (id INTEGER PRIMARY KEY, name VARCHAR(20))"]},
    "swap the key": {
        "postgresql": ["ALTER TABLE {t} DROP CONSTRAINT item_pkey", "ALTER TABLE {t} ADD PRIMARY KEY (name)"]},
}
VERSIONED = ("sqlite", "postgresql")
"""The databases that say whether their catalog changed; MariaDB does not."""
CASES = [(dialect, migration) for migration, by in sorted(MIGRATIONS.items())
         for dialect in (VERSIONED if "any" in by else tuple(by))]


def _make_item(database) -> str:
    table = database.qualified("item")
    database.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT 'x')")
    return table


def _version(database) -> str | None:
    return dialect_of(database.engine).catalog_version(database.engine, database.schema)


def _statements(database, migration: str) -> list[str]:
    by_dialect = MIGRATIONS[migration]
    prefix = f"{database.schema}." if database.schema else ""
    statements = by_dialect.get(database.dialect, by_dialect.get("any", []))
    return [s.format(t=database.qualified("item"), s=prefix) for s in statements]


@pytest.mark.parametrize(("database", "migration"), CASES, indirect=["database"])
def test_every_migration_moves_the_catalog_version(database, migration):
    _make_item(database)
    before = _version(database)
    assert before is not None
    database.execute(*_statements(database, migration))
    assert _version(database) != before


def test_mariadb_says_nothing_of_its_catalog_so_each_reflection_asks_it(mariadb_database):
    _make_item(mariadb_database)
    assert _version(mariadb_database) is None
    first = reflection(mariadb_database.engine, mariadb_database.schema)
    assert reflection(mariadb_database.engine, mariadb_database.schema).info_cache is not first.info_cache


def _analyze(database, table: str) -> None:
    with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql({"sqlite": "ANALYZE", "mariadb": f"ANALYZE TABLE {table}"}.get(database.dialect,
                                                                                           f"ANALYZE {table}"))
        if database.dialect == "postgresql":
            conn.exec_driver_sql(f"VACUUM {table}")


def test_rows_statistics_and_vacuum_keep_the_catalog_version(database):
    table = _make_item(database)
    _analyze(database, table)  # SQLite's first ANALYZE creates its statistics table
    before = _version(database)
    database.execute(f"INSERT INTO {table} (id, name) VALUES (1, 'a'), (2, 'b')",
                     f"UPDATE {table} SET name = 'c' WHERE id = 1", f"DELETE FROM {table} WHERE id = 2")
    _analyze(database, table)
    assert _version(database) == before


def test_the_version_of_another_schema_is_its_own(postgresql_database):
    database = postgresql_database
    _make_item(database)
    here = dialect_of(database.engine).catalog_version(database.engine, database.schema)
    public = dialect_of(database.engine).catalog_version(database.engine, "public")
    assert here != public
    database.execute(f"ALTER TABLE {database.qualified('item')} ADD COLUMN extra INTEGER")
    assert dialect_of(database.engine).catalog_version(database.engine, "public") == public


def test_a_schema_too_large_for_a_cheap_version_is_reflected_anew_each_time(postgresql_database):
    database = postgresql_database
    _make_item(database)
    assert _version(database) is not None
    tables = -(-VERSIONED_RELATIONS // 2)  # a table and its key's index each
    database.execute(*(f"CREATE TABLE {database.qualified(f'more{n}')} (id INTEGER PRIMARY KEY)"
                       for n in range(tables)))
    assert _version(database) is None
    first = reflection(database.engine, database.schema)
    assert reflection(database.engine, database.schema).info_cache is not first.info_cache
    database.execute(f"ALTER TABLE {database.qualified('item')} ADD COLUMN extra INTEGER")
    assert _columns(database) == ["id", "name", "extra"]


def _columns(database) -> list[str]:
    return [c["name"] for c in reflection(database.engine, database.schema).get_columns("item", schema=database.schema)]


def test_reflection_keeps_its_answers_until_the_table_changes(database):
    _make_item(database)
    first = reflection(database.engine, database.schema)
    assert [c["name"] for c in first.get_columns("item", schema=database.schema)] == ["id", "name"]
    again = reflection(database.engine, database.schema)
    assert (again.info_cache is first.info_cache) == (database.dialect in VERSIONED)
    database.execute(f"ALTER TABLE {database.qualified('item')} ADD COLUMN extra INTEGER")
    assert _columns(database) == ["id", "name", "extra"]
    database.execute(f"ALTER TABLE {database.qualified('item')} RENAME COLUMN extra TO more")
    assert _columns(database) == ["id", "name", "more"]


def test_a_column_the_application_adds_while_a_cycle_plans_is_in_the_cycles_catalog(
        spark, postgresql_database, tmp_path, monkeypatch):
    """The plan reflects the capture's tables before it reads the window, and the catalog after:
    a column added and written between the two is in the window, so it must be in the catalog
    too, however recently the same tables were reflected."""
    h = Harness(spark, postgresql_database, tmp_path, user="publisher_app", tables=())
    item = h.table("item")
    h.db.execute(f"CREATE TABLE {item} (id INTEGER PRIMARY KEY, name TEXT)")
    h.install("item")
    h.db.execute(f"INSERT INTO {item} VALUES (1, 'a')")
    drain(h)
    h.db.execute(f"UPDATE {item} SET name = 'b' WHERE id = 1")
    planned = planning.plan_window
    migrated: list[bool] = []

    def migrating_first(*args, **kwargs):
        if not migrated:
            h.db.execute(f"ALTER TABLE {item} ADD COLUMN extra TEXT", f"UPDATE {item} SET extra = 'x' WHERE id = 1")
            migrated.append(True)
        return planned(*args, **kwargs)

    monkeypatch.setattr(planning, "plan_window", migrating_first)
    result = h.poll()
    assert migrated and result.events == 2
    assert h.rejects() == []
    added = [(attr.get("attr-name"), attr.findtext("add-value/value"))
             for op in h.published().operations for attr in op.iter("modify-attr")]
    assert ("extra", "x") in added


def test_the_package_reflects_only_through_the_kept_reflection():
    """An inspector made elsewhere would ask the catalog every cycle again."""
    package = Path(__file__).resolve().parents[2] / "publisher"
    importing = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy") \
                    and any(alias.name == "inspect" for alias in node.names):
                importing.append(path.relative_to(package.parent).as_posix())
    assert importing == ["publisher/dialects/reflection.py"]
