"""Which rows of a bucket's old state and new read are the same object: their keys matched, each
with its row's position on either side, and the keys that name no one object (shared by rows, or
NULL in a column), which match nothing (`differences.compare_bucket`).

Most tables' keys are unique and never NULL, and the state keeps each row's key hash, which equal
keys share. Where no two rows of a side share a hash and no key column holds a NULL, no key is
shared either, and the sides are matched by their hashes with numpy, every pair of keys so
matched then checked equal. Anything else (hashes that coincide, keys that differ behind equal
hashes, NULLs) is matched by Arrow's join of the key texts, which also finds the shared keys:
the two ways give the same rows (a property in `test_comparison_rules` holds them to the rows
compared one by one). On a bucket of 96,000 rows of the bench's table the first took 10-12 ms,
the join and its look for shared keys 26-45 ms.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from publisher.triggerless.state import HASH


def matched_rows(old: pa.Table, new: pa.Table, keys: list[str]) -> tuple[pa.Table, pa.Table]:
    """The keys of both, each with its row's position in `old` (`old_at`) and in `new` (`new_at`),
    null where that side does not hold it; and the keys of the rows read that name no one object
    (`unkeyed_rows`), which match nothing. Both sides have their key columns and `HASH`."""
    matched = _matched_by_hash(old, new, keys)
    if matched is not None:
        return matched, _no_keys(keys)
    return _matched_by_join(old.select(keys), new.select(keys), keys)


def _matched_by_hash(old: pa.Table, new: pa.Table, keys: list[str]) -> pa.Table | None:
    """`matched_rows` where every key of each side is one row's and no NULL (else None): the new
    rows as they are, then the old rows the new ones do not hold."""
    if any(old.column(k).null_count or new.column(k).null_count for k in keys):
        return None
    old_order, old_sorted = _sorted(old)
    new_order, new_sorted = _sorted(new)
    if _repeated(old_sorted) or _repeated(new_sorted):
        return None
    places = np.searchsorted(old_sorted, new_sorted)  # both sorted: a walk, not a search per key
    hit = places < len(old_sorted)
    hit[hit] = old_sorted[places[hit]] == new_sorted[hit]
    new_found, old_found = new_order[hit], old_order[places[hit]]
    found = np.zeros(len(new), bool)
    found[new_found] = True
    for key in keys:  # equal hashes, equal keys: else two keys hash alike and the join tells them apart
        if not pc.all(pc.equal(old.column(key).take(old_found), new.column(key).take(new_found))).as_py():
            return None
    old_only = np.ones(len(old), bool)
    old_only[old_found] = False
    gone = np.flatnonzero(old_only)
    old_at = np.zeros(len(new), np.int64)
    old_at[new_found] = old_found
    columns = [pa.chunked_array([*new.column(k).chunks, *old.column(k).take(gone).cast(new.column(k).type).chunks],
                                new.column(k).type) for k in keys]
    old_positions = pa.chunked_array([pa.array(old_at, mask=~found), pa.array(gone)], pa.int64())
    new_positions = pa.chunked_array([pa.array(np.arange(len(new), dtype=np.int64)),
                                      pa.nulls(len(gone), pa.int64())], pa.int64())
    return pa.table([*columns, old_positions, new_positions], names=[*keys, "old_at", "new_at"])


def _sorted(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The rows' positions in the order of their key hashes, and the hashes in that order."""
    hashes = rows.column(HASH)
    values = (hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes).to_numpy()
    order = np.argsort(values)
    return order, values[order]


def _repeated(ordered: np.ndarray) -> bool:
    return bool(len(ordered) > 1 and np.any(ordered[1:] == ordered[:-1]))


def _no_keys(keys: list[str]) -> pa.Table:
    return pa.table({**{k: pa.array([], pa.string()) for k in keys}, "count_all": pa.array([], pa.int64())})


def _matched_by_join(old: pa.Table, new: pa.Table, keys: list[str]) -> tuple[pa.Table, pa.Table]:
    new = new.append_column("new_at", pa.array(np.arange(len(new), dtype=np.int64)))
    old = old.append_column("old_at", pa.array(np.arange(len(old), dtype=np.int64)))
    unkeyed = unkeyed_rows(new.select(keys), keys)
    if len(unkeyed):  # left as the consumer holds them, said in rejects.jsonl
        new = keyed_only(new, unkeyed, keys)
        old = keyed_only(old, unkeyed, keys)
    old = keyed_only(old, unkeyed_rows(old.select(keys), keys), keys)
    return old.join(new, keys, join_type="full outer"), unkeyed


def keyed_only(rows: pa.Table, unkeyed: pa.Table, keys: list[str]) -> pa.Table:
    """`rows` without those whose key is NULL or among `unkeyed`'s (a join never matches NULLs)."""
    if not len(unkeyed):
        return rows
    valid = pc.is_valid(rows.column(keys[0]))
    for key in keys[1:]:
        valid = pc.and_(valid, pc.is_valid(rows.column(key)))
    return rows.filter(valid).join(unkeyed.select(keys), keys, join_type="left anti")


def unkeyed_rows(rows: pa.Table, keys: list[str]) -> pa.Table:
    """The key texts of rows that name no one object, with how many rows share each: a key
    other rows have too (a view whose pk_ columns are not unique; key columns that store what they
    are given, `Dialect.keys_spelled_by_type`, holding 1 and '1') or a NULL in a key column. Such rows
    cannot be told apart from one cycle to the next."""
    counted = rows.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    shared = pc.greater(counted.column("count_all"), 1)
    for key in keys:
        shared = pc.or_(shared, pc.is_null(counted.column(key)))
    return counted.filter(shared)
