"""Failures of a cycle, split by what the caller should do about them."""
from __future__ import annotations

import re

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")


class TransientError(RuntimeError):
    """Nothing was acknowledged and retrying later may succeed (database or output away)."""


class StageFailedError(TransientError):
    """A stage of the cycle failed, often inside a Spark executor; carries the root cause in one line."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"cycle failed in stage {stage}: {reason}")
        self.stage = stage
        self.reason = reason


class OutputStateError(ValueError):
    """An output format cannot be written as configured, or its state files are unreadable; the
    message names the table, column or file and what to do."""


class MissingStateError(ValueError):
    """Subscriptions are configured, but `install` has not created their state tables, or the
    event log cannot tell a check-out's events apart."""


def root_cause(exc: BaseException) -> str:
    """The innermost exception of a (possibly remote, multi-page) traceback, as one line."""
    text = str(getattr(exc, "orig", None) or exc)
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if _EXCEPTION_LINE.match(line):
            start = i
    if start is not None:
        lines = [line for line in lines[start:] if not line.startswith("(Background on this error")]
    return " ".join(" ".join(lines).split()) or type(exc).__name__
