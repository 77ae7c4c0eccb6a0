"""The protocol every database family implements: properties the pipeline branches on, and the
SQL expressions and statements that are spelled differently per database."""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, String, case, cast, extract, func, null, text, tuple_
from sqlalchemy.engine import URL, Connection, Engine

from publisher.dialects.value_lists import ValueLists


class UnknownDialectError(ValueError):
    """The database is one SQLAlchemy knows but the publisher does not speak."""


class Dialect:
    """One database family. The defaults are the standard's; each family overrides where it
    differs, and says why beside the override."""

    name: ClassVar[str]
    """The family, as the registry (`publisher.dialects`) keys it: SQLAlchemy's name of a dialect."""
    title: ClassVar[str]
    """The family as its users name it, for messages."""
    capture: ClassVar[str]
    """The dotted name of the family's capture class (a `publisher.capture.base.Capture`: its
    triggers, their SQL templates and what it installs beside them), imported when first asked
    for: capture sits above the dialects."""
    lock: ClassVar[str] = "publisher.locking.backends.LeaseRow"
    """The dotted name of the lock the publisher holds on the database (a
    `publisher.locking.backends.Backend`): by default a lease row, which a thread renews."""
    triggers_run_as_their_definer: ClassVar[bool] = False
    """A trigger runs with the rights of the user who made it, not of the user whose write fires
    it: triggers a cycle makes anew fail every write where their maker may not log."""
    workshop: ClassVar[str | None] = None
    """The dotted name of the class that drives the family in `publisher bench` and `publisher
    soak` (its default URLs, private server, workload SQL and mix; the protocol is
    `publisher.workshop.databases.DatabaseWorkshop`), imported when first asked for: the workshop
    sits above the product. None: the workshop does not drive this database."""
    visibility: ClassVar[str] = "publisher.subscriptions.visibility.Visibility"
    """The dotted name of the class that says which events a snapshot of the database holds (a
    `publisher.subscriptions.visibility.Visibility`: what a window reads, what a check-out takes
    and a check-in records), imported when first asked for: by default by record_id, which serves
    subscribers where one writer commits at a time (`serves_subscribers`)."""
    status_writing: ClassVar[str] = "publisher.pipeline.planning.WrittenAtFinish"
    """The dotted name of how a large cycle writes its statuses to the event log (a
    `publisher.pipeline.planning.StatusWriting`), imported when first asked for: the pipeline
    sits above the dialects. By default once its output is durable, in a short transaction: an
    open UPDATE of the event log's rows would hold back the application's writers where it locks
    the gap after the rows it marks, or the whole database (one writer)."""
    copy_reader: ClassVar[str | None] = None
    """The dotted name of the module that reads rows in COPY's text format, far cheaper than a
    cursor's rows (`can_copy`, `copy_batches`, `copy_texts`, `copy_blocks`,
    `text_columns_options`), imported when first asked for (`copy_reading`); None where the
    database has no COPY."""
    gives_way_codes: ClassVar[frozenset[str]] = frozenset()
    gives_way_message: ClassVar[str | None] = None
    """The error codes (or message) of a statement that met another transaction's lock and gave way."""
    analyze_needs: ClassVar[str] = "the rights ANALYZE needs on it"
    """What the publisher's user needs to refresh the event log's statistics, as said when it could not."""

    def value_lists(self) -> ValueLists:
        """How a statement names many values of one column (keys, record_ids): a parameter each."""
        return ValueLists()

    def inexact_text_columns(self, engine: Engine, schema: str | None, table: str,
                             columns: Sequence[str]) -> list[tuple[str, str, str]]:
        """(column, its type, its collation) of each of the table's `columns` that compares
        text by a collation that may call two texts equal ('N' and 'n'): none where text
        compares byte for byte."""
        return []

    def boolean_type(self, sql_type: Any) -> bool:
        """Whether a column of this SQLAlchemy type (one of the database's own, as reflected)
        holds booleans though its type is no `Boolean`: none by default."""
        return False

    def keys_spelled_by_type(self) -> bool:
        """Whether a key column's values are spelled by its declared type in a table_key (a date,
        a boolean, a number as its type prints it): a column holds values of its type. An integer
        key is spelled as one everywhere."""
        return True

    def matched_as_text(self, sql_type: Any) -> bool:
        """Whether query-back finds a row by the text of a column of this SQLAlchemy type rather
        than by its value: no, a column holds values of its type, which compare as logged."""
        return False

    def environment_errors(self) -> tuple[type[BaseException], ...]:
        """The driver's own exceptions that say the database is away rather than a row wrong:
        raised where the publisher uses the driver directly (COPY), not through SQLAlchemy."""
        return ()

    def refused_for_rights(self, exc: BaseException | None) -> bool:
        """Whether the driver's exception says the user may not (a privilege it lacks): no,
        where a database has no users."""
        return False

    def script_calls(self, script: str) -> list[str]:
        """A script (`publisher checkin -f`) as the calls the driver takes: the whole script in
        one, which the driver runs statement by statement (none where it is blank)."""
        return [script] if script.strip() else []

    def ids_given_again(self, conn: Connection, table: str) -> bool:
        """Whether the database may give a new row of `table` the id of a deleted one (the
        highest's, once its row is deleted): never, where ids come from a sequence."""
        return False

    def holds_any(self, column: ColumnElement[Any], characters: str) -> ColumnElement[bool]:
        """Whether a text holds a character of `characters`, a bracket expression (`[^ -~]`),
        which a regular expression and a GLOB pattern read alike."""
        return column.regexp_match(characters)

    def try_lock_sql(self) -> str:
        """A query that takes the publisher's lock for the session at once, true if it did, where
        `lock` is a lock that lasts as long as the session: none where it is a lease row."""
        raise NotImplementedError(f"the publisher's lock on {self.name} is a lease row")

    def lock_holder_sql(self) -> str:
        """A query for who holds the lock `try_lock_sql` did not take."""
        raise NotImplementedError(f"the publisher's lock on {self.name} is a lease row")

    def session_sql(self) -> str:
        """A query for the user and host of the database session `:id`."""
        raise NotImplementedError(f"the publisher's lock on {self.name} names no session")

    @property
    def copy_out(self) -> bool:
        """Rows can be read in COPY's text format (the database names a `copy_reader`)."""
        return self.copy_reader is not None

    def copy_reading(self) -> ModuleType | None:
        """The module that reads rows through COPY (`copy_reader`), None where there is none."""
        return None if self.copy_reader is None else importlib.import_module(self.copy_reader)

    def copy_out_sql(self, query: str) -> str:
        """The statement that sends `query`'s rows as CSV, where `copy_out`."""
        raise NotImplementedError(f"{self.name} has no COPY")

    def copy_encoding(self, conn: Connection) -> str:
        """The name of the encoding COPY sends text in."""
        return self.stored_encoding(conn)[1]

    def stored_encoding(self, conn: Connection) -> tuple[str, str]:
        """(Python codec, the database's name) of the encoding text read as bytes is in."""
        return "utf-8", "UTF-8"

    def client_script(self, statements: Sequence[str]) -> str:
        """The statements as a script the database's own command-line client runs."""
        return "".join(statement.rstrip().rstrip(";") + ";\n\n" for statement in statements)

    def connect_args(self, timeout: float) -> dict[str, Any]:
        """Driver arguments for a connection that waits up to `timeout` seconds for a lock."""
        return {}

    def url(self, url: URL) -> URL:
        """The URL the publisher connects with, from the configured one."""
        return url

    def readable_time(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """The event_time where it can be read as a time, else NULL. A driver cannot hand over
        an infinite time nor years outside 1..9999, and would fail the whole read on one."""
        return case((extract("year", column).between(1, 9999), column), else_=null())

    def time_key(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """The event_time as future-event processing orders it: a row that is no time first."""
        return column

    def time_now(self) -> ColumnElement[Any]:
        """The database's current time, comparable with `time_key`."""
        return func.now()

    def octets(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """A text value's length in bytes, NULL as 0; the database knows it without reading the
        value out (from a header the value is stored with)."""
        return func.coalesce(func.octet_length(column), 0)

    def exact(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """A text column as compared byte for byte and read without decoding: the column itself,
        where the driver can decode every text the database holds."""
        return column

    def text_as_read(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """A column as its text, read where one bad value must not fail the whole read (an
        isolated row's line, an event's type): cast to text, which the driver decodes."""
        return cast(column, String)

    def event_time_as_read(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """The event log's event_time as the cycle's read takes it: as `readable_time` gives it,
        since a driver fails the whole read on a time it cannot hand over."""
        return self.readable_time(column)

    def event_time_apart(self, column: ColumnElement[Any],
                         readable: ColumnElement[Any]) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        """What the cycle's read takes beside the event_time (`event_time_as_read`), given its
        `readable_time`: its time where the event_time is not read as one (none here), and its
        text where it is no time, which the message that rejects it shows."""
        return null(), case((readable.is_(None), cast(column, String)), else_=null())

    def statement_mark(self, event_time: ColumnElement[Any]) -> ColumnElement[Any] | None:
        """What every event one statement logs shares and the next statement's do not, by which a
        window keeps a statement's events together when they carry no transaction (given the
        event log's `event_time`): none where no column tells a statement."""
        return None

    def keys_after(self, columns: Sequence[ColumnElement[Any]],
                   values: Sequence[ColumnElement[Any]]) -> ColumnElement[bool]:
        """Whether a row's key (`columns`, two or more) comes after `values` in key order, as a
        condition the key's index serves: a row-value comparison `(a, b) > (x, y)`."""
        return tuple_(*columns) > tuple_(*values)

    def analyze(self, table: str, columns: Sequence[str] = ()) -> str:
        """The statement that refreshes a table's statistics (`table` and `columns` already
        quoted): of `columns` only where the database can sample them alone, else the table's."""
        return f"ANALYZE {table}"

    @contextmanager
    def skipped_warnings(self, conn: Connection) -> Iterator[list[str]]:
        """The warnings of a table skipped by the statements the block runs in `conn`'s
        transaction, where the server skips rather than refuses (PostgreSQL's ANALYZE of a table
        its user may not analyze); here, none: a refusal is an error."""
        yield []

    def next_record_id_sql(self, log: str, record_id: str, record_id_name: str) -> str:
        """SQL of a record_id above every event logged so far in `log` (quoted, as its column
        `record_id`; `record_id_name` unquoted): one above the highest there."""
        return f"((SELECT COALESCE(MAX({record_id}), 0) FROM {log}) + 1)"

    def current_schema_sql(self) -> str:
        """A query for the connection's default schema."""
        return "SELECT current_schema()"

    def schema_first_sql(self, schema: str) -> str | None:
        """A statement after which a session finds an unqualified table name in `schema` first;
        None where a database has one namespace."""
        return None

    def table_schema(self, configured: str | None) -> str | None:
        """The schema that qualifies table names in SQL: the configured one (None: the
        connection's default)."""
        return configured

    def default_schema(self, engine: Engine) -> str:
        """The schema a table is in when its name is not qualified, as associations name it."""
        with engine.connect() as conn:
            return str(conn.execute(text(self.current_schema_sql())).scalar_one())

    def value_text_sql(self, ref: str, binary: bool, sql_type: str) -> str:
        """SQL for the text of the value `ref` (an already quoted column reference), as the
        triggers log it: `binary` for a binary column, `sql_type` the type's name."""
        return ref if binary else f"CAST({ref} AS TEXT)"

    def read_value_sql(self, ref: str, binary: bool, sql_type: str) -> str:
        """SQL a read selects a value column (not a key column: keys are compared by their text)
        with: its text as the triggers log it, or what the reader encodes to that text itself
        (`valuetext.encode_read`)."""
        return self.value_text_sql(ref, binary, sql_type)

    def settings_sql(self, local: bool) -> list[str]:
        """Statements that put a session (or, with `local`, a transaction) where the texts of
        values are written as the triggers write them."""
        return []

    def prepare_reading(self, driver_connection: Any) -> None:
        """Make the driver's connection hand over what the tables hold, however they hold it:
        nothing to do where the database keeps each column's type."""

    def key_lookups_sql(self) -> list[str]:
        """Statements that make a session look rows up by key rather than scan their table."""
        return []

    def textless_type(self, sql_type: str) -> str | None:
        """What to call a column type (as SQLAlchemy names it) whose values have no text to log
        or to read back, or None: every type has one."""
        return None

    def begin_reading_rows(self, lock_wait: str) -> list[str]:
        """Statements that begin a transaction which reads rows under a share lock and logs
        events about them, waiting at most `lock_wait` for a writer's lock before giving way."""
        return [*self.begin_alone(), *self.settings_sql(local=True)]

    def catalog_version(self, engine: Engine, schema: str | None) -> str | None:
        """A text that changes whenever a table, view, column, key or index of `schema` does,
        read in one cheap statement; None where the database offers none (asked without a
        connection), or none as cheap for this schema, and every reflection asks the catalog again."""
        return None

    def begin_alone(self) -> list[str]:
        """Statements that begin a transaction no other writer commits in, where the database
        has one writer at a time: none where writers commit side by side."""
        return []

    def serves_subscribers(self) -> bool:
        """Whether a check-out's snapshot can tell the events committed before it from those
        committed after (`visibility`): not by record_id alone, where writers commit side by side."""
        return False


def named_class(dotted: str) -> type:
    """The class a dialect names by its dotted name (`Dialect.capture`, `Dialect.lock`)."""
    module, _, name = dotted.rpartition(".")
    found = getattr(importlib.import_module(module), name)
    if not isinstance(found, type):
        raise TypeError(f"{dotted} is no class")
    return found
