"""The lines of rejects.jsonl built as columns are `reject_line`'s, byte for byte."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hunting import budget
from hypothesis import example, given, settings
from hypothesis import strategies as st

from publisher.outputs.outcomes import reject_line
from publisher.outputs.reject_lines import column_reject_lines

TEXTS = st.none() | st.text(max_size=8) | st.sampled_from(['a"b', "a\\b", "\x85\u2028\u2029", "\n\r\t\b\f", "é€𝄞"])
TIMES = st.none() | st.datetimes(
    min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC)
)
SCHEMA = pa.schema([
    ("record_id", pa.int64()), ("event_type", pa.string()), ("event_time", pa.timestamp("us", tz="UTC")),
    ("old_value", pa.string()), ("reason", pa.string()),
])
ROWS = st.lists(st.fixed_dictionaries({
    "record_id": st.integers(-(2**63), 2**63 - 1), "event_type": TEXTS, "event_time": TIMES,
    "old_value": TEXTS, "reason": st.text(max_size=8),
}), max_size=6)


@settings(max_examples=budget(300))
@given(ROWS)
@example([{"record_id": 1, "event_type": "2", "event_time": dt.datetime(2026, 1, 1, 0, 0, 0, 5000, tzinfo=dt.UTC),
           "old_value": None, "reason": "x"}])
def test_column_lines_are_reject_line_s(rows):
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    made = column_reject_lines(batch, SCHEMA.names)
    expected = "".join(f"{r['record_id']}\t{reject_line(r)}" for r in rows)
    if made is None:
        assert any(any(c < "\x20" and c not in "\n\r\t\b\f" for c in str(r[k] or ""))
                   for r in rows for k in ("event_type", "old_value", "reason")), "only control characters defer"
    else:
        assert made == expected
        assert column_reject_lines(batch, SCHEMA.names, numbered=False) == "".join(map(reject_line, rows))
