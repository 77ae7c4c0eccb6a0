"""Each database's differences live in its folder, `publisher/databases/<name>/`: no other module
branches on a dialect's name, and a database the publisher does not speak fails at start."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from publisher.config import Config, ConfigError, DatabaseConfig
from publisher.database import connect
from publisher.dialects import Dialect, UnknownDialectError, dialect_of

PACKAGE = Path(__file__).resolve().parents[2] / "publisher"
NAMES = frozenset({"postgresql", "postgres", "sqlite", "mysql", "mariadb"})
BRANCHING_CALLS = frozenset({"is_mysql", "is_sqlite", "is_postgresql"})

def _names_a_dialect(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_dialect(e) for e in node.elts)
    return False


def dialect_branches(source: str) -> list[int]:
    """Lines where code compares something with a dialect's name, or asks `is_mysql` and the
    like: the branches a new database would have to find."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_dialect(n) for n in (node.left, *node.comparators)):
            found.append(node.lineno)
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in BRANCHING_CALLS:
                found.append(node.lineno)
    return sorted(found)


def _branches_outside_dialects() -> dict[str, list[int]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if relative.startswith(("publisher/dialects/", "publisher/databases/")):
            continue
        lines = dialect_branches(path.read_text(encoding="utf-8"))
        if lines:
            found[relative] = lines
    return found


def test_no_module_outside_dialects_branches_on_a_dialect_name():
    assert _branches_outside_dialects() == {}, "ask publisher.dialects.dialect_of(...) for the property instead"


@pytest.mark.parametrize("source, lines", [
    ("if engine.dialect.name == 'sqlite':\n    pass\n", [1]),
    ("x = 1 if d in ('mysql', 'mariadb') else 2\n", [1]),
    ("ok = is_mysql(name)\n", [1]),
    ("b = url.get_backend_name() != 'sqlite'\n", [1]),
    ("table = TEMPLATES[dialect]\nname = 'postgresql'\n", []),
])
def test_a_branch_on_a_dialect_name_is_found(source, lines):
    assert dialect_branches(source) == lines


@pytest.mark.parametrize("name", ["postgresql", "mysql", "mariadb", "sqlite"])
def test_every_dialect_the_publisher_speaks_has_its_module(name):
    dialect = dialect_of(name)
    assert isinstance(dialect, Dialect)
    assert type(dialect).__module__.startswith("publisher.databases.")


def test_mysql_and_mariadb_are_one_family():
    assert dialect_of("mysql") is dialect_of("mariadb")


def test_a_database_the_publisher_does_not_speak_fails_at_start(tmp_path):
    """A database SQLAlchemy can open (here a name registered for SQLite's own driver) but the
    publisher does not speak is refused when connecting, before anything runs, naming the URL."""
    from sqlalchemy.dialects import registry

    with pytest.raises(UnknownDialectError, match="does not speak 'oracle'"):
        dialect_of("oracle")
    registry.register("elsewhere", "sqlalchemy.dialects.sqlite.pysqlite", "SQLiteDialect_pysqlite")
    config = Config(database=DatabaseConfig(url=f"elsewhere:///{tmp_path / 'x.db'}"))
    with pytest.raises(ConfigError, match=r"database\.url: .*does not speak 'elsewhere': it speaks mariadb, mysql"):
        connect(config)
