"""MySQL and MariaDB: one family, the same SQL."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, text
from sqlalchemy.engine import URL, Engine

from publisher.dialects.base import Dialect

DEFAULT_DRIVER = "pymysql"
"""The driver a bare mysql:// or mariadb:// URL gets: PyMySQL is pure Python, so it installs
with the publisher everywhere, with no client library or compiler (docs: guides/mariadb.md)."""
MYSQL_TIME_ZONE = "+00:00"
"""The time_zone a TIMESTAMP is read in; the capture triggers set it around their work and put
the changing session's back, and query-back's sessions run with it."""


class MariaDB(Dialect):
    """InnoDB's UPDATE locks the gap after the rows it marks, holding back the triggers' inserts:
    a cycle writes its statuses once its output is durable (`Dialect.status_writing`)."""

    name = "mysql"
    title = "MariaDB/MySQL"
    capture = "publisher.databases.mariadb.capture.MariaDBCapture"
    workshop = "publisher.databases.mariadb.workshop.MariaDBWorkshop"
    lock = "publisher.databases.mariadb.lock.NamedLock"
    triggers_run_as_their_definer = True
    gives_way_codes = frozenset({"1205", "1213"})
    """Lock wait timeout, and deadlock (InnoDB picks the transaction with less to undo: a snapshot's
    chunk rather than the application's)."""
    analyze_needs = "INSERT on it"

    def boolean_type(self, sql_type: Any) -> bool:
        """MySQL and MariaDB make a BOOLEAN column TINYINT(1), and reflect it so."""
        from sqlalchemy.dialects.mysql import TINYINT

        return isinstance(sql_type, TINYINT) and sql_type.display_width == 1

    def environment_errors(self) -> tuple[type[BaseException], ...]:
        import pymysql

        return (pymysql.err.OperationalError,)

    def refused_for_rights(self, exc: BaseException | None) -> bool:
        """A command, column or database denied the user (1142, 1143, 1044), a privilege it
        lacks (1227), or SUPER where binary logging is on (1419)."""
        args: tuple[object, ...] = getattr(exc, "args", ())
        return bool(args) and args[0] in _DENIED

    def url(self, url: URL) -> URL:
        """The default driver where the URL names none, and utf8mb4 unless it asks for a
        character set: the server's utf8mb3 default would garble every character outside the
        Basic Multilingual Plane."""
        if "+" not in url.drivername:
            url = url.set(drivername=f"{url.drivername}+{DEFAULT_DRIVER}")
        if "charset" not in url.query:
            url = url.update_query_dict({"charset": "utf8mb4"})
        return url

    def inexact_text_columns(self, engine: Engine, schema: str | None, table: str,
                             columns: Sequence[str]) -> list[tuple[str, str, str]]:
        """A column's collation is the server's default unless made binary (`_bin`), and the
        defaults ignore case."""
        names = {f"c{i}": column for i, column in enumerate(columns)}
        with engine.connect() as conn:
            found = conn.execute(
                text("SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS "
                     "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
                     f"AND COLUMN_NAME IN ({', '.join(':' + name for name in names)})"),
                {"schema": schema, "table": table, **names},
            ).all()
        return [(str(column), str(column_type), str(collation)) for column, column_type, collation in found
                if collation is not None and not collation.endswith("_bin")]

    def try_lock_sql(self) -> str:
        """The named lock `:name`, not waited for."""
        return "SELECT GET_LOCK(:name, 0)"

    def lock_holder_sql(self) -> str:
        """The id of the connection holding the named lock `:name`."""
        return "SELECT IS_USED_LOCK(:name)"

    def session_sql(self) -> str:
        return "SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = :id"

    def client_script(self, statements: Sequence[str]) -> str:
        """The mariadb/mysql clients end a statement at the first ';', inside a trigger's
        BEGIN ... END too: the script changes the delimiter around the statements."""
        if not statements:
            return ""
        body = "".join(statement.rstrip().rstrip(";") + "\n//\n\n" for statement in statements)
        return f"DELIMITER //\n{body}DELIMITER ;\n"

    def time_now(self) -> ColumnElement[Any]:
        """In UTC, as the event log's DATETIME is written."""
        return func.utc_timestamp(6)

    def octets(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.coalesce(func.length(column), 0)

    def keys_after(self, columns: Sequence[ColumnElement[Any]],
                   values: Sequence[ColumnElement[Any]]) -> ColumnElement[bool]:
        """Spelled out, `a > x OR (a = x AND b > y)`: MariaDB uses an index for that, not for
        `(a, b) > (x, y)`."""
        alternatives = []
        for i in range(len(values)):
            equal = [columns[j] == values[j] for j in range(i)]
            alternatives.append(and_(*equal, columns[i] > values[i]))
        return or_(*alternatives)

    def analyze(self, table: str, columns: Sequence[str] = ()) -> str:
        return f"ANALYZE TABLE {table}"

    def current_schema_sql(self) -> str:
        return "SELECT DATABASE()"

    def schema_first_sql(self, schema: str) -> str | None:
        return "USE `" + schema.replace("`", "``") + "`"

    def value_text_sql(self, ref: str, binary: bool, sql_type: str) -> str:
        """Binary as base64 without line breaks (TO_BASE64 breaks every 76 characters),
        everything else its cast to utf8mb4 text, whatever the changing session's character set;
        a single-precision FLOAT by way of DOUBLE, whose text is exact: a FLOAT's own has six
        digits, names 0.100000001490116 '0.1', and finds no row."""
        if binary:
            return f"REPLACE(TO_BASE64({ref}), CHAR(10 USING ascii), '')"
        if sql_type.upper().startswith("FLOAT"):
            ref = f"CAST({ref} AS DOUBLE)"
        return f"CAST({ref} AS CHAR CHARACTER SET utf8mb4)"

    def read_value_sql(self, ref: str, binary: bool, sql_type: str) -> str:
        """Binary as its bytes, which the reader encodes as the trigger's base64: REPLACE takes
        the line breaks out of TO_BASE64's text in time that grows with the square of its
        length (1.5 s for a value of 3 MB, against 10 ms for TO_BASE64 alone)."""
        return ref if binary else self.value_text_sql(ref, binary, sql_type)

    def settings_sql(self, local: bool) -> list[str]:
        """The session's time zone, which has no transaction scope."""
        return [f"SET time_zone = '{MYSQL_TIME_ZONE}'"]

    def begin_reading_rows(self, lock_wait: str) -> list[str]:
        """READ COMMITTED for the chunk: under InnoDB's REPEATABLE READ the chunk's first plain
        read fixes its snapshot, its locked read then sees a row committed since, and the events
        read after it do not see that row's event, so the row would be written directly and its
        event publish it again (an <add> of an object the consumer holds)."""
        return ["SET TRANSACTION ISOLATION LEVEL READ COMMITTED", *super().begin_reading_rows(lock_wait)]

    def textless_type(self, sql_type: str) -> str | None:
        """BIT, and a type SQLAlchemy does not know (spatial, named NULL)."""
        name = sql_type.upper()
        return "BIT" if name.startswith("BIT") else "an unknown (e.g. spatial)" if name == "NULL" else None


_DENIED = frozenset({1044, 1142, 1143, 1227, 1419})
