"""Reflection reused while the catalog is unchanged.

Every cycle reflects the published tables (to follow migrations and to know their columns), and
SQLAlchemy's inspector asks the catalog a query per table and question, tens of milliseconds a
cycle. Where the database says in one statement whether its catalog changed
(`Dialect.catalog_version`), the answers of the last reflection are kept with that version and
given again until the version moves; elsewhere each reflection asks the catalog, as it always
did. What is kept is the inspector's cache of answers, not the inspector, which holds its
engine: a kept engine would never close its pool.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, Engine, Inspector, inspect

from publisher.dialects import dialect_of

_KEPT: weakref.WeakKeyDictionary[Engine, dict[str | None, tuple[str, dict[Any, Any]]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_READ_ONCE: ContextVar[dict[tuple[int, str | None], str] | None] = ContextVar("catalog_read_once", default=None)


def reflection(bind: Engine | Connection, schema: str | None) -> Inspector:
    """An inspector of `schema` as its catalog is now, with the answers kept for the engine
    while the catalog's version is the one they were given at. A connection, which may hold
    DDL of its own not yet committed, always gets a new one."""
    if not isinstance(bind, Engine):
        return inspect(bind)
    version = _version(bind, schema)
    inspector = inspect(bind)
    if version is None:
        return inspector
    with _LOCK:
        kept = _KEPT.setdefault(bind, {})
        found = kept.get(schema)
        if found is not None and found[0] == version:
            inspector.info_cache = found[1]
        else:
            kept[schema] = (version, inspector.info_cache)
    return inspector


@contextmanager
def catalog_read_once() -> Iterator[None]:
    """Within it (in this thread), each engine's catalog version is read once per schema: what
    is reflected is the catalog as it was at the first reflection, unless the publisher changes
    it itself (`forget`)."""
    token = _READ_ONCE.set({})
    try:
        yield
    finally:
        _READ_ONCE.reset(token)


def forget(engine: Engine) -> None:
    """The publisher changed the engine's catalog: nothing kept of it is given again."""
    with _LOCK:
        _KEPT.pop(engine, None)
    read = _READ_ONCE.get()
    if read is not None:
        for key in [key for key in read if key[0] == id(engine)]:
            del read[key]


def _version(engine: Engine, schema: str | None) -> str | None:
    read = _READ_ONCE.get()
    if read is not None and (id(engine), schema) in read:
        return read[(id(engine), schema)]
    dialect = dialect_of(engine)
    if not dialect.catalog_versions:
        return None
    with engine.connect() as conn:
        version = dialect.catalog_version(conn, schema)
    if read is not None and version is not None:
        read[(id(engine), schema)] = version
    return version
