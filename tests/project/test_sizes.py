"""The package's sizes: no module over MODULE_LINES lines, no function over FUNCTION_LINES.

A module that grows past the limit holds a second concern, which becomes a module of its own
named for it; a function that does, a step or a policy that becomes a function. A function's
length runs from its `def` (or first decorator) to its last line, nested functions included.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "publisher"
MODULE_LINES = 400
FUNCTION_LINES = 80


def oversized(package: Path = PACKAGE) -> list[str]:
    """`path: N lines` for each module over MODULE_LINES, `path:line name: N lines` for each
    function over FUNCTION_LINES, paths relative to `package`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_or_function_of_the_package_is_over_its_size():
    assert oversized() == []


def test_a_long_module_and_a_long_function_are_named_with_their_lengths(tmp_path):
    package = tmp_path / "publisher"
    (package / "pipeline").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    (package / "pipeline" / "long.py").write_text("@staticmethod\ndef stage():\n" + body)
    (package / "pipeline" / "short.py").write_text("def stage():\n" + body[: -len("    x79 = 79\n")])
    (package / "big.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    (package / "fits.py").write_text("x = 1\n" * MODULE_LINES)
    assert oversized(package) == [
        f"big.py: {MODULE_LINES + 1} lines",
        f"pipeline/long.py:2 stage: {FUNCTION_LINES + 2} lines",
    ]
