"""The package's layers: every import of a publisher module goes down, never up or sideways.

A module may import modules of its own package and of lower layers only. The test reads the
imports from the source (those inside functions and under TYPE_CHECKING too), so a lazy import
that climbs is found as well as a top-level one.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "publisher"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "dialects", "failpoints"),
    ("config",),
    ("model",),
    ("subscriptions",),
    ("database",),
    ("rules",),
    ("outputs",),
    ("capture",),
    ("pipeline",),
    ("locking",),
    ("triggerless", "snapshots"),
    ("service",),
    ("databases",),
    ("workshop",),
    ("cli",),
)
"""From the bottom up. Each name is a top-level module or package of `publisher`; `__init__` is
the package itself, which holds nothing but may carry a version."""


def _layer_of(part: str) -> int:
    for number, names in enumerate(LAYERS):
        if part in names:
            return number
    raise AssertionError(f"publisher.{part} is in no layer: add it to LAYERS in {Path(__file__).name}")


def _part_of(module: str) -> str | None:
    """The top-level part of a `publisher.…` module name, None for other modules."""
    names = module.split(".")
    if names[0] != "publisher":
        return None
    return names[1] if len(names) > 1 else "__init__"


def _module_name(path: Path, package: Path) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    return ".".join(relative.parts)


def _imported(path: Path, package_dir: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, module) of every publisher import in a file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path, package_dir).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "publisher":
                found += [(node.lineno, f"publisher.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, module))
    return [(line, module) for line, module in found if module.startswith("publisher")]


def climbing_imports(package: Path = PACKAGE) -> list[str]:
    """Every import that goes to a higher layer, or sideways to another part of the same layer."""
    wrong = []
    for path in sorted(package.rglob("*.py")):
        own = _part_of(_module_name(path, package))
        assert own is not None
        for line, module in _imported(path, package):
            other = _part_of(module)
            if other is None or other == own:
                continue
            if _layer_of(other) >= _layer_of(own):
                wrong.append(f"{path.relative_to(package.parent)}:{line} imports {module} "
                             f"(layer {_layer_of(other)} from layer {_layer_of(own)})")
    return wrong


def test_every_import_goes_down():
    assert climbing_imports() == []


def test_every_part_of_the_package_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").exists())}
    for part in parts:
        _layer_of(part)


def test_a_climbing_import_is_found(tmp_path):
    """The check itself: a lazy import from a lower layer to a higher one is named with its line."""
    package = tmp_path / "publisher"
    (package / "model").mkdir(parents=True)
    (package / "pipeline").mkdir()
    for init in (package / "__init__.py", package / "model" / "__init__.py", package / "pipeline" / "__init__.py"):
        init.write_text("")
    (package / "model" / "keys.py").write_text("from . import values\n\ndef f():\n    from ..pipeline import cycle\n")
    (package / "model" / "values.py").write_text("")
    (package / "pipeline" / "cycle.py").write_text("from publisher.model.keys import f\nimport publisher.config\n")
    (package / "config.py").write_text("from publisher import errors\n")
    (package / "errors.py").write_text("")
    pipeline, model = _layer_of("pipeline"), _layer_of("model")
    assert climbing_imports(package) == [
        f"publisher/model/keys.py:4 imports publisher.pipeline (layer {pipeline} from layer {model})"]


@pytest.mark.parametrize("part", ["rules", "outputs"])
def test_rules_and_outputs_open_no_connection(part):
    """Rules and outputs take rows and write files; they open no connection of their own."""
    for path in sorted((PACKAGE / part).rglob("*.py")):
        modules = {module for _, module in _imported(path)}
        assert "publisher.database" not in modules, path


def test_the_package_imports_nothing_of_the_tests():
    """The rules one event or one object at a time (`tests/oracle`) are what the tests hold the
    production rules equal to; the package, bench and soak included, never runs them."""
    test_modules = {p.stem for p in PACKAGE.parent.joinpath("tests").iterdir()
                    if p.suffix == ".py" or (p / "__init__.py").exists()}
    users = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            users += [f"{path.relative_to(PACKAGE.parent)} imports {n}" for n in names
                      if n.split(".")[0] in test_modules | {"tests"}]
    assert users == []
