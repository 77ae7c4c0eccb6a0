"""What a database's private server for `publisher soak` is made of: a temporary directory on
127.0.0.1 and a free port, so that restarting it disturbs no other user of the machine's servers.

Servers refuse to run as root, so as root each runs as its own system user. A database's
workshop module builds its server from these; the soak asks it for `url`, `schema`,
`restartable`, `restart(mode)` and `close()`.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

START_SECONDS = 60.0


class ServerError(RuntimeError):
    """A private server could not be set up or started: the soak cannot run on that database."""


class NoServer:
    """A database in a file the soak owns: nothing to start, and no "restart" offered."""

    restartable = False

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.schema: str | None = None

    def restart(self, mode: str) -> None:
        """Stop the server (`fast`: a clean shutdown; `immediate`: a crash) and start it again."""
        raise ServerError(f"{self.name} has no server to restart")

    def close(self) -> None:
        """Stop the server for good; the directory goes with the soak's own."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def as_user(user: str, command: list[str]) -> list[str]:
    """Servers refuse root: run them as their own system user when we are root."""
    return ["runuser", "-u", user, "--", *command] if os.geteuid() == 0 else command


def owned(path: Path, user: str) -> Path:
    """`path`, made, and the server's user's when we are root."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(path, user, user)
    return path


def run_logged(command: list[str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise ServerError(f"{' '.join(command)} exited {done.returncode}:\n{tail}")
