"""Shared fixtures: one SparkSession per run, and real SQLite, PostgreSQL and MariaDB databases.

PostgreSQL tests isolate themselves in a schema of their own, MariaDB tests in a database of
their own (MariaDB's schemas), dropped afterwards. Under pytest-xdist each worker has databases
of its own (PostgreSQL's event triggers are per database: two workers installing them in one race).

Each test is marked with what it needs, from its fixtures and parameters (see `tier`), so that
`pytest -m "not database and not spark and not process"` is the fast tier.
"""
from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hunting import load_profile
from sqlalchemy import Engine, create_engine, make_url, text

TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(folder) for folder in sorted({path.parent for path in TESTS.rglob("test_*.py")})
                if str(folder) not in sys.path]
"""The tests mirror the package, a folder per part (and per database, `databases/<name>/`); a
test may take a fixture's helpers from a test module of another folder
(`from test_crash import kill_session`), as a module by its name."""

load_profile()


def share_one_tls_context() -> None:
    """PyMySQL builds a TLS context for every connection it opens, loading the system's CA
    certificates (about 30 ms), even where no TLS option is given and the server has none; the
    tests open thousands (a quarter of a MariaDB property's time). They share one: what a
    connection does with it, or without it, is the same."""
    from pymysql.connections import Connection

    build = Connection._create_ssl_ctx
    shared: list[object] = []

    def create_ssl_ctx(self: Connection, options: object) -> object:
        if options != {}:
            return build(self, options)
        if not shared:
            shared.append(build(self, options))
        return shared[0]

    Connection._create_ssl_ctx = create_ssl_ctx  # type: ignore[method-assign]


share_one_tls_context()

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The suite's Spark JVMs (each worker's session and every `publisher` process a test starts,
which inherit the environment) compile with the quick compiler only and collect with one
thread: a test's JVM lives for seconds to a minute on small data, where the optimising compiler
and the parallel collector's threads cost more CPU than they save, on a machine the suite keeps
busy. Measured on the CI machine kind, one Spark test alone: 84 and 83 CPU seconds (the JVM's
included) with the defaults, 48 with these. They change how fast the JVM runs, not what it does;
`publisher` itself keeps the JVM's defaults. Spark's launcher adds SPARK_SUBMIT_OPTS to the
driver JVM's command line (JAVA_TOOL_OPTIONS would make the JVM announce itself on stderr)."""
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
"""The pytest-xdist worker this process is (gw0, gw1, ...), empty when the run is not distributed."""


def worker_url(url: str) -> str:
    """`url` on this worker's own database: the base database's name with the worker's id."""
    if not WORKER:
        return url
    parsed = make_url(url)
    return parsed.set(database=f"{parsed.database}_{WORKER}").render_as_string(hide_password=False)


