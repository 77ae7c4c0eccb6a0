"""How a command fails: the exit code says whether the user or the surroundings must act."""
from __future__ import annotations


class UsageError(Exception):
    """Bad arguments or configuration: exit 2."""


class UnavailableError(Exception):
    """The database or output cannot be used now: exit 1."""
