"""Reflection kept while the catalog is unchanged (`dialects.reflection`): every change of a
table's shape moves the catalog's version, so the next reflection sees it; nothing else does,
so a running publisher's cycles stop asking the catalog the same questions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from harness import Harness
from sqlalchemy import event

from publisher.dialects import dialect_of
from publisher.dialects.reflection import catalog_read_once, forget, reflection

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
    with database.engine.connect() as conn:
        return dialect_of(database.engine).catalog_version(conn, database.schema)


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
    with database.engine.connect() as conn:
        here = dialect_of(database.engine).catalog_version(conn, database.schema)
        public = dialect_of(database.engine).catalog_version(conn, "public")
    assert here != public
    database.execute(f"ALTER TABLE {database.qualified('item')} ADD COLUMN extra INTEGER")
    with database.engine.connect() as conn:
        assert dialect_of(database.engine).catalog_version(conn, "public") == public


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


def _counting_versions(database) -> list[str]:
    asked: list[str] = []

    @event.listens_for(database.engine, "before_cursor_execute")
    def _asked(conn, cursor, statement, parameters, context, executemany):
        if "tbl_name, sql FROM sqlite_master" in statement or "string_agg(c.oid" in statement:
            asked.append(statement)
    return asked


@pytest.mark.parametrize("database", VERSIONED, indirect=True)
def test_within_a_cycles_plan_the_version_is_asked_once_and_again_after_the_publishers_own_ddl(database):
    _make_item(database)
    asked = _counting_versions(database)
    with catalog_read_once():
        assert _columns(database) == ["id", "name"]
        reflection(database.engine, database.schema).get_table_names(schema=database.schema)
        assert len(asked) == 1
        database.execute(f"ALTER TABLE {database.qualified('item')} ADD COLUMN extra INTEGER")
        assert _columns(database) == ["id", "name"]  # the catalog as the plan began
        forget(database.engine)
        assert _columns(database) == ["id", "name", "extra"]
        assert len(asked) == 2
    assert _columns(database) == ["id", "name", "extra"]
    assert len(asked) == 3


@pytest.mark.parametrize("database", VERSIONED, indirect=True)
def test_the_capture_the_publisher_installs_is_seen_by_the_same_plan(spark, database, tmp_path):
    h = Harness(spark, database, tmp_path, tables=())
    h.create_usr()
    with catalog_read_once():
        assert not reflection(h.engine, database.schema).has_table("event_log", schema=database.schema)
        h.install("usr")
        assert reflection(h.engine, database.schema).has_table("event_log", schema=database.schema)


def test_the_package_reflects_only_through_the_kept_reflection():
    """An inspector made elsewhere would ask the catalog every cycle again."""
    package = Path(__file__).resolve().parent.parent / "publisher"
    importing = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy") \
                    and any(alias.name == "inspect" for alias in node.names):
                importing.append(path.relative_to(package.parent).as_posix())
    assert importing == ["publisher/dialects/reflection.py"]
