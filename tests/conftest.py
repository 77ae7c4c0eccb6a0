"""Shared fixtures: one SparkSession per run, and real SQLite and PostgreSQL databases.

PostgreSQL tests isolate themselves in a schema of their own, dropped afterwards.
"""
from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

POSTGRES_URL = os.environ.get("PUBLISHER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class TestDatabase:
    """A database a test owns: its URL, the schema its tables live in, and an engine."""

    __test__ = False
    dialect: str
    url: str
    schema: str | None
    engine: Engine

    def qualified(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    def execute(self, *statements: str) -> None:
        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))

    def rows(self, query: str) -> list[tuple]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(query))]


def _sqlite(tmp_path: Path) -> Iterator[TestDatabase]:
    url = f"sqlite:///{tmp_path / 'test.db'}"
    engine = create_engine(url)
    yield TestDatabase("sqlite", url, None, engine)
    engine.dispose()


def _postgresql() -> Iterator[TestDatabase]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(POSTGRES_URL, pool_pre_ping=True)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield TestDatabase("postgresql", POSTGRES_URL, schema, engine)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestDatabase]:
    """Each test using it runs once on SQLite and once on the real PostgreSQL server."""
    if request.param == "sqlite":
        yield from _sqlite(tmp_path)
    else:
        yield from _postgresql()


@pytest.fixture
def sqlite_database(tmp_path: Path) -> Iterator[TestDatabase]:
    yield from _sqlite(tmp_path)


@pytest.fixture
def postgresql_database() -> Iterator[TestDatabase]:
    yield from _postgresql()


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (small, two cores)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from publisher.config import SparkConfig
    from publisher.pipeline.spark import get_spark

    session = get_spark(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    yield session
    session.stop()


@pytest.fixture(params=["driver", "spark"])
def cycle_path(request: pytest.FixtureRequest) -> str:
    """Each test using it runs its cycles once in the driver alone and once as Spark jobs."""
    return str(request.param)


@pytest.fixture
def harness(spark, cycle_path, database, tmp_path):
    """A publisher on the test's database with the usr table and an event log (no triggers)."""
    from harness import Harness

    h = Harness(spark, database, tmp_path, path=cycle_path)
    h.create_usr()
    h.create_event_log()
    return h
