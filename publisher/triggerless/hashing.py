"""Which bucket of a triggerless state a row falls in: a hash of its key texts, computed a column
at a time, whose bits pick the bucket among a power of two."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)
HASHED_BYTES = 16
"""A key's hash reads the first 16 bytes of each key column's UTF-8 (zeros past its end) and its
length: it spreads keys over buckets, and the comparison joins on the keys themselves."""
_ZEROS = b"\0" * HASHED_BYTES


def key_hashes(keys: Sequence[pa.Array]) -> np.ndarray:
    """An FNV-1a of each row's key texts taken eight bytes at a time, as columns: the bucket a row
    falls in is its hash's low bits (`bucket_of`), and the hash is stored, so that a table whose
    bucket count changes is still compared with its old state."""
    count = len(keys[0]) if keys else 0
    hashes = np.full(count, FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in keys:
            binary = pc.fill_null(column, "").cast(pa.binary())
            lengths = pc.binary_length(binary).to_numpy(zero_copy_only=False).astype(np.uint64)
            padded = pc.binary_slice(pc.binary_join_element_wise(binary, _ZEROS, b""), 0, HASHED_BYTES)
            offsets, data = _buffers(padded)
            if not np.all(offsets[1:] - offsets[:-1] == HASHED_BYTES):  # every text is made 16 bytes long above
                raise AssertionError("a padded key text is not 16 bytes long")
            block = data[offsets[0]: offsets[0] + HASHED_BYTES * count].reshape(count, HASHED_BYTES)
            for word in np.ascontiguousarray(block).view(np.uint64).T:
                hashes = (hashes ^ word) * FNV_PRIME
            hashes = (hashes ^ lengths) * FNV_PRIME
    return hashes


def _buffers(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary column's offsets (as int64) and bytes."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    _, offsets, data = column.buffers()
    width = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    positions = np.frombuffer(offsets, dtype=width)[column.offset: column.offset + len(column) + 1].astype(np.int64)
    values = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return positions, values


def bucket_of(hashes: np.ndarray | pa.Array, buckets: int) -> np.ndarray:
    """The bucket of each hash among `buckets` (a power of two), from its high and low bits mixed."""
    values = hashes.to_numpy() if isinstance(hashes, (pa.Array, pa.ChunkedArray)) else hashes
    return ((values ^ (values >> np.uint64(29))) & np.uint64(buckets - 1)).astype(np.int64)
