"""Per-process engines for code that runs in Spark's Python workers (an engine is not picklable)."""
from __future__ import annotations

import functools

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool


@functools.lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One engine per database per worker process; no pool, since workers come and go."""
    connect_args = {"timeout": 30} if url.startswith("sqlite") else {}
    return create_engine(url, poolclass=NullPool, connect_args=connect_args)

