"""PostgreSQL's lock: an advisory lock, which lasts as long as the session that took it."""
from __future__ import annotations

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.pool import NullPool

from publisher.config import Config
from publisher.dialects import dialect_of
from publisher.locking.backends import APPLICATION_NAME, SessionLock, advisory_key, describe_owner


class AdvisoryLock(SessionLock):
    """pg_try_advisory_lock on a dedicated autocommit connection, tagged with host:pid for others to see."""

    def __init__(self, config: Config, owner: str, locked: str) -> None:
        self.config = config
        self.locked = locked
        self.engine = create_engine(
            config.database.sqlalchemy_url(),
            poolclass=NullPool,
            connect_args={"application_name": f"{APPLICATION_NAME} {owner}"[:63]},
        )
        self.dialect = dialect_of(self.engine)
        self.connection: Connection | None = None
        self.name = config.event_log.table
        self.key = 0

    def _connect(self) -> Connection:
        if self.connection is None:
            self.connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            schema = self.config.database.schema or str(
                self.connection.execute(text(self.dialect.current_schema_sql())).scalar_one()
            )
            self.name = f"{schema}.{self.locked}"
            self.key = advisory_key(schema, self.locked)
        return self.connection

    def try_acquire(self) -> str | None:
        conn = self._connect()
        if conn.execute(text(self.dialect.try_lock_sql()), {"key": self.key}).scalar_one():
            return None
        return self._holder(conn)

    def _holder(self, conn: Connection) -> str:
        unsigned = self.key & 0xFFFF_FFFF_FFFF_FFFF
        row = conn.execute(
            text(self.dialect.lock_holder_sql()),
            {"high": unsigned >> 32, "low": unsigned & 0xFFFF_FFFF},
        ).first()
        if row is None:
            return "another session (it has just let go)"
        application, backend_pid, client = row
        prefix = f"{APPLICATION_NAME} "
        if application and application.startswith(prefix):
            return describe_owner(application[len(prefix):])
        return f"PostgreSQL session {backend_pid} ({application or 'no application name'}, from {client or 'local'})"
