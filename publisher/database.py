"""Connections, and where the publisher's tables and associations live."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from publisher.config import Config, ConfigError
from publisher.dialects import URL_EXAMPLES, Dialect, UnknownDialectError, dialect_of

LOCK_WAIT_SECONDS = 30
"""How long a connection waits on a locked database before failing, where the driver asks."""


class MissingDriverError(RuntimeError):
    """database.url is a valid URL, but the Python driver it needs is not installed here."""


def connect(config: Config) -> Engine:
    """An engine for the configured URL, which waits for a lock instead of failing at once where the
    driver lets it say (`Dialect.connect_args`).

    A URL scheme SQLAlchemy does not know is a ConfigError; a known one whose driver is not
    installed is a MissingDriverError; a database the publisher does not speak is a ConfigError
    too: each names database.url, in one line."""
    from sqlalchemy.exc import NoSuchModuleError

    url = make_url(config.database.sqlalchemy_url())
    shown = config.database.display_url()
    try:
        dialect: Dialect | None = dialect_of(url.get_backend_name())
    except UnknownDialectError as exc:
        dialect, unknown = None, exc
    connect_args = dialect.connect_args(LOCK_WAIT_SECONDS) if dialect is not None else {}
    try:
        engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except NoSuchModuleError:
        raise ConfigError(
            f"database.url: {shown!r}: {url.drivername!r} is not a database or driver SQLAlchemy knows "
            f"(e.g. {URL_EXAMPLES})"
        ) from None
    except ImportError as exc:
        raise MissingDriverError(
            f"database.url: {shown!r} needs the Python module {exc.name or str(exc)!r} "
            f"(driver {url.get_backend_name()}+{url.get_driver_name()}), which is not installed here"
        ) from None
    if dialect is None:
        engine.dispose()
        raise ConfigError(f"database.url: {shown!r}: {unknown}")
    return engine


class HeldConnection:
    """One connection of the database, for a migration: `engine.connect()` is always it, and
    its commits and rollbacks are only the migration's own (`commit`, `rollback`), so that the
    capture's code, which reflects and reads through the engine, sees the migration's DDL
    before it commits and undoes none of it."""

    def __init__(self, url: Any, dbapi: Any, owned: tuple[Any, Engine] | None = None) -> None:
        from sqlalchemy.pool import StaticPool

        self.dbapi = dbapi
        self._owned = owned
        self.engine = create_engine(url, poolclass=StaticPool, pool_reset_on_return=None, creator=lambda: dbapi)
        for name in ("do_commit", "do_rollback", "do_close"):
            setattr(self.engine.dialect, name, _nothing)

    @classmethod
    def of(cls, config: Config) -> HeldConnection:
        """A connection of its own, closed with it, which finds an unqualified table name in the
        configured schema first, as the publisher names its tables (`Dialect.schema_first_sql`)."""
        base = connect(config)
        fairy = base.raw_connection()
        held = cls(base.url, fairy.dbapi_connection, (fairy, base))
        schema_first = dialect_of(base).schema_first_sql(config.database.schema) if config.database.schema else None
        if schema_first is not None:
            held.run(schema_first)
            held.commit()
        return held

    def run(self, statement: str) -> None:
        """A statement as written, no parameters (so `%` is only a character)."""
        cursor = self.dbapi.cursor()
        try:
            cursor.execute(statement)
        finally:
            cursor.close()

    def commit(self) -> None:
        self.dbapi.commit()

    def rollback(self) -> None:
        self.dbapi.rollback()

    def close(self) -> None:
        self.engine.dispose()
        if self._owned is not None:
            fairy, base = self._owned
            fairy.close()
            base.dispose()


def _nothing(connection: Any) -> None:
    """What a commit or rollback of the engine's code does on a held connection."""


def table_schema(config: Config, engine: Engine) -> str | None:
    """The schema that qualifies table names in SQL: none where the database has no schemas
    (`Dialect.table_schema`)."""
    return dialect_of(engine).table_schema(config.database.schema)


def association_schema(config: Config, engine: Engine) -> str:
    """The `schema=` of associations: the configured one, else the database's default."""
    if config.database.schema:
        return config.database.schema
    return dialect_of(engine).default_schema(engine)


def publisher_user(config: Config, engine: Engine) -> str | None:
    """Whose changes are loopback: the configured user, else the connection's login user."""
    if config.database.user:
        return config.database.user
    return engine.url.username
