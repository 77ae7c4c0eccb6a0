"""The stage contract both paths of a cycle implement, and what they share.

A cycle runs the same stages in the same order whichever way it takes: read and classify,
resolve (query back, precedence and operations per object), outcomes (every read row's status,
the rejected rows), write documents, write formats (change tables and messages). The driver
path holds each stage's result in the driver's memory; the Spark path holds it in Spark. Both
call the same rule functions, so both publish the same operations.
"""
from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from publisher.config import EVENT_LOG_COLUMNS, OutputConfig
from publisher.model.catalog import TableInfo
from publisher.model.events import Status
from publisher.model.runs import StatusRun
from publisher.outputs.documents import DocumentWritten
from publisher.outputs.formats import CycleFormats, FormatsWritten
from publisher.pipeline.objects import ObjectsContext
from publisher.pipeline.window import CycleWindow
from publisher.rules.classify import ClassifyContext

REJECT_FIELDS = tuple(EVENT_LOG_COLUMNS[i] for i in (0, 2, 3, 4, 5, 6, 7, 8, 9))
"""The event log values a rejected row is recorded with (all but the status)."""


class Acknowledgement(Protocol):
    """How a cycle's outcome goes back once its output is durable: statuses in the event log
    (the status mode), or a subscriber's check-out advanced."""

    @property
    def writes_statuses(self) -> bool:
        """True: the event log's rows got their statuses (its statistics may need refreshing)."""

    def keep(self) -> None:
        """Keep what identifies the cycle's rows until they are acknowledged."""

    def refresh_statistics(self) -> None:
        """After a large acknowledgement: the event log's statistics brought up to date."""

    def acknowledge(self, runs: Iterable[StatusRun], published: bool) -> Mapping[Status, int]:
        """All or nothing; `published`: the cycle wrote documents."""

    def start(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement:
        """The acknowledgement of `runs` begun before the cycle's output is written, finished
        once it is durable; as `acknowledge`, at its finish or beside the writes."""

    def start_early(self, runs: Iterable[StatusRun]) -> PendingAcknowledgement | None:
        """Begun with the statuses known once the rows are classified (`CyclePath.provisional_statuses`),
        to be settled with the outcomes'; None where it is not worth beginning before them."""

    def release(self) -> None:
        """What `keep` kept is no longer needed."""


class PendingAcknowledgement(Protocol):
    """An acknowledgement begun (`Acknowledgement.start`) and not yet made."""

    def settle(self, runs: Iterable[StatusRun]) -> None:
        """The statuses the cycle ends with, for the rows it was begun with."""

    def finish(self, published: bool) -> Mapping[Status, int]:
        """All or nothing, once the output is durable; `published`: the cycle wrote documents."""

    def abandon(self) -> None:
        """Nothing acknowledged: the output failed."""


@dataclass
class AcknowledgedAtFinish:
    """A pending acknowledgement made whole at its finish: for a reader whose acknowledgement is
    short (a check-out's state row), or a database where marking beside the writes would hold
    the application's writers back (`Dialect.status_writing`)."""

    acknowledgement: Acknowledgement
    runs: Iterable[StatusRun]

    def settle(self, runs: Iterable[StatusRun]) -> None:
        self.runs = runs

    def finish(self, published: bool) -> Mapping[Status, int]:
        return self.acknowledgement.acknowledge(self.runs, published)

    def abandon(self) -> None:
        """Nothing was begun."""


@dataclass(frozen=True)
class CyclePlan:
    """What one cycle needs, resolved once from the configuration and the database."""

    window: CycleWindow
    output: Path
    classify: ClassifyContext
    objects: ObjectsContext
    future_events: bool
    batch_size: int
    formats: OutputConfig | None
    """The output settings when change tables or messages are on, else None."""
    acknowledgement: Acknowledgement
    small_cycle_events: int = 20000
    """A window of at most this many events is published by the driver alone
    (`SparkConfig.driver_events`)."""
    read_partitions: int = 0
    """Partitions of a Spark cycle's read; 0: the session's parallelism."""
    described: Mapping[str, TableInfo] | None = None
    """The tables as the window's events were logged for them (`pipeline.shapes`), which the
    formats describe; None: as they are now."""

    def cycle_formats(self, cycle_number: int) -> CycleFormats:
        assert self.formats is not None
        operations = self.objects.operations
        tables = operations.tables if self.described is None else self.described
        earlier = frozenset(name for name, table in tables.items() if table != operations.tables.get(name))
        return CycleFormats(self.output, cycle_number, tables, operations.schema_label, self.formats, earlier)


@dataclass
class Outcomes:
    """What a path hands back for acknowledging."""

    events: int
    statuses: Iterable[StatusRun]
    """Every read row's status, as runs in record_id order; gone through twice."""
    append_rejects: Callable[[], int]
    """Appends the rejected rows to rejects.jsonl and says how many."""
    discard: Callable[[], None] = lambda: None
    """Removes what the path staged for acknowledging, once it is done or failed."""
    loopback: Mapping[str, int] = field(default_factory=dict)
    """The rows passed over as loopback, by perpetrator as logged."""


Classified = TypeVar("Classified")


Resolved = TypeVar("Resolved")


@dataclass
class CyclePath(abc.ABC, Generic[Classified, Resolved]):
    """One way through a cycle's stages; `run_cycle` calls them in order."""

    plan: CyclePlan
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    """Seconds of the steps inside a stage, by stage (summed over tasks on Spark)."""

    @abc.abstractmethod
    def read_and_classify(self) -> Classified: ...

    def provisional_statuses(self, classified: Classified) -> list[StatusRun] | None:
        """Every read row's status as known once the rows are classified (a rejected row E, any
        other S, whatever resolving finds), where the path has them at hand; None: not before
        the outcomes."""
        return None

    @abc.abstractmethod
    def resolve(self, classified: Classified) -> Resolved: ...

    @abc.abstractmethod
    def write_documents(self, resolved: Resolved, cycle_number: int) -> list[DocumentWritten]: ...

    @abc.abstractmethod
    def write_formats(self, resolved: Resolved, cycle_number: int) -> FormatsWritten: ...

    @abc.abstractmethod
    def outcomes(self, classified: Classified, resolved: Resolved, cycle_number: int) -> Outcomes: ...
