"""Writes that survive a crash: a file appears whole or not at all (written to a hidden
temporary name, flushed to disk, renamed), and appended lines are on disk before the statuses
that point to them are written.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


JSON_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}
"""Line breaks JSON leaves raw but line readers split on (Python's splitlines, JavaScript)."""


def write_atomically(path: Path, data: bytes) -> None:
    """Write, fsync, rename, fsync the directory: a reader sees the old state or the whole file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_file_system(directory: Path) -> None:
    """Flush everything written to the file system holding `directory` to disk, with one call.

    A partition's documents are written first and flushed together: one fsync per document
    costs a journal commit each, thousands per large cycle. Linux has syncfs for this; other
    systems fall back to sync.
    """
    libc = _libc()
    if libc is not None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


@functools.cache
def _libc() -> Any:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    return libc if hasattr(libc, "syncfs") else None
