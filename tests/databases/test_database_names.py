"""A database's name appears in code only in its own folder (`publisher/databases/<name>/`) and in
the registry (`publisher/dialects/__init__.py`): everywhere else the code asks the dialect, so a
new database is a folder and a registration, not a hunt through the package.

The check reads every module's tokens: a name (an identifier, an imported driver) or a string
that holds a database's name fails, naming its file and line. Comments and docstrings (every
string that stands alone as a statement, attribute docstrings too) may go on explaining which
database does what."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from publisher.dialects import _FAMILIES

PACKAGE = Path(__file__).resolve().parents[2] / "publisher"
DATABASE_NAMES = re.compile(r"postgres|mariadb|mysql|sqlite|psycopg", re.IGNORECASE)
"""The databases' names and their drivers' (pymysql and sqlite3 hold a name already)."""
OWNERS = ("publisher/databases/", "publisher/dialects/__init__.py")
"""Where a database's name belongs: its folder, and the registry that names the folders."""
HELP_PROSE = ("publisher/workshop/", "publisher/cli/bench_arguments.py")
"""`publisher bench` and `publisher soak`, whose help and reports name the databases they drive in
prose ("on PostgreSQL"): `tests/workshop/test_workshop_names.py` holds their code to this rule,
prose aside."""


def _standalone_strings(source: str) -> set[tuple[int, int]]:
    """Where each string that is a statement of its own begins: docstrings, of modules, classes,
    functions and attributes."""
    return {(node.value.lineno, node.value.col_offset) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def names_in_code(source: str) -> list[tuple[int, str]]:
    """(line, token) of each name or string of the code that holds a database's name."""
    docstrings = _standalone_strings(source)
    return [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type in (tokenize.NAME, tokenize.STRING) and token.start not in docstrings
            and DATABASE_NAMES.search(token.string)]


def test_no_module_outside_the_database_folders_and_the_registry_names_a_database():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if relative.startswith(OWNERS + HELP_PROSE):
            continue
        found += [f"{relative}:{line}: {token[:80]}" for line, token in names_in_code(path.read_text(encoding="utf-8"))]
    assert found == [], "ask the dialect (publisher.dialects.dialect_of), or move the code to the database's folder"


@pytest.mark.parametrize("name", sorted(_FAMILIES))
def test_every_name_the_registry_knows_is_looked_for(name):
    assert DATABASE_NAMES.search(name)


def test_names_and_strings_are_found_comments_and_docstrings_are_not():
    source = (
        '"""Module docstring: SQLite."""\n'
        "import psycopg  # PostgreSQL's driver\n"
        "LIMIT = 1\n"
        '"""An attribute docstring: MariaDB."""\n'
        "def f(engine):\n"
        '    """Docstring: MySQL."""\n'
        "    return engine.dialect.name == 'sqlite' or f\"on {engine} (MariaDB)\"\n"
        "mysql_boolean = True\n"
    )
    assert names_in_code(source) == [(2, "psycopg"), (7, "'sqlite'"), (7, 'f"on {engine} (MariaDB)"'),
                                      (8, "mysql_boolean")]
