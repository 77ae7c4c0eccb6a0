"""The database families the publisher speaks, by SQLAlchemy dialect name.

MySQL and MariaDB are one family: SQLAlchemy names a connection "mysql" or "mariadb" after the
URL's scheme, and the publisher's SQL is the same for both."""
from __future__ import annotations

MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})


def is_mysql(dialect: str) -> bool:
    """Whether a SQLAlchemy dialect name is MySQL's or MariaDB's."""
    return dialect in MYSQL_DIALECTS
