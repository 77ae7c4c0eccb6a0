"""`publisher bench` and `publisher soak` name no database in their code: they find databases
through the registry (`Dialect.workshop`), and what one database needs lives in its folder,
`publisher/databases/<name>/workshop.py`.

Code is NAME and STRING tokens. Comments and docstrings may name a database, and so may prose in
a help text, spelled as prose spells it (PostgreSQL, MariaDB, SQLite); a string that spells one
as code does (the lower-case name a comparison, a URL or `--database` takes) fails, as does any
identifier that holds one.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from publisher.cli.parser import build_parser
from publisher.databases.workbench import Workbench
from publisher.dialects import families, named_class
from publisher.workshop.databases import databases, names

ROOT = Path(__file__).resolve().parents[2]
CHECKED = sorted((ROOT / "publisher" / "workshop").rglob("*.py")) + [ROOT / "publisher/cli/bench_arguments.py"]
TOOLS = ("psycopg", "pymysql", "pgbench")
"""Drivers and tools that belong to one database: no identifier holds them; prose may name them."""


def _names() -> tuple[str, ...]:
    """The registry's names, and the short name of a URL's scheme."""
    return tuple(sorted({"postgres", *(d.name for d in families()), *names()}))


def _prose_lines(source: str) -> set[int]:
    """The lines of docstrings: strings that stand as a statement of their own."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def database_names(source: str, words: tuple[str, ...], tools: tuple[str, ...] = TOOLS) -> list[str]:
    """`line: token` for each identifier that holds a database's name or tool (any case) and each
    string, not a docstring, that spells a database's name in lower case as code does."""
    identifier = re.compile("|".join(words + tools), re.IGNORECASE)
    spelled = re.compile(rf"(?<![A-Za-z])({'|'.join(words)})(?![A-Za-z])")
    strings = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    prose = _prose_lines(source)
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and identifier.search(token.string):
            found.append(f"{token.start[0]}: {token.string}")
        elif token.type in strings and token.start[0] not in prose and spelled.search(token.string):
            found.append(f"{token.start[0]}: {token.string[:60]}")
    return found


def test_the_workshop_names_no_database_in_its_code():
    words = _names()
    found = [f"{path.relative_to(ROOT)}:{hit}" for path in CHECKED
             for hit in database_names(path.read_text(encoding="utf-8"), words)]
    assert found == [], "ask the database's workshop (publisher/databases/<name>/workshop.py) instead"


def test_the_check_finds_a_name_in_code_and_leaves_prose_alone():
    source = '''"""Drives PostgreSQL and sqlite alike."""
# a comment on postgresql
def open_server(dialect):
    """A docstring may say mariadb."""
    help_text = "on PostgreSQL, a file on SQLite"
    if dialect == "sqlite":
        return PrivatePostgres(f"mysql://root@{dialect}")
    return is_mysql(help_text, "runs pgbench", parse_pgbench)
'''
    assert database_names(source, ("mariadb", "mysql", "postgres", "postgresql", "sqlite")) == [
        '6: "sqlite"', "7: PrivatePostgres", '7: f"mysql://root@{dialect}"', "8: is_mysql",
        "8: parse_pgbench"]


@pytest.mark.parametrize("family", [f for f in families() if f.workshop is not None], ids=lambda f: f.name)
def test_each_database_the_workshop_drives_is_a_workbench_that_bench_and_soak_offer(family):
    """A database added by half fails here: its workshop class missing, of the wrong kind, or its
    name not among the commands' choices."""
    workshop = named_class(str(family.workshop))
    assert issubclass(workshop, Workbench)
    assert f"publisher/databases/{workshop.name}/workshop.py".replace("/", ".")[:-3] == workshop.__module__
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("bench", "soak"):
        database = next(a for a in commands[command]._actions if a.dest == "database")
        assert workshop.name in database.choices


def test_every_database_the_workshop_drives_is_one_family_of_the_registry():
    assert len({d.name for d in databases()}) == len(databases()) == len(
        [f for f in families() if f.workshop is not None])
