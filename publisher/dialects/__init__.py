"""The registry of the databases the publisher speaks: each name SQLAlchemy gives a connection,
mapped to the dotted name of its database's `Dialect` class.

Everything about one database lives in its folder, `publisher/databases/<name>/` (its dialect,
capture, lock and SQL templates); the registry names each dialect class by its dotted name and
imports it on first ask, as SQLAlchemy loads `sqlalchemy.dialects.<name>`, so this bottom layer
imports no database's folder and the layers below the folders reach a database only through it.
The rest of the package asks a `Dialect` what it needs (a property such as `copy_out`, an
expression such as `readable_time`, a class it names such as `visibility`) and never compares
dialect names itself (`tests/databases/test_dialects.py` holds it to that). Adding a database is a folder and
one line in `_FAMILIES` (`docs/guides/new-database.md`; `tests/databases/test_registry.py` walks
the registry for what is missing).

MySQL and MariaDB are one family: SQLAlchemy names a connection "mysql" or "mariadb" after the
URL's scheme, and the publisher's SQL is the same for both.
"""
from __future__ import annotations

from typing import Any

from publisher.dialects.base import Dialect, UnknownDialectError, named_class

__all__ = ["URL_EXAMPLES", "Dialect", "UnknownDialectError", "dialect_of", "families", "file_url", "named_class"]

_FAMILIES: dict[str, str] = {
    "postgresql": "publisher.databases.postgresql.dialect.PostgreSQL",
    "mysql": "publisher.databases.mariadb.dialect.MariaDB",
    "mariadb": "publisher.databases.mariadb.dialect.MariaDB",
    "sqlite": "publisher.databases.sqlite.dialect.SQLite",
}
"""Each name SQLAlchemy gives a connection, and the dotted name of its family's dialect class."""

URL_EXAMPLES = "sqlite:///demo.db or postgresql://user@host/db"
"""Database URLs a message shows as examples."""

_LOADED: dict[str, Dialect] = {}
"""The dialects asked for so far, one instance per class (by its dotted name)."""


def _loaded(dotted: str) -> Dialect:
    if dotted not in _LOADED:
        found = named_class(dotted)
        if not issubclass(found, Dialect):
            raise TypeError(f"{dotted} is no publisher.dialects.base.Dialect")
        _LOADED[dotted] = found()
    return _LOADED[dotted]


def dialect_of(what: Any) -> Dialect:
    """The dialect of a SQLAlchemy dialect or backend name ("postgresql", "mariadb"…), an
    Engine or a Connection; UnknownDialectError for a database the publisher does not speak."""
    name = what if isinstance(what, str) else what.dialect.name
    try:
        dotted = _FAMILIES[name]
    except KeyError:
        speaks = ", ".join(sorted(_FAMILIES))
        raise UnknownDialectError(f"the publisher does not speak {name!r}: it speaks {speaks}") from None
    return _loaded(dotted)


def families() -> tuple[Dialect, ...]:
    """Every database family the publisher speaks, once each: the registry a new database
    enters by one line in `_FAMILIES` (`docs/guides/new-database.md`)."""
    return tuple(_loaded(dotted) for dotted in dict.fromkeys(_FAMILIES.values()))


def file_url(path: str) -> str:
    """The URL of a database in the file at `path`, which needs no server: the configuration's
    default and the demo's."""
    return f"sqlite:///{path}"

