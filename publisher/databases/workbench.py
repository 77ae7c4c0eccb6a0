"""What `publisher bench` and `publisher soak` ask of a database: the base of each database's
`workshop.py` (named by `Dialect.workshop`), holding the answer of a database that has no such
thing. The workshop finds a database through the registry and asks it; it never compares names.

Kept below the workshop so that a database's folder needs nothing from it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Engine


class Workbench:
    """One database as the workshop drives it."""

    name: ClassVar[str]
    """The name `--database` takes and the reports print."""
    bench_url: ClassVar[str | None] = None
    """The server `publisher bench` uses when given no --url; None for a database in a file."""
    soak_first: ClassVar[bool] = False
    """Soaked before the others when all are: the quick one, which needs no server."""

    def file_url(self, path: Path) -> str | None:
        """A URL of a database in the file `path` (the bench's own, in its work directory), or
        None for a database on a server."""
        return None

    def backlog(self, schema: str) -> Any | None:
        """The SQL that makes the drain benchmark's tables and events on this database (its
        `create`, `insert_usr`, `insert_grp`, `new_photo`, `later`, `log_field_query_backs`,
        `analyze`, `clear`, `drop_sql`, `schema` and `app_user`), or None: not measured here."""
        return None

    def capture_mix(self) -> Any | None:
        """What runs `bench --capture`'s mix on this database (its `schema_word`, `cascade`,
        `table_ddl`, `seed`, `settle` and `drive`), or None: no concurrent writers to measure."""
        return None

    def vacuum_sql(self, table: str) -> str:
        """Space and statistics made good before a floor is timed."""
        return "VACUUM"

    def indexed_copy_sql(self, copy: str, table: str) -> str | None:
        """CREATE TABLE `copy` with `table`'s columns and indexes, for the floor's UPDATE on an
        indexed copy; None where the database cannot copy a table's indexes."""
        return None

    # publisher soak

    def soak_server(self, directory: Path) -> Any:
        """The soak's own database under `directory`: a `publisher.databases.servers.NoServer`
        or a private server with the same attributes."""
        raise NotImplementedError(f"publisher soak does not drive {self.name}")

    soak_acct_ddl: ClassVar[str]
    """CREATE TABLE {t} of the soak's `acct`: a compound key of text, date and `part`, and
    NULLable columns of several types and a binary one."""
    soak_parts: ClassVar[tuple[Any, ...]] = (0, 1, 2)
    """The values of `acct.part`, the key's third column."""
    soak_retype_sql: ClassVar[str | None] = None
    """ALTER TABLE {t} to retype `score` to a wider decimal; None where a type is not kept."""
    soak_plain_ddl: ClassVar[bool] = False
    """The soak's migrations run as plain DDL from another session (the capture follows them);
    else through `publisher migrate`."""
    soak_styles_turned: ClassVar[bool] = False
    """Field and row style the other way round from the others for the same seed, so that
    every run has both on `acct`."""
    soak_sockets: ClassVar[tuple[str, ...]] = ()
    """How the names of the server's sockets begin, beside `*.sock`: not copied by `--keep`."""
    serves_subscribers: ClassVar[bool] = True
    """Whether the publisher serves subscribers on this database."""

    def soak_schema_sql(self, schema: str) -> list[str]:
        """What makes the soak's schema, where the server did not."""
        return []

    def soak_bind(self, value: Any) -> Any:
        """A value as the driver binds it."""
        return value

    def soak_session(self, engine: Engine) -> None:
        """What each of the writers' connections needs set first."""
