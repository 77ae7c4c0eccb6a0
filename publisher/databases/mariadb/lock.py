"""MariaDB's and MySQL's lock: a named lock (GET_LOCK), which lasts as long as the session that took it."""
from __future__ import annotations

from sqlalchemy import BigInteger, Column, Connection, MetaData, String, Table, create_engine, func, select, text
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateTable

from publisher.config import Config
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.locking.backends import APPLICATION_NAME, SessionLock, advisory_key, describe_owner


class NamedLock(SessionLock):
    """GET_LOCK on a dedicated autocommit connection. A named lock is the server's, not the
    database's, so its name holds the database; names are at most 64 characters, so a hash.
    The server tells only which connection holds a named lock, so the holder writes its host:pid
    beside its connection id in `<event_log>_lock_owner`, for a waiting publisher to name it."""

    def __init__(self, config: Config, owner: str, locked: str) -> None:
        self.config = config
        self.locked = locked
        self.engine = create_engine(config.database.sqlalchemy_url(), poolclass=NullPool)
        self.dialect = dialect_of(self.engine)
        self.connection = None
        self.name = config.event_log.table
        self.lock_name = ""
        self.owner = owner
        self.owners = Table(
            f"{config.event_log.table}_lock_owner",
            MetaData(),
            Column("name", String(64), primary_key=True),
            Column("connection_id", BigInteger, nullable=False),
            Column("owner", String(255), nullable=False),
            schema=table_schema(config, self.engine),
        )

    def _connect(self) -> Connection:
        if self.connection is None:
            self.connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            schema = self.config.database.schema or str(
                self.connection.execute(text(self.dialect.current_schema_sql())).scalar())
            self.name = f"{schema}.{self.locked}"
            self.lock_name = f"{APPLICATION_NAME}:{advisory_key(schema, self.locked) & 0xFFFF_FFFF_FFFF_FFFF:016x}"
        return self.connection

    def try_acquire(self) -> str | None:
        conn = self._connect()
        conn.execute(CreateTable(self.owners, if_not_exists=True))
        if conn.execute(text(self.dialect.try_lock_sql()), {"name": self.lock_name}).scalar() == 1:
            t = self.owners
            conn.execute(t.delete().where(t.c.name == self.lock_name))
            conn.execute(t.insert().values(name=self.lock_name, connection_id=func.connection_id(), owner=self.owner))
            return None
        return self._holder(conn)

    def _holder(self, conn: Connection) -> str:
        holder = conn.execute(text(self.dialect.lock_holder_sql()), {"name": self.lock_name}).scalar()
        if holder is None:
            return "another session (it has just let go)"
        t = self.owners
        owner = conn.execute(
            select(t.c.owner).where(t.c.name == self.lock_name, t.c.connection_id == holder)
        ).scalar()
        if owner is not None:
            return describe_owner(str(owner))
        row = conn.execute(text(self.dialect.session_sql()), {"id": holder}).first()
        user, host = row if row is not None else ("unknown", "unknown")
        return f"the database connection {holder} (user {user} from {host})"
