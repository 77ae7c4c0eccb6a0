"""The databases `publisher bench` and `publisher soak` drive, found through the registry.

Each family that names a workshop class (`Dialect.workshop`, a subclass of
`publisher.databases.workbench.Workbench` in the database's folder) is driven by it: the
workshop asks it for its default URL, its private server, its workload's SQL, and whether it
can run a measure at all, and never compares a database's name.
"""
from __future__ import annotations

from functools import cache
from typing import cast

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from publisher.databases.workbench import Workbench
from publisher.dialects import Dialect, dialect_of, families, named_class


@cache
def databases() -> tuple[Workbench, ...]:
    """Every database the workshop drives, in the registry's order."""
    return tuple(cast(Workbench, named_class(d.workshop)()) for d in families() if d.workshop is not None)


def names(among: tuple[Workbench, ...] | None = None) -> tuple[str, ...]:
    """The names of the databases the workshop drives, or of those `among` them."""
    return tuple(d.name for d in (databases() if among is None else among))


def draining() -> tuple[Workbench, ...]:
    """The databases the drain benchmark runs on: those that make its backlog."""
    return tuple(d for d in databases() if d.backlog("bench") is not None)


def mixing() -> tuple[Workbench, ...]:
    """The databases `bench --capture` runs on: those with concurrent writers to drive."""
    return tuple(d for d in databases() if d.capture_mix() is not None)


def copying() -> tuple[Workbench, ...]:
    """The databases `bench --snapshot` and `--triggerless` run on: those that make the
    workload's table and send a whole table as COPY does, their floor."""
    return tuple(d for d in draining() if dialect(d).copy_out)


def named(name: str) -> Workbench:
    """The database `--database` names; a ValueError naming the choices for another name."""
    for database in databases():
        if database.name == name:
            return database
    raise ValueError(f"no database {name!r}: choose one of {', '.join(names())}")


def dialect(database: Workbench) -> Dialect:
    return dialect_of(database.name)


def of_url(url: str | URL) -> Workbench:
    """The database a SQLAlchemy URL is for; a ValueError where the workshop does not drive it."""
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError:
        raise ValueError(f"{str(url)!r} is not a SQLAlchemy URL") from None
    found = dialect_of(backend)
    for database in databases():
        if dialect_of(database.name) is found:
            return database
    raise ValueError(f"the workshop does not drive {found.name}: it drives {', '.join(names())}")


def native_capture(database: Workbench) -> bool:
    """Whether the database has a native capture beside its trigger language's."""
    from publisher.capture.base import capture_class

    return bool(capture_class(dialect(database)).has_native_capture)