POSTGRES_URL = worker_url(os.environ.get("PUBLISHER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
MARIADB_URL = worker_url(os.environ.get("PUBLISHER_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test"))
DIALECTS = tuple(os.environ.get("PUBLISHER_TEST_DIALECTS", "sqlite,postgresql,mariadb").split(","))
"""The databases every test of the `database` fixture runs on."""


@dataclass
class TestDatabase:
    """A database a test owns: its URL, the schema its tables live in, and an engine."""

    __test__ = False
    dialect: str
    url: str
    schema: str | None
    engine: Engine

    def quote(self, name: str) -> str:
        """An identifier as this database quotes it, whatever it holds."""
        return self.engine.dialect.identifier_preparer.quote_identifier(name)

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


def _mariadb() -> Iterator[TestDatabase]:
    from publisher.config import DatabaseConfig

    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(DatabaseConfig(url=MARIADB_URL).sqlalchemy_url(), pool_pre_ping=True)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE DATABASE {schema} CHARACTER SET utf8mb4"))
    try:
        yield TestDatabase("mariadb", MARIADB_URL, schema, engine)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP DATABASE {schema}"))
        engine.dispose()


def open_database(dialect: str, tmp_path: Path) -> Iterator[TestDatabase]:
    if dialect == "sqlite":
        return _sqlite(tmp_path)
    if dialect == "postgresql":
        return _postgresql()
    return _mariadb()


@pytest.fixture(params=DIALECTS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestDatabase]:
    """Each test using it runs on SQLite, the real PostgreSQL server and the real MariaDB server."""
    yield from open_database(request.param, tmp_path)


def on_each_database_in_turn(cases: list[tuple[str, ...]], first: str = DIALECTS[0]) -> list[tuple[str, ...]]:
    """Each case once, on the databases in turn from `first`, as (database, *case): for the slow
    variants of a test (a Spark process per case) whose database differences its other variants
    cover on every database. Parametrize `database` with it indirectly."""
    start = DIALECTS.index(first) if first in DIALECTS else 0
    return [(DIALECTS[(start + i) % len(DIALECTS)], *case) for i, case in enumerate(cases)]


def spark_on_one_database(first: str = DIALECTS[0]) -> pytest.MarkDecorator:
    """The `harness` matrix for a test whose database differences lie in what the driver path
    reads and queries back, and whose Spark path differences lie in the rules' placement, order
    and writing, none of them the database's: the driver path on every database, the Spark path
    on `first` alone. A file's tests spread `first` over the databases, so the Spark path still
    meets each of them."""
    spark_on = first if first in DIALECTS else DIALECTS[0]
    return pytest.mark.parametrize(("database", "cycle_path"),
                                   [(d, "driver") for d in DIALECTS] + [(spark_on, "spark")], indirect=True)


SUBSCRIBER_DIALECTS = tuple(d for d in DIALECTS if d != "mariadb")
"""The databases that serve subscribers: MariaDB refuses them (docs: guides/mariadb.md; test_mariadb)."""


@pytest.fixture(params=SUBSCRIBER_DIALECTS)
def subscriber_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestDatabase]:
    yield from open_database(request.param, tmp_path)


@pytest.fixture
def sqlite_database(tmp_path: Path) -> Iterator[TestDatabase]:
    yield from _sqlite(tmp_path)


@pytest.fixture
def postgresql_database() -> Iterator[TestDatabase]:
    yield from _postgresql()


@pytest.fixture
def mariadb_database() -> Iterator[TestDatabase]:
    yield from _mariadb()


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


SERVER_DIALECTS = {"postgresql", "mariadb"}
SERVER_FIXTURES = {"postgresql_database", "mariadb_database", "stream"}
"""Fixtures that reach a server: the two databases and test_broker's NATS stream."""
DIALECT_PARAMETERS = ("database", "subscriber_database", "dialect")


def tier(item: pytest.Item) -> set[str]:
    """What a test needs, as far as its fixtures and parameters show: `database` (a server),
    `spark` (the run's SparkSession). A test that reaches them otherwise is marked by hand."""
    params = getattr(item, "callspec", None)
    values = params.params if params else {}
    fixtures = set(getattr(item, "fixturenames", ()))
    needs = set()
    if fixtures & SERVER_FIXTURES or any(values.get(name) in SERVER_DIALECTS for name in DIALECT_PARAMETERS):
        needs.add("database")
    if "spark" in fixtures:
        needs.add("spark")
    return needs


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in sorted(tier(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(mark)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Create this worker's databases if a test it will run needs one (the fast tier connects to none)."""
    if WORKER and any(item.get_closest_marker("database") for item in session.items):
        create_worker_databases()


def create_worker_databases() -> None:
    from publisher.config import DatabaseConfig

    postgres = make_url(DatabaseConfig(url=POSTGRES_URL).sqlalchemy_url())
    admin = create_engine(postgres.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": postgres.database}).first() is None:
            conn.execute(text(f'CREATE DATABASE "{postgres.database}"'))
    admin.dispose()
    mariadb = make_url(DatabaseConfig(url=MARIADB_URL).sqlalchemy_url())
    server = create_engine(mariadb._replace(database=None))  # URL.set() keeps a database it is given None for
    with server.begin() as conn:
        conn.execute(text(f"CREATE DATABASE IF NOT EXISTS `{mariadb.database}` CHARACTER SET utf8mb4"))
    server.dispose()
