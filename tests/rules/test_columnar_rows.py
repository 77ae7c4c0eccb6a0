"""A direct snapshot's operations, built a column at a time (`rules.columnar.rows`), are the ones
the cycle's rules publish for the same rows' row query-backs (`rules.columnar.query_back_operations`):
on generated rows of tables with every value type, texts XML must escape, empty and NULL values,
key-only tables, names that need escaping, and both `insert_row_operation`s."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.config import InsertRowOperation
from publisher.model.arrow import arrow_schema_of
from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.events import EventType
from publisher.model.values import ValueType
from publisher.rules.columnar.batch import query_back_operations
from publisher.rules.columnar.rows import row_operations
from publisher.rules.operations import OperationContext
from publisher.rules.precedence import CurrentRow

TABLES = [
    TableInfo("usr", (
        ColumnInfo("idu", ValueType.INT, True, ordinal=1),
        ColumnInfo("fname", ValueType.STRING, False, ordinal=2),
        ColumnInfo("age", ValueType.INT, False, ordinal=3),
        ColumnInfo("photo", ValueType.OCTET, False, ordinal=4),
        ColumnInfo("seen", ValueType.TIME, False, ordinal=5),
        ColumnInfo("ok", ValueType.STATE, False, ordinal=6),
    )),
    TableInfo("a&b<c>", (
        ColumnInfo("id", ValueType.STRING, True, ordinal=1),
        ColumnInfo('x"y', ValueType.STRING, False, ordinal=2),
    )),
    TableInfo("member", (
        ColumnInfo("grp", ValueType.STRING, True, ordinal=1),
        ColumnInfo("usr", ValueType.INT, True, ordinal=2),
    )),
    TableInfo("\ue000t", (  # names holding the characters a fragment is first cut around
        ColumnInfo("id", ValueType.INT, True, ordinal=1),
        ColumnInfo("\ue000v\ue001", ValueType.STRING, False, ordinal=2),
        ColumnInfo("w", ValueType.TIME, False, ordinal=3),
    )),
]
TEXTS = st.none() | st.sampled_from(["", "plain", "a&b", "<x>", "]]>", "tab\there", "cr\r\nlf", "é ü", "'q'", "1",
                                     "\ue000", "&amp;&lt;"])
EVENTS = arrow_schema_of(
    "record_id long, position_time timestamp, class_name string, canonical_key string, event_type_code int, "
    "attr_name string, value_type string, old_text string, new_text string"
)


@st.composite
def rows(draw: st.DrawFn) -> tuple[TableInfo, list[str], list[list[str | None]]]:
    table = draw(st.sampled_from(TABLES))
    keys = draw(st.lists(st.sampled_from(["k=1", "k=2", "k=a<b&c", "k=x,y", "k=3"]), unique=True, max_size=5))
    texts = [[draw(TEXTS) for _ in keys] for _ in table.value_columns]
    return table, keys, texts


def by_the_rules(table: TableInfo, keys: list[str], texts: list[list[str | None]], ids: list[int],
                 ctx: OperationContext) -> list[bytes]:
    """What the cycle publishes for each row's row query-back of an insert, read as `texts`."""
    count = len(keys)
    now = dt.datetime(2026, 11, 26)
    columns = {"record_id": ids, "position_time": [now] * count, "class_name": [table.name] * count,
               "canonical_key": keys, "event_type_code": [int(EventType.INSERT_ROW_QUERY_BACK)] * count}
    events = pa.table([pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(count, f.type)
                       for f in EVENTS], schema=EVENTS)
    current = {(table.name, key): CurrentRow({c.name: values[row] for c, values in zip(table.value_columns, texts,
                                                                                       strict=True)})
               for row, key in enumerate(keys)}
    resolved = query_back_operations(events, current, ctx)
    assert resolved.unreadable.num_rows == 0 and len(resolved.vanished) == 0
    by_id = dict(zip(resolved.operations["event_id"].to_pylist(), resolved.operations["xml"].to_pylist(), strict=True))
    return [by_id[i] for i in ids]


@pytest.mark.parametrize("operation", list(InsertRowOperation))
@settings(max_examples=budget(150))
@given(case=rows())
def test_rows_written_directly_are_what_their_row_query_backs_publish(operation, case) -> None:
    table, keys, texts = case
    ctx = OperationContext({t.name: t for t in TABLES}, "main", operation)
    ids = [-(7 * 2**20 + place) for place in range(len(keys))]
    built = row_operations(table, keys, texts, pa.array(ids, pa.int64()), ctx).to_pylist()
    assert built == by_the_rules(table, keys, texts, ids, ctx)


def test_a_value_xml_cannot_carry_is_refused_naming_it() -> None:
    """The direct path logs such a row instead (its problem is known when it is read); were one
    to come here, it is refused with the attribute, never written."""
    table = TABLES[1]
    ctx = OperationContext({table.name: table}, "main")
    with pytest.raises(ValueError, match="operation -5: value of attribute 'x\"y'"):
        row_operations(table, ["id=1"], [["bad\x01"]], pa.array([-5], pa.int64()), ctx)


def test_the_first_row_with_a_value_xml_cannot_carry_is_the_one_refused() -> None:
    table = TABLES[0]
    ctx = OperationContext({table.name: table}, "main")
    texts = [[f"v{row}" for row in range(4)] for _ in table.value_columns]
    texts[3][2] = "late\x1f"
    texts[0][1] = "early\ufffe"
    with pytest.raises(ValueError, match="operation -11: value of attribute 'fname' contains U\\+FFFE"):
        row_operations(table, [f"idu={row}" for row in range(4)], texts, pa.array([-10, -11, -12, -13], pa.int64()),
                       ctx)


def test_a_name_xml_cannot_carry_is_refused_naming_it() -> None:
    table = TableInfo("t\x01", (ColumnInfo("id", ValueType.INT, True, ordinal=1),
                                 ColumnInfo("v", ValueType.STRING, False, ordinal=2)))
    ctx = OperationContext({table.name: table}, "main")
    with pytest.raises(ValueError, match="operation -5: class name contains U\\+0001"):
        row_operations(table, ["id=1"], [["x"]], pa.array([-5], pa.int64()), ctx)
