"""The package type-checks and lints clean; a regression here is a bug waiting to happen."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_mypy_finds_no_type_errors():
    result = run("mypy", "publisher", "docs/hooks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_finds_no_problems():
    result = run("ruff", "check", "publisher", "tests", "docs/hooks")
    assert result.returncode == 0, result.stdout + result.stderr
