"""Connections and the few facts about a database that differ by dialect."""
from __future__ import annotations

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from publisher import dialects
from publisher.config import Config, ConfigError


class MissingDriverError(RuntimeError):
    """database.url is a valid URL, but the Python driver it needs is not installed here."""


def connect(config: Config) -> Engine:
    """An engine for the configured URL; SQLite waits on a locked file instead of failing at once.

    A URL scheme SQLAlchemy does not know is a ConfigError; a known one whose driver is not
    installed is a MissingDriverError: both name database.url, in one line."""
    from sqlalchemy.exc import NoSuchModuleError

    url = make_url(config.database.sqlalchemy_url())
    kwargs: dict[str, object] = {"pool_pre_ping": True}
    if url.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": 30}
    shown = config.database.display_url()
    try:
        return create_engine(url, **kwargs)
    except NoSuchModuleError:
        raise ConfigError(
            f"database.url: {shown!r}: {url.drivername!r} is not a database or driver SQLAlchemy knows "
            "(e.g. sqlite:///demo.db or postgresql://user@host/db)"
        ) from None
    except ImportError as exc:
        raise MissingDriverError(
            f"database.url: {shown!r} needs the Python module {exc.name or str(exc)!r} "
            f"(driver {url.get_backend_name()}+{url.get_driver_name()}), which is not installed here"
        ) from None


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def is_mysql(engine: Engine) -> bool:
    """Whether the engine speaks to MySQL or MariaDB."""
    return dialects.is_mysql(engine.dialect.name)


def table_schema(config: Config, engine: Engine) -> str | None:
    """The schema that qualifies table names in SQL: none on SQLite, which has no schemas."""
    if is_sqlite(engine):
        return None
    return config.database.schema


def association_schema(config: Config, engine: Engine) -> str:
    """The `schema=` of associations: the configured one, else the database's default."""
    if config.database.schema:
        return config.database.schema
    if is_sqlite(engine):
        return "main"
    current = "SELECT DATABASE()" if is_mysql(engine) else "SELECT current_schema()"
    with engine.connect() as conn:
        return str(conn.execute(text(current)).scalar_one())


def publisher_user(config: Config, engine: Engine) -> str | None:
    """Whose changes are loopback: the configured user, else the connection's login user."""
    if config.database.user:
        return config.database.user
    return engine.url.username
