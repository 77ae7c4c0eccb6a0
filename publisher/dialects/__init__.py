"""What differs between the databases the publisher speaks: one module per family, one class.

The rest of the package asks a `Dialect` what it needs (a property such as
`transaction_snapshots`, an expression such as `readable_time`) and never compares dialect
names itself (`tests/databases/test_dialects.py` holds it to that). Adding a database is a module here
registered in `_FAMILIES`, naming its capture class and lock, beside its SQL templates and its
entry in the tests' fixtures (`docs/guides/new-database.md`; `tests/databases/test_registry.py`
walks the registry for what is missing).

MySQL and MariaDB are one family: SQLAlchemy names a connection "mysql" or "mariadb" after the
URL's scheme, and the publisher's SQL is the same for both.
"""
from __future__ import annotations

from typing import Any

from publisher.dialects.base import Dialect, UnknownDialectError, named_class
from publisher.dialects.mariadb import MariaDB
from publisher.dialects.postgresql import PostgreSQL
from publisher.dialects.sqlite import SQLite

__all__ = ["Dialect", "UnknownDialectError", "dialect_of", "families", "is_mysql", "named_class"]

_MARIADB = MariaDB()
_FAMILIES: dict[str, Dialect] = {"postgresql": PostgreSQL(), "mysql": _MARIADB, "mariadb": _MARIADB, "sqlite": SQLite()}


def dialect_of(what: Any) -> Dialect:
    """The dialect of a SQLAlchemy dialect or backend name ("postgresql", "mariadb"…), an
    Engine or a Connection; UnknownDialectError for a database the publisher does not speak."""
    name = what if isinstance(what, str) else what.dialect.name
    try:
        return _FAMILIES[name]
    except KeyError:
        speaks = ", ".join(sorted(_FAMILIES))
        raise UnknownDialectError(f"the publisher does not speak {name!r}: it speaks {speaks}") from None


def families() -> tuple[Dialect, ...]:
    """Every database family the publisher speaks, once each: the registry a new database
    enters by one line in `_FAMILIES` (`docs/guides/new-database.md`)."""
    return tuple(dict.fromkeys(_FAMILIES.values()))


def is_mysql(dialect: str) -> bool:
    """Whether a SQLAlchemy dialect name is MySQL's or MariaDB's."""
    return isinstance(_FAMILIES.get(dialect), MariaDB)
