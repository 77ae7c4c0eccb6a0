"""How a statement names many values of one column (a chunk of keys, of record_ids, of a
snapshot's keys): by default each value is a parameter of its own, in an IN list or a row of an
executemany, so a statement names a bounded number of them. A database that binds a whole list
as one parameter gives a `ValueLists` of its own (`Dialect.value_lists`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from sqlalchemy import Column, ColumnElement, Connection, Table, bindparam, insert, or_
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import NullType, TypeEngine


class IdRange(Protocol):
    """Consecutive record_ids first..last (`model.runs.IdRun`)."""

    @property
    def first(self) -> int: ...

    @property
    def last(self) -> int: ...


class ValueLists:
    """Lists of values as IN lists and ranges, a parameter each."""

    keys_per_select: ClassVar[int] = 500
    """Keys a query-back SELECT names by `key_among`, each a parameter of its own: under the
    fewest parameters a supported database takes."""
    ids_per_statement: ClassVar[int] = 1000
    """record_ids an acknowledgement's statement names by `ids`."""
    ranges_per_statement: ClassVar[int] = 500
    """Ranges of record_ids an acknowledgement's statement names by `ranges`."""

    def key_among(self, column: ColumnElement[Any], keys: Sequence[int | str | bytes]) -> ColumnElement[bool]:
        """Whether a one-column key is one of `keys`, of a plain type (integers, texts:
        `ColumnInfo.in_arrays`), bound untyped so that the database reads them as the column's
        type: an IN list."""
        return column.in_(bindparam("keys", list(keys), expanding=True, type_=NullType()))

    def ids(self, record_id: ColumnElement[Any], runs: Sequence[IdRange]) -> ColumnElement[bool]:
        """Whether a record_id is one of the ids of `runs` (in record_id order): the W or E rows of
        an acknowledgement, or the rows it marks again; as `ranges`."""
        return self.ranges(record_id, runs)

    def ranges(self, record_id: ColumnElement[Any], runs: Sequence[IdRange]) -> ColumnElement[bool]:
        """Whether a record_id is within one of `runs` (in record_id order): the single ids as one
        IN list, the others BETWEEN their ends."""
        singles = [r.first for r in runs if r.first == r.last]
        spans = [record_id.between(r.first, r.last) for r in runs if r.first != r.last]
        return or_(*([record_id.in_(singles)] if singles else []), *spans)

    def needs_statistics(self, runs: Sequence[IdRange]) -> bool:
        """Whether a statement of `ranges` is planned well only on statistics that know the
        cycle's rows, so the acknowledgement refreshes them first: no, where each row is simply
        tested against the ranges."""
        return False

    def rows_in_order(self, table: Table, listed: Column[Any], shared: Mapping[Column[Any], TypeEngine[Any]],
                      computed: Mapping[Column[Any], ColumnElement[Any]]) -> RowsInOrder:
        """An INSERT into `table` of a row per value of `listed`, with the `shared` columns (of
        those types) alike and the `computed` ones as their SQL, the rows numbered in the values'
        order (a snapshot's events, one per key)."""
        return RowsInOrder(table, listed, computed)


class RowsInOrder:
    """A statement per row, run as one executemany, in the values' order."""

    def __init__(self, table: Table, listed: Column[Any], computed: Mapping[Column[Any], ColumnElement[Any]]) -> None:
        self.listed = listed.key
        self.statement: Executable = insert(table).values(dict(computed))

    def insert(self, conn: Connection, shared: Mapping[str, Any], values: Sequence[Any]) -> None:
        """A row per value, with the `shared` values (by column key)."""
        conn.execute(self.statement, [{**shared, self.listed: value} for value in values])
