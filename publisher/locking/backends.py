"""The locks `PublisherLock` holds, as each database's dialect names them (`Dialect.lock`): a
lease row that a thread renews, which any database can hold, or a lock of the database's own that
lasts as long as a session (`SessionLock`; each database's own in its folder)."""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
import uuid
from abc import ABC, abstractmethod
from enum import Enum

from sqlalchemy import (
    Column,
    Connection,
    Double,
    Engine,
    MetaData,
    String,
    Table,
    create_engine,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateTable

from publisher.config import Config, Reader
from publisher.database import LOCK_WAIT_SECONDS, table_schema
from publisher.dialects import Dialect, dialect_of, named_class
from publisher.errors import root_cause

log = logging.getLogger("publisher")

APPLICATION_NAME = "event-log-publisher"


def this_process() -> str:
    """How a lock names its holder: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def describe_owner(owner: str) -> str:
    """host:pid as a reader wants it."""
    host, _, pid = owner.rpartition(":")
    return f"the publisher with pid {pid} on host {host}" if host else f"the publisher {owner}"


def advisory_key(schema: str, table: str) -> int:
    """A stable signed 64-bit key per event log, the same in every process and Python version."""
    digest = hashlib.blake2b(f"{APPLICATION_NAME}:{schema}.{table}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class LockScope(Enum):
    """What a reader's lock keeps to one process at a time."""

    CYCLES = "cycles"
    """Its cycles: the status mode's statuses, or a subscriber's check-outs."""
    RESYNCS = "resyncs"
    """Publishing again the rows migrations owe it (`service.migrate`), which runs beside its cycles."""


def locked_name(config: Config, reader: Reader, scope: LockScope = LockScope.CYCLES) -> str:
    """What a lock is named after: the event log, or one subscriber's check-outs of it; its
    resyncs' lock, the same with "(resyncs)"."""
    table = config.event_log.table
    name = table if reader.subscriber is None else f"{table} for subscriber {reader.subscriber}"
    return name if scope is LockScope.CYCLES else f"{name} (resyncs)"


def lock_backend(dialect: Dialect) -> type[Backend]:
    """The lock a database family names (`Dialect.lock`)."""
    found = named_class(dialect.lock)
    if not issubclass(found, Backend):
        raise TypeError(f"{dialect.lock} (the lock of {dialect.name!r}) is no {__name__}.Backend")
    return found


class Backend(ABC):
    name: str

    @classmethod
    def open(cls, config: Config, owner: str, locked: str, lease_seconds: float) -> Backend:
        """The lock named `locked` (`locked_name`) on the configured database, for `owner`;
        `lease_seconds`: how long a lease lasts, where the lock is one that is renewed."""
        return cls(config, owner, locked)  # type: ignore[call-arg]

    @abstractmethod
    def try_acquire(self) -> str | None:
        """None when the lock is now ours, else who holds it."""

    @abstractmethod
    def renew(self) -> bool:
        """Keep the lock; False when it is no longer ours."""

    @abstractmethod
    def may_still_hold(self) -> bool:
        """After a failed renewal: whether the lock can still be ours."""

    @abstractmethod
    def release(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


class SessionLock(Backend):
    """A lock that lasts as long as a database session: taken on a dedicated autocommit
    connection (`connection`, of `engine`), and let go by closing it."""

    engine: Engine
    connection: Connection | None

    def renew(self) -> bool:
        """Nothing to extend: the lock lasts as long as the session, so check that the session lives."""
        conn = self.connection
        if conn is None:
            return False
        try:
            conn.execute(text("SELECT 1"))
        except DBAPIError:
            return False
        return True

    def may_still_hold(self) -> bool:
        return False

    def release(self) -> None:
        self.close()

    def close(self) -> None:
        """Closing the session ends its advisory locks; no unlock call needed."""
        if self.connection is not None:
            try:
                self.connection.close()
            except DBAPIError:
                pass
            self.connection = None
        self.engine.dispose()


class LeaseRow(Backend):
    """A row per event log in `<event_log>_lock`: owner host:pid, a token per lock object, lease expiry."""

    @classmethod
    def open(cls, config: Config, owner: str, locked: str, lease_seconds: float) -> Backend:
        return cls(config, owner, lease_seconds, locked)

    def __init__(self, config: Config, owner: str, lease_seconds: float, locked: str) -> None:
        url = make_url(config.database.sqlalchemy_url())
        connect_args = dialect_of(url.get_backend_name()).connect_args(LOCK_WAIT_SECONDS)
        self.engine: Engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
        self.owner = owner
        self.token = uuid.uuid4().hex
        self.lease_seconds = lease_seconds
        self.expires_at = 0.0
        schema = table_schema(config, self.engine)
        self.name = f"{schema}.{locked}" if schema else locked
        self.table = Table(
            f"{config.event_log.table}_lock",
            MetaData(),
            Column("name", String(255), primary_key=True),
            Column("owner", String(255), nullable=False),
            Column("token", String(32), nullable=False),
            Column("acquired_at", Double, nullable=False),
            Column("expires_at", Double, nullable=False),
            schema=schema,
        )
        self.created = False

    def try_acquire(self) -> str | None:
        if not self.created:
            with self.engine.begin() as conn:
                conn.execute(CreateTable(self.table, if_not_exists=True))
            self.created = True
        try:
            return self._attempt()
        except IntegrityError:
            return self._attempt()

    def _attempt(self) -> str | None:
        t = self.table
        now = time.time()
        expires_at = now + self.lease_seconds
        values = {"owner": self.owner, "token": self.token, "acquired_at": now, "expires_at": expires_at}
        with self.engine.begin() as conn:
            row = conn.execute(select(t.c.owner, t.c.token, t.c.expires_at).where(t.c.name == self.name)).first()
            if row is None:
                conn.execute(t.insert().values(name=self.name, **values))
                self.expires_at = expires_at
                return None
            conditions = [t.c.name == self.name, t.c.token == row.token]
            if row.token != self.token and not _is_dead_here(row.owner):
                conditions.append(t.c.expires_at < now)
            if conn.execute(t.update().where(*conditions).values(**values)).rowcount == 1:
                if row.token != self.token:
                    log.info("took over the lock of %s from %s", self.name, row.owner)
                self.expires_at = expires_at
                return None
            return describe_owner(row.owner)

    def renew(self) -> bool:
        t = self.table
        expires_at = time.time() + self.lease_seconds
        with self.engine.begin() as conn:
            renewed = conn.execute(
                t.update().where(t.c.name == self.name, t.c.token == self.token).values(expires_at=expires_at)
            ).rowcount
        if renewed:
            self.expires_at = expires_at
        return renewed == 1

    def may_still_hold(self) -> bool:
        return time.time() < self.expires_at

    def release(self) -> None:
        t = self.table
        try:
            with self.engine.begin() as conn:
                conn.execute(t.delete().where(t.c.name == self.name, t.c.token == self.token))
        except DBAPIError as exc:
            log.warning("could not release the lock of %s (it expires by itself): %s", self.name, root_cause(exc))

    def close(self) -> None:
        self.engine.dispose()


def _is_dead_here(owner: str) -> bool:
    """Whether `owner` (host:pid) is a process of this host that no longer runs."""
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
