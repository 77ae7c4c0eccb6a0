"""Per-process engines for code that runs in Spark's Python workers (an engine is not picklable)."""
from __future__ import annotations

import functools

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from publisher.dialects import dialect_of


@functools.lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One engine per database per worker process; no pool, since workers come and go."""
    connect_args = dialect_of(make_url(url).get_backend_name()).connect_args(30)
    return create_engine(url, poolclass=NullPool, connect_args=connect_args)

