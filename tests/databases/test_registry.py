"""A database is whole or it fails here: the test walks the one registry of database families
(`publisher.dialects.families`) and names what a family lacks of what the guide
(`docs/guides/new-database.md`) lists: its folder `publisher/databases/<name>/` holding its
dialect class, the capture class, lock and visibility its dialect names and the SQL templates its
capture renders (`sql/`), its test fixtures in `tests/conftest.py` and its row in the guide's table
of databases."""
from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from publisher.capture.base import Capture, capture_class
from publisher.dialects import Dialect, UnknownDialectError, dialect_of, families, named_class
from publisher.locking.backends import Backend, lock_backend
from publisher.subscriptions.visibility import Visibility

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "new-database.md"
CONFTEST = ROOT / "tests" / "conftest.py"
DATABASES = "publisher.databases"


def rendered_templates(capture: type[Capture]) -> set[str]:
    """The templates the capture's own modules render by name (`render("event_log", …)`): those of
    its classes and of the capture modules they import (PostgreSQL's session settings, say)."""
    own = ("publisher.capture", DATABASES)
    modules = {inspect.getmodule(cls) for cls in capture.__mro__ if cls.__module__.startswith(own)}
    found = set()
    for module in list(modules):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(own):
                module = importlib.import_module(node.module or "")
                modules.add(module)
                modules |= {getattr(module, alias.name) for alias in node.names
                            if inspect.ismodule(getattr(module, alias.name, None))}
    for module in modules:
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "render"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
    return found


def conftest_names() -> tuple[set[str], str]:
    """The functions tests/conftest.py defines, and the databases its DIALECTS holds by default
    (`PUBLISHER_TEST_DIALECTS` unset), comma-separated."""
    tree = ast.parse(CONFTEST.read_text(encoding="utf-8"))
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    defaults = [node.args[1].value for node in ast.walk(tree) if isinstance(node, ast.Call) and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "PUBLISHER_TEST_DIALECTS"
                and isinstance(node.args[1], ast.Constant)]
    return functions, str(defaults[0]) if defaults else ""


def folder_of(dialect: Dialect) -> str | None:
    """The database folder the dialect's class is in (`publisher/databases/<folder>/dialect.py`)."""
    parts = type(dialect).__module__.split(".")
    return parts[2] if len(parts) == 4 and ".".join(parts[:2]) == DATABASES and parts[3] == "dialect" else None


def missing(dialect: Dialect, root: Path = ROOT, guide: Path = GUIDE) -> list[str]:
    """What the family lacks, each said so that the one adding it knows where to look."""
    family = f"database family {dialect.name!r} ({type(dialect).__name__})"
    gaps = []
    folder = folder_of(dialect)
    if folder is None:
        gaps.append(f"{family}: its dialect class is not publisher/databases/<name>/dialect.py's")
    try:
        capture = capture_class(dialect)
    except (AttributeError, ImportError, TypeError) as exc:
        return [*gaps, f"{family}: no capture class (Dialect.capture names a publisher.capture.base.Capture): {exc}"]
    name = capture.name
    inside = f"{DATABASES}.{name}."
    if folder is not None and name != folder:
        gaps.append(f"{family}: its capture's name {name!r} is not its folder's, {folder!r}")
    if not capture.__module__.startswith(inside):
        gaps.append(f"{family}: its capture {capture.__name__} is not in publisher/databases/{name}/")
    try:
        lock = lock_backend(dialect)
    except (ImportError, AttributeError, TypeError) as exc:
        gaps.append(f"{family}: no lock (Dialect.lock names a publisher.locking.backends.Backend): {exc}")
    else:
        if not lock.__module__.startswith((inside, "publisher.locking.")):
            gaps.append(f"{family}: its lock {lock.__name__} is neither the default nor in publisher/databases/{name}/")
    visibility = named_class(dialect.visibility)
    if not issubclass(visibility, Visibility):
        gaps.append(f"{family}: its visibility {dialect.visibility} is no {Visibility.__module__}.Visibility")
    elif visibility is not Visibility and not visibility.__module__.startswith(inside):
        gaps.append(f"{family}: its visibility {visibility.__name__} is neither the default nor in "
                    f"publisher/databases/{name}/")
    try:
        registered = dialect_of(name) is dialect
    except UnknownDialectError:
        registered = False
    if not registered:
        gaps.append(f"{family}: its capture's name {name!r} is no name of the family in publisher.dialects._FAMILIES")
    templates = root / "publisher" / "databases" / name / "sql"
    if capture.templates() != ROOT / "publisher" / "databases" / name / "sql":
        gaps.append(f"{family}: its capture {capture.__name__} reads its templates from {capture.templates()}")
    for template in sorted(rendered_templates(capture)):
        if not (templates / f"{template}.sql").is_file():
            gaps.append(f"{family}: its capture {capture.__name__} renders "
                        f"publisher/databases/{name}/sql/{template}.sql, which is missing")
    functions, defaults = conftest_names()
    for fixture in (f"_{name}", f"{name}_database"):
        if fixture not in functions:
            gaps.append(f"{family}: tests/conftest.py has no {fixture}() (the test database of {name!r})")
    if name not in defaults.split(","):
        gaps.append(f"{family}: {name!r} is not among the databases tests/conftest.py's DIALECTS runs by default")
    if not guide.is_file() or f"| `{name}` |" not in guide.read_text(encoding="utf-8"):
        gaps.append(f"{family}: no row `| `{name}` |` in the table of databases of {guide.relative_to(root)}")
    return gaps


