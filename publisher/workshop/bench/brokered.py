"""What sending the messages to Kafka costs a drain: the same backlog drained in pairs, with the
messages in files only and also sent to the broker, the backlog set back to new before each
drain and the order alternating from pair to pair. On a busy machine one pair's wall times
spread more than the difference sought, so the pairs repeat and the report takes medians, of
the wall time and of the publisher's CPU time (its process, librdkafka's threads included; not
the broker's)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from pyspark.sql import SparkSession
from sqlalchemy import Engine

from publisher.config import Config
from publisher.workshop.bench.cold import renew_backlog
from publisher.workshop.bench.drain import DrainResult, drain


@dataclass(frozen=True)
class BrokerPair:
    """One files-only drain and one drain to the broker, of the same backlog."""

    files_only: DrainResult
    to_kafka: DrainResult

    @property
    def ratio(self) -> float | None:
        """The drain to the broker's wall time / the files-only drain's."""
        return _ratio(self.to_kafka.seconds, self.files_only.seconds)

    @property
    def cpu_ratio(self) -> float | None:
        """The same with the publisher's CPU time."""
        return _ratio(self.to_kafka.cpu_seconds, self.files_only.cpu_seconds)

    def summary(self) -> dict[str, Any]:
        return {"files_only": self.files_only.summary(), "to_kafka": self.to_kafka.summary(),
                "ratio": _rounded(self.ratio), "cpu_ratio": _rounded(self.cpu_ratio)}


def _ratio(measured: float, base: float) -> float | None:
    return measured / base if base else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def median_ratio(pairs: list[BrokerPair], cpu: bool = False) -> float | None:
    """The median of the pairs' ratios, wall time or CPU time."""
    ratios = [r for r in (p.cpu_ratio if cpu else p.ratio for p in pairs) if r is not None]
    return statistics.median(ratios) if ratios else None


def drain_pairs(
    spark: SparkSession, engine: Engine, config: Config, brokered: Config, events: int, last_record_id: int,
    repeat: int,
) -> list[BrokerPair]:
    """`repeat` pairs of drains of the backlog (record_ids up to `last_record_id`, set back to new
    before each), with `config` and with `brokered`: the files-only drain first in odd pairs, last
    in even ones, so that what a drain leaves the next one weighs on both sides alike."""
    pairs = []
    for number in range(1, repeat + 1):
        drained = {}
        for name, configured in sorted({"files only": config, "to the broker": brokered}.items(),
                                       reverse=number % 2 == 0):
            renew_backlog(config, engine, last_record_id)
            drained[name] = drain(spark, engine, configured, events, f"pair {number}, {name}")
        pairs.append(BrokerPair(drained["files only"], drained["to the broker"]))
    return pairs


def broker_summary(encoding: Literal["json", "avro"], pairs: list[BrokerPair]) -> dict[str, Any]:
    """The pairs as the JSON report gives them, with their medians."""
    return {"encoding": encoding, "pairs": [pair.summary() for pair in pairs],
            "ratio": _rounded(median_ratio(pairs)), "cpu_ratio": _rounded(median_ratio(pairs, cpu=True))}
