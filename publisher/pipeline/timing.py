"""Where a stage's time goes: seconds per step, summed over the calls that time them, so that
`poll` can say which step of resolve (query_back, columnar, precedence, xml) took the time."""
from __future__ import annotations


class StepTimer:
    """Seconds per step. Created where a stage runs (the driver, or each executor's partition),
    and read there: an executor's go back to the driver through an accumulator."""

    def __init__(self, seconds: dict[str, float] | None = None) -> None:
        self.seconds: dict[str, float] = {} if seconds is None else seconds

    def add(self, step: str, seconds: float) -> None:
        self.seconds[step] = self.seconds.get(step, 0.0) + seconds
