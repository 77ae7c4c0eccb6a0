"""The getting-started tutorials work as written: every ```sh block of each page runs, in order,
against the real database (the test's own database, schema and users substituted for the page's),
`publisher run` in the background as the page's second terminal, and `verify` ends equal."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import DIALECTS, MARIADB_URL, POSTGRES_URL
from sqlalchemy import create_engine, text

ROOT = Path(__file__).parents[2]
PAGES = ROOT / "docs" / "getting-started"
BIN = Path(sys.executable).parent
VERIFY_SECONDS = 120


def commands(page: Path) -> list[str]:
    """The page's ```sh blocks, in order: the commands a reader types."""
    return re.findall(r"^```sh\n(.*?)^```", page.read_text(encoding="utf-8"), re.DOTALL | re.MULTILINE)


def test_each_tutorial_installs_snapshots_runs_changes_and_verifies():
    for name in ("sqlite", "postgresql", "mariadb"):
        blocks = commands(PAGES / f"{name}.md")
        steps = [next((i for i, b in enumerate(blocks) if b.startswith(f"publisher {verb}") or
                       re.search(rf"\bpublisher {verb} ", b)), -1)
                 for verb in ("install", "snapshot", "run", "verify")]
        assert -1 not in steps and steps == sorted(steps), f"{name}: {steps}"
        assert blocks[-1].strip() == "publisher verify -c publisher.toml"


def run_tutorial(page: Path, workdir: Path, substitute: Callable[[str], str]) -> str:
    """Run every block of the page in `workdir`; returns verify's last output once it exits 0."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}
    env.pop("PUBLISHER_DATABASE_PASSWORD", None)
    service: subprocess.Popen[bytes] | None = None
    try:
        for block in map(substitute, commands(page)):
            exported = dict(re.findall(r"^export (\w+)=(\S+)$", block, re.MULTILINE))
            if block.strip().startswith("publisher run "):
                assert service is None
                service = subprocess.Popen(["bash", "-c", f"exec {block.strip()}"], cwd=workdir, env=env,
                                           stdout=subprocess.DEVNULL, stderr=open(workdir / "run.log", "wb"))
                continue
            if block.strip().startswith("publisher verify "):
                return verify_until_equal(block, workdir, env, service)
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, env=env,
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, f"{block}\n{result.stdout}\n{result.stderr}"
            env.update(exported)
        raise AssertionError(f"{page.name} ends without publisher verify")
    finally:
        if service is not None:
            service.send_signal(signal.SIGTERM)
            assert service.wait(timeout=120) == 0, (workdir / "run.log").read_text()


def verify_until_equal(block: str, workdir: Path, env: dict[str, str], service: subprocess.Popen[bytes] | None) -> str:
    """`verify` exits 1 until `run` has published the change; it must reach 0 within the time."""
    deadline = time.monotonic() + VERIFY_SECONDS
    while True:
        result = subprocess.run(["bash", "-c", block], cwd=workdir, env=env, capture_output=True, text=True)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        assert service is None or service.poll() is None, (workdir / "run.log").read_text()
        time.sleep(1)
    assert result.returncode == 0, result.stdout + result.stderr + (workdir / "run.log").read_text()
    return result.stdout


@pytest.mark.process
def test_the_sqlite_tutorial(tmp_path):
    out = run_tutorial(PAGES / "sqlite.md", tmp_path, lambda block: block)
    assert out.startswith("mirror equals source: 2 objects in 1 table")
    assert (tmp_path / "demo" / "demo.db").is_file()


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def postgres_site(tag: str) -> Iterator[Callable[[str], str]]:
    """The page's database, schema and roles replaced by the test's own, dropped afterwards."""
    parts = urlsplit(POSTGRES_URL)
    schema, app, publisher = f"hr_{tag}", f"hr_app_{tag}", f"hr_publisher_{tag}"

    def substitute(block: str) -> str:
        block = re.sub(r"postgresql://postgres@127\.0\.0\.1:5432/test\b", POSTGRES_URL, block)
        block = re.sub(r"@127\.0\.0\.1:5432/test\b", f"@{parts.hostname}:{parts.port or 5432}{parts.path}", block)
        block = block.replace("hr_app", app).replace("hr_publisher", publisher)
        return re.sub(r"\bhr\b(?!_)", schema, block)

    yield substitute
    engine = create_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        conn.execute(text(f"DROP ROLE IF EXISTS {app}"))
        conn.execute(text(f"DROP ROLE IF EXISTS {publisher}"))
    engine.dispose()


@pytest.mark.process
@pytest.mark.database
@pytest.mark.skipif("postgresql" not in DIALECTS, reason="PUBLISHER_TEST_DIALECTS leaves PostgreSQL out")
def test_the_postgresql_tutorial(tmp_path, postgres_site):
    out = run_tutorial(PAGES / "postgresql.md", tmp_path, postgres_site)
    assert out.startswith("mirror equals source: 2 objects in 1 table")


@pytest.fixture
def mariadb_site(tag: str) -> Iterator[Callable[[str], str]]:
    """A throwaway database for the page's `test`, and the users renamed; dropped afterwards."""
    from publisher.config import DatabaseConfig

    parts = urlsplit(MARIADB_URL)
    database, app, publisher = f"t_{tag}", f"hr_app_{tag}", f"hr_publisher_{tag}"
    engine = create_engine(DatabaseConfig(url=MARIADB_URL).sqlalchemy_url())
    with engine.begin() as conn:
        conn.execute(text(f"CREATE DATABASE {database} CHARACTER SET utf8mb4"))
    client = f"-h {parts.hostname} -P {parts.port or 3306} -u "
    root = f"{client}{parts.username}" + (f" -p{parts.password}" if parts.password else "")

    def substitute(block: str) -> str:
        block = block.replace("-h 127.0.0.1 -u root", root).replace("-h 127.0.0.1 -u ", client)
        block = re.sub(r"@127\.0\.0\.1:3306/test\b", f"@{parts.hostname}:{parts.port or 3306}/{database}", block)
        block = block.replace("--database=test", f"--database={database}").replace(" ON test.", f" ON {database}.")
        block = block.replace('schema = "test"', f'schema = "{database}"')
        return block.replace("hr_app", app).replace("hr_publisher", publisher)

    yield substitute
    with engine.begin() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {database}"))
        conn.execute(text(f"DROP USER IF EXISTS '{app}'@'%', '{publisher}'@'%'"))
    engine.dispose()


@pytest.mark.process
@pytest.mark.database
@pytest.mark.skipif("mariadb" not in DIALECTS, reason="PUBLISHER_TEST_DIALECTS leaves MariaDB out")
def test_the_mariadb_tutorial(tmp_path, mariadb_site):
    out = run_tutorial(PAGES / "mariadb.md", tmp_path, mariadb_site)
    assert out.startswith("mirror equals source: 2 objects in 1 table")
