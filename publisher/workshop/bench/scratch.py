"""The bench's scratch directory: where its documents go, in a part of the disk that its own
earlier phases and runs did not just empty.

ext4 without a journal does not hand out again an inode freed in the last minute (six, while
its block of the inode table is not yet written back): a new file's inode is found by passing
over every such inode of its directory's block group, one at a time. A bench run removes
thousands of documents (each phase's directory, each run before it), and a directory made
beside them lands in the same group, where a document then cost 0.5 to 0.9 ms to create instead
of 15 µs: a third of a drain's write stage and most of a direct snapshot's time
(`CHANGELOG.md`, 2026-12-04). So the bench writes below a directory marked as a top of
directory hierarchies (the `T` attribute, `chattr +T`), whose subdirectories the allocator
places in a group with more free inodes than most, as it places the directories of the file
system's root. It starts that search at a hash of the subdirectory's name, so each run's has a
name of its own (a fixed name took the same group, and the last run's deletions, every time).
Where the file system knows no such mark, the directory is an ordinary one. What the publisher
writes is the same either way; only where its inodes come from differs.
"""
from __future__ import annotations

import array
import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GET_FLAGS = 0x80086601
"""FS_IOC_GETFLAGS (Linux, 64-bit): a file's attributes as `lsattr` shows them."""
SET_FLAGS = 0x40086602
"""FS_IOC_SETFLAGS."""
TOP_DIRECTORY = 0x00020000
"""FS_TOPDIR_FL: `chattr +T`."""


def attributes(directory: Path) -> int | None:
    """The directory's attributes, or None where its file system keeps none."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, GET_FLAGS, flags, True)
        return flags[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def mark_top_directory(directory: Path) -> bool:
    """Mark `directory` as a top of directory hierarchies; False where the file system refuses."""
    found = attributes(directory)
    if found is None:
        return False
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, SET_FLAGS, array.array("i", [found | TOP_DIRECTORY]), True)
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool((attributes(directory) or 0) & TOP_DIRECTORY)


@contextmanager
def work_directory(path: Path | None) -> Iterator[Path]:
    """`path`, made if missing; else a temporary directory, removed afterwards, made inside one
    marked as a top of directory hierarchies where the file system allows it."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="publisher-bench-") as name:
        mark_top_directory(Path(name))
        yield Path(tempfile.mkdtemp(prefix="run-", dir=name))
