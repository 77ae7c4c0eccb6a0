"""Reflection reused while the catalog is unchanged.

Every cycle reflects the published tables (to follow migrations and to know their columns), and
SQLAlchemy's inspector asks the catalog a query per table and question, tens of milliseconds a
cycle. Where the database says in one statement whether its catalog changed
(`Dialect.catalog_version`), each reflection asks that first, and the answers given at the same
version are given again; elsewhere, and for a schema too large for its version to be cheap,
each reflection asks the catalog, as it always did. Asked at
every reflection, never once for several: what a reflection answers must be at least as new as
anything read before it (the cycle's window, the capture's records), as when it asked the
catalog itself. What is kept is the inspector's cache of answers, not the inspector, which
holds its engine: a kept engine would never close its pool.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy import Connection, Engine, Inspector, inspect

from publisher.dialects import dialect_of

_KEPT: weakref.WeakKeyDictionary[Engine, dict[str | None, tuple[str, dict[Any, Any]]]] = weakref.WeakKeyDictionary()
_UNVERSIONED: weakref.WeakKeyDictionary[Engine, set[str | None]] = weakref.WeakKeyDictionary()
"""Schemas whose database gave no version (too large to read one cheaply): not asked again."""
_LOCK = threading.Lock()


def reflection(bind: Engine | Connection, schema: str | None) -> Inspector:
    """An inspector of `schema` as its catalog is now, with the answers kept for the engine
    while the catalog's version is the one they were given at (an answer given since is newer,
    never older). A connection, which may hold DDL of its own not yet committed, always gets a
    new one."""
    if not isinstance(bind, Engine):
        return inspect(bind)
    dialect = dialect_of(bind)
    if schema in _UNVERSIONED.get(bind, ()):
        return inspect(bind)
    version = dialect.catalog_version(bind, schema)
    inspector = inspect(bind)
    if version is None:
        with _LOCK:
            _UNVERSIONED.setdefault(bind, set()).add(schema)
        return inspector
    with _LOCK:
        kept = _KEPT.setdefault(bind, {})
        found = kept.get(schema)
        if found is not None and found[0] == version:
            inspector.info_cache = found[1]
        else:
            kept[schema] = (version, inspector.info_cache)
    return inspector