@pytest.mark.parametrize("dialect", families(), ids=lambda d: d.name)
def test_every_database_family_is_whole(dialect):
    assert missing(dialect) == []


def test_every_database_folder_is_a_family_s():
    """A folder no family's dialect is in is a database removed by half, or misnamed."""
    folders = ROOT / "publisher" / "databases"
    names = {capture_class(dialect).name for dialect in families()}
    assert {path.name for path in folders.iterdir() if (path / "__init__.py").is_file()} == names


@pytest.mark.parametrize("dialect", families(), ids=lambda d: d.name)
def test_a_database_folder_s_package_imports_nothing(dialect):
    """Its `__init__` is a docstring alone, so the registry's loading the dialect pulls in
    nothing else of the database (its capture, its drivers)."""
    init = ROOT / "publisher" / "databases" / str(folder_of(dialect)) / "__init__.py"
    body = ast.parse(init.read_text(encoding="utf-8")).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def test_the_registry_loads_a_dialect_alone_and_once():
    """Asking for one database's dialect imports its dialect module and nothing else of the
    database folders; asking again gives the same instance."""
    program = ("import sys; from publisher.dialects import dialect_of; d = dialect_of('sqlite'); "
               "assert dialect_of('sqlite') is d; "
               f"print(sorted(m for m in sys.modules if m.startswith('{DATABASES}')))")
    loaded = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == str([DATABASES, f"{DATABASES}.sqlite", f"{DATABASES}.sqlite.dialect"])


@pytest.mark.parametrize("dialect", families(), ids=lambda d: d.name)
def test_every_template_of_a_folder_is_rendered(dialect):
    """A template its capture never renders is one left behind by a change, or misnamed."""
    capture = capture_class(dialect)
    kept = {path.stem for path in capture.templates().glob("*.sql")}
    assert kept - rendered_templates(capture) == set()


def test_each_family_names_its_own_capture_and_lock():
    captures = [capture_class(dialect) for dialect in families()]
    assert len(set(captures)) == len(captures)
    assert all(issubclass(named_class(dialect.lock), Backend) for dialect in families())


def test_a_half_added_database_is_named_with_what_it_lacks(tmp_path):
    """A family registered with nothing else: every gap named, the first the capture it names."""

    class Oracle(Dialect):
        name = "oracle"

    gaps = missing(Oracle(), tmp_path, tmp_path / "guide.md")
    assert len(gaps) == 2
    assert "publisher/databases/<name>/dialect.py" in gaps[0]
    assert "no capture class" in gaps[1]


def test_a_database_without_templates_fixtures_or_guide_row_is_named_with_each(tmp_path):
    """A family with a capture that renders templates, but none of them, no fixture and no row, and
    a visibility of its own outside its folder."""

    class Elsewhere(Capture):
        name = "elsewhere"

        def event_log_ddl(self) -> list[str]:
            return [self.render("event_log")]

    class Stray(Visibility):
        pass

    class ElsewhereDialect(Dialect):
        name = "elsewhere"
        capture: ClassVar[str] = f"{__name__}.ELSEWHERE"
        visibility: ClassVar[str] = f"{__name__}.STRAY"

    globals().update(ELSEWHERE=Elsewhere, STRAY=Stray)
    try:
        gaps = missing(ElsewhereDialect(), tmp_path, tmp_path / "guide.md")
    finally:
        del globals()["ELSEWHERE"], globals()["STRAY"]
    said = "\n".join(gaps)
    assert "'elsewhere' is no name of the family" in said
    assert "publisher/databases/elsewhere/sql/event_log.sql, which is missing" in said
    assert "is not in publisher/databases/elsewhere/" in said
    assert "its visibility Stray is neither the default nor in publisher/databases/elsewhere/" in said
    assert "tests/conftest.py has no _elsewhere()" in said
    assert "tests/conftest.py has no elsewhere_database()" in said
    assert "DIALECTS" in said
    assert "guide.md" in said
