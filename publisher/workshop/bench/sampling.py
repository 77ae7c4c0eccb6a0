"""What a benchmark samples while it runs: the peak memory of the driver, the JVM and the Python
workers, and the latency of small cycles."""
from __future__ import annotations

import os
import resource
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from publisher.workshop.bench.processes import descendants

SAMPLE_SECONDS = 0.2


@dataclass
class Latency:
    """Small polls on a warm session: the time from a change's commit to its documents and statuses."""

    events_per_cycle: int
    to_documents: list[float] = field(default_factory=list)
    to_acknowledged: list[float] = field(default_factory=list)
    events_seen: list[int] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """Summed over the cycles, like the drain's."""

    def summary(self) -> dict[str, Any]:
        return {
            "cycles": len(self.to_acknowledged),
            "events_per_cycle": self.events_per_cycle,
            "events_seen": sum(self.events_seen),
            "to_documents": spread(self.to_documents),
            "to_acknowledged": spread(self.to_acknowledged),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
        }


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, -(-95 * len(ordered) // 100) - 1))]
    return {"median": round(statistics.median(ordered), 4), "p95": round(p95, 4)}


@dataclass
class Memory:
    """Peak resident sizes in bytes; None where /proc could not say."""

    driver: int = 0
    jvm: int | None = None
    python_worker: int | None = None
    """The largest Python worker seen."""
    python_workers_seen: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "driver_bytes": self.driver,
            "jvm_bytes": self.jvm,
            "python_worker_bytes": self.python_worker,
            "python_workers_seen": self.python_workers_seen,
        }


class ProcessSampler:
    """Samples VmHWM of this process's descendants in /proc: the JVM and Spark's Python workers.

    VmHWM is each process's own peak, so a sample between two peaks loses nothing of a process
    that lives on; Spark reuses its Python workers, so most of them do.
    """

    def __init__(self, interval: float = SAMPLE_SECONDS, roots: list[int] | None = None) -> None:
        self.interval = interval
        self.roots = roots or [os.getpid()]
        self.peaks: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        for pid in {p for root in self.roots for p in descendants(root)}:
            kind = _kind(pid)
            peak = _status_kib(pid, "VmHWM")
            if kind is None or peak is None:
                continue
            previous = self.peaks.get(pid, (kind, 0))[1]
            self.peaks[pid] = (kind, max(previous, peak * 1024))

    def memory(self) -> Memory:
        jvm = [peak for kind, peak in self.peaks.values() if kind == "jvm"]
        workers = [peak for kind, peak in self.peaks.values() if kind == "python"]
        return Memory(
            driver=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            jvm=max(jvm) if jvm else None,
            python_worker=max(workers) if workers else None,
            python_workers_seen=len(workers),
        )


def resident(roots: list[int] | None = None) -> dict[str, int | None]:
    """Resident sizes now, in bytes: the driver's (this process) and its peak so far (VmHWM), and
    the largest JVM among the descendants of `roots` (default: this process); None where /proc
    could not say. A drain takes one after each cycle, so growth over the cycles shows."""
    me = os.getpid()
    jvm = [_status_kib(pid, "VmRSS") for pid in {p for r in roots or [me] for p in descendants(r)}
           if _kind(pid) == "jvm"]
    known = [kib * 1024 for kib in jvm if kib is not None]
    rss, hwm = _status_kib(me, "VmRSS"), _status_kib(me, "VmHWM")
    return {
        "driver_bytes": None if rss is None else rss * 1024,
        "driver_peak_bytes": None if hwm is None else hwm * 1024,
        "jvm_bytes": max(known) if known else None,
    }


def _kind(pid: int) -> str | None:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "python"
    return None


def _status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None
