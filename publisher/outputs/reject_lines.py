"""Lines of rejects.jsonl for many rejected rows at once, as Arrow string operations.

A cycle that rejects every row writes a line per row; `outcomes.reject_line` (json.dumps per row)
then costs more than the rest of the cycle's work on those rows. The lines here are the same
bytes: keys sorted, `ensure_ascii=False` escapes, date-times as `str` spells them, the line
breaks JSON leaves raw escaped; a property in the tests holds them equal to `reject_line`.
A batch with a value these operations do not spell (a control character JSON writes as
``\\u00XX``, a type other than integer, text and UTC date-time) gives None, and is written
row by row.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

_ESCAPES = (
    ("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\b", "\\b"), ("\f", "\\f"),
    ("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"),
)
_UNESCAPED_CONTROL = "[\x00-\x07\x0b\x0e-\x1f]"
_UTC = frozenset({"UTC", "Etc/UTC", "+00:00", "Z"})


def column_reject_lines(batch: pa.RecordBatch, names: Sequence[str], numbered: bool = True) -> str | None:
    """``f"{record_id}\\t{reject_line(row)}"`` of every row (without `numbered`, the
    ``reject_line(row)`` alone), with the row holding `names`, joined; None when some value
    needs `reject_line` itself."""
    if not batch.num_rows:
        return ""
    members = []
    for name in sorted(names):
        value = _json_value(batch.column(name))
        if value is None:
            return None
        members.append(pc.binary_join_element_wise(json.dumps(name, ensure_ascii=False) + ": ", value, ""))
    objects = pc.binary_join_element_wise(*members, ", ")
    if numbered:
        record_ids = pc.cast(batch.column("record_id"), pa.string())
        lines = pc.binary_join_element_wise(record_ids, "\t{", objects, "}\n", "")
    else:
        lines = pc.binary_join_element_wise("{", objects, "}\n", "")
    if lines.null_count:
        return None
    return pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines), "")[0].as_py()


def _json_value(column: pa.Array) -> pa.Array | None:
    """Each value as json.dumps writes it, `null` for none."""
    kind = column.type
    if pa.types.is_integer(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_string(kind):
        if pc.any(pc.match_substring_regex(column, _UNESCAPED_CONTROL)).as_py():
            return None
        text = _quoted(column)
    elif pa.types.is_timestamp(kind) and kind.tz in _UTC:
        text = _quoted(_date_time(column))
    else:
        return None
    return pc.fill_null(text, "null")


def _quoted(texts: pa.Array) -> pa.Array:
    for old, new in _ESCAPES:
        texts = pc.replace_substring(texts, old, new)
    return pc.binary_join_element_wise('"', texts, '"', "")


def _date_time(times: pa.Array) -> pa.Array:
    """`str` of a UTC datetime: microseconds only when there are any, then the offset."""
    full = pc.strftime(times, format="%Y-%m-%d %H:%M:%S")
    whole = pc.ends_with(full, ".000000")
    return pc.binary_join_element_wise(
        pc.if_else(whole, pc.utf8_slice_codeunits(full, 0, 19), full), "+00:00", ""
    )
