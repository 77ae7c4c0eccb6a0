"""The output directory's own state: cycle numbers (file names sort in publication order across
cycles and runs), the window a written and unacknowledged cycle pinned, and the temporaries a
killed writer left.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from publisher.outputs.durable import fsync_directory, write_atomically

CYCLE_FILE = ".publisher-cycle"


_DOCUMENT_NAME = re.compile(r"^(\d{12})-\d{7}\.xml$")


_TEMPORARY_NAME = re.compile(
    r"^\.(\d{12}-\d{7}\.xml|" + re.escape(CYCLE_FILE) + r")\.tmp$|^\.\d{12}-\d{5}-\d{7}\.staged$"
    r"|^\.\d{12}-\d{5}\.(read|decided|rejected)-(rejects|statuses)\.staged$"
)


def document_name(cycle: int, index: int) -> str:
    return f"{cycle:012d}-{index:07d}.xml"


def next_cycle_number(directory: Path) -> int:
    """A number no earlier cycle used here, so this cycle's files sort after every earlier one.
    Also deletes the temporary files a killed writer left behind (their documents are written
    again). One pass over the directory, which may hold every document ever written: a name is
    matched only when it could be a temporary (it starts with a dot) or the newest document
    (fixed-width names sort as their numbers), not each of them by pattern."""
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / CYCLE_FILE
    last = 0
    if state.exists():
        text = state.read_text(encoding="ascii").strip()
        last = int(text) if text.isdigit() else 0
    newest = ""
    for entry in os.scandir(directory):
        name = entry.name
        if name.startswith("."):
            if _TEMPORARY_NAME.match(name):
                Path(entry.path).unlink(missing_ok=True)
        elif name > newest and _DOCUMENT_NAME.match(name):
            newest = name
    if newest:
        last = max(last, int(newest[:12]))
    write_atomically(state, f"{last + 1}\n".encode("ascii"))
    return last + 1


WINDOW_FILE = ".publisher-window"
"""The window of a cycle whose output is written and not yet acknowledged."""


CHECK_OUT_FILE = ".publisher-check-out"
"""A subscriber's: the window of its check-out whose output is written and not yet acknowledged."""


def pin_window(directory: Path, pin: str, name: str = WINDOW_FILE) -> None:
    """Keep the window of a cycle before it writes anything, until it is acknowledged."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / name, pin.encode("utf-8"))


def pinned_window(directory: Path, name: str = WINDOW_FILE) -> str | None:
    """The window an unacknowledged cycle kept, or None."""
    try:
        return (directory / name).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


def unpin_window(directory: Path, name: str = WINDOW_FILE) -> None:
    """Forget the window once its rows are acknowledged."""
    path = directory / name
    if path.exists():
        path.unlink()
        fsync_directory(directory)


def document_paths(directory: Path) -> list[Path]:
    """The documents of an output directory in publication order (names sort in it); the hidden
    temporary files of a cycle in progress are not documents yet."""
    if not directory.is_dir():
        raise FileNotFoundError(f"the documents directory {directory} does not exist")
    return sorted(p for p in directory.glob("*.xml") if not p.name.startswith(".") and p.is_file())
