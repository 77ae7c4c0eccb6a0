"""What one database's soak did and found: filled as the soak runs and drains, reported at the end."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """What one database's soak did and found."""

    database: str
    styles: dict[str, str]
    counts: dict[str, Any] = field(default_factory=dict)
    readers: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    """A few of the differences, as verify prints them."""

    @property
    def differences(self) -> int:
        return sum(int(r.get("differences", 0)) for r in self.readers.values())

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        return {"database": self.database, "ok": self.ok, "styles": self.styles, **self.counts,
                "differences": self.differences, "readers": self.readers, "problems": self.problems}
