"""PostgreSQL binds a whole list as one array parameter: a chunk of keys or ids is one parameter
however long (`= ANY(…)`, `unnest`), so a statement names many more of them than a parameter each
would let it (`Dialect.value_lists`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    func,
    insert,
    select,
)
from sqlalchemy.types import NullType, TypeEngine

from publisher.dialects.value_lists import IdRange, RowsInOrder, ValueLists

TRUSTED_JOIN = 1_000_000
"""Ids spanned × ranges of an acknowledgement's statement from which its W or E rows go as an
array of ids (`ValueArrays.ids`), and its S ranges are planned on fresh statistics
(`needs_statistics`): from statistics taken before the cycle's rows arrived the planner expects
no `N` row and joins each row with every range (measured: 65 s for 200k rows in 2,000 ranges,
1.7 s once analysed). Long runs (every row W, say) stay ranges, which are faster than ids. One
range joins with nothing, and needs no statistics: a window of consecutive ids (the common large
cycle) is marked without an ANALYZE first."""


class ValueArrays(ValueLists):
    """A chunk of keys or ids as one array: integers as a list, other keys as an array literal; a
    snapshot's keys as one INSERT … SELECT numbered by its ORDER BY."""

    keys_per_select = 5_000
    """Fewer round trips, at no parameter's cost."""
    ids_per_statement = ranges_per_statement = 50_000
    """Ranges go as two arrays joined in the statement, and W and E ids as one array (a parameter
    or two however many): the fastest exact way measured, near the time of one UPDATE of every
    row, given statistics that know the cycle's rows (see TRUSTED_JOIN)."""

    def key_among(self, column: ColumnElement[Any], keys: Sequence[int | str | bytes]) -> ColumnElement[bool]:
        """One parameter instead of one per key, which a million-key query-back would spend most
        of its time binding."""
        return column == any_(bindparam("keys", key_array(keys), type_=NullType()))

    def ids(self, record_id: ColumnElement[Any], runs: Sequence[IdRange]) -> ColumnElement[bool]:
        """As one array of ids once a join with the ranges could be planned badly (TRUSTED_JOIN):
        an array of ids is found by index whatever the planner's statistics say."""
        if _joined(runs) < TRUSTED_JOIN:
            return self.ranges(record_id, runs)
        ids = [i for run in runs for i in range(run.first, run.last + 1)]
        return and_(
            record_id.between(runs[0].first, runs[-1].last),
            record_id == func.any(cast(bindparam("ids", ids), ARRAY(BigInteger))),
        )

    def ranges(self, record_id: ColumnElement[Any], runs: Sequence[IdRange]) -> ColumnElement[bool]:
        """A join with the ranges unnested from two arrays; and within the first and last of them,
        so that an index on (status, record_id) is entered at the cycle's rows instead of walking
        every entry a recent drain left behind."""
        spans = func.unnest(
            cast(bindparam("first", [r.first for r in runs]), ARRAY(BigInteger)),
            cast(bindparam("last", [r.last for r in runs]), ARRAY(BigInteger)),
        ).table_valued("first", "last").render_derived(name="spans")
        return and_(
            record_id.between(runs[0].first, runs[-1].last),
            record_id.between(spans.c["first"], spans.c["last"]),
        )

    def needs_statistics(self, runs: Sequence[IdRange]) -> bool:
        return len(runs) > 1 and _joined(runs) >= TRUSTED_JOIN

    def rows_in_order(self, table: Table, listed: Column[Any], shared: Mapping[Column[Any], TypeEngine[Any]],
                      computed: Mapping[Column[Any], ColumnElement[Any]]) -> RowsInOrder:
        return UnnestedRows(table, listed, shared, computed)


def _joined(runs: Sequence[IdRange]) -> int:
    """At worst, the planner joins every row between the first and last id with every range."""
    return len(runs) * (runs[-1].last - runs[0].first + 1)


class UnnestedRows(RowsInOrder):
    """INSERT … SELECT from the array of values WITH ORDINALITY ORDER BY its ordinal: one row per
    value, their ids in the array's order, in one statement."""

    def __init__(self, table: Table, listed: Column[Any], shared: Mapping[Column[Any], TypeEngine[Any]],
                 computed: Mapping[Column[Any], ColumnElement[Any]]) -> None:
        self.names = {column.key: f"p{i}" for i, column in enumerate(shared)}
        values = func.unnest(bindparam("listed", type_=ARRAY(Text))).table_valued(
            "value", with_ordinality="ordinal").render_derived()
        selected = [*(cast(bindparam(self.names[c.key]), t) for c, t in shared.items()), values.c.value,
                    *computed.values()]
        self.statement = insert(table).from_select([*shared, listed, *computed],
                                                   select(*selected).select_from(values).order_by(values.c.ordinal))

    def insert(self, conn: Connection, shared: Mapping[str, Any], values: Sequence[Any]) -> None:
        conn.execute(self.statement, {**{self.names[k]: v for k, v in shared.items()}, "listed": list(values)})


def key_array(values: Sequence[int | str | bytes]) -> list[int] | str:
    """One key column's values as one array parameter: integers as a list (the driver picks an
    integer array type that holds them all, which any integer column compares with by its index),
    others as an array literal of unknown type, which the database reads as the column's own
    array type, as it reads each untyped value. (Only plain types come here, `in_arrays`: their
    keys are integers or text. An integer key is 64-bit: a longer one is rejected when it is
    classified.)"""
    integers = [v for v in values if type(v) is int]
    if len(integers) == len(values):
        return integers
    return "{" + ",".join(array_element(str(v)) for v in values) + "}"


def array_element(text: str) -> str:
    """A value in the array literal `key_array` binds: quoted, so that no text (empty, NULL, with
    commas or braces) reads as anything but itself."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
