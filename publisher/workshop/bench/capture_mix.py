"""The mix `publisher bench --capture` runs: the bench schema and table, the capture installed for
each configuration, and the clients that drive the mix, which the database supplies (its
`capture_mix`: a load tool of its own, or Python threads)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from publisher.capture.install import CaptureError, capture_of, install_capture
from publisher.capture.tables import Style
from publisher.config import Config, DatabaseConfig
from publisher.database import connect

Configuration = Literal["none", "field", "row", "native-field", "native-row"]
CONFIGURATIONS: tuple[Configuration, ...] = ("none", "field", "row")
NATIVE: tuple[Configuration, ...] = ("native-field", "native-row")
"""The native capture, measured where the server has its library."""
CAPTURES: dict[Configuration, tuple[Style, bool]] = {
    "field": ("field", False), "row": ("row", False), "native-field": ("field", True), "native-row": ("row", True)}
"""Each configuration's capture: its style, and whether native."""
TABLE = "account"
EVENT_LOG = "event_log"
ROWS = 10_000
CLIENTS = 4


class CaptureBenchError(RuntimeError):
    """The benchmark could not measure: the database's load tool failed, or a transaction did."""


@dataclass(frozen=True)
class Run:
    """One configuration's run: its committed transactions and the events they logged."""

    configuration: Configuration
    round: int
    transactions: int
    seconds: float
    events: int

    @property
    def tps(self) -> float:
        return round(self.transactions / self.seconds, 1)

    def summary(self) -> dict[str, Any]:
        return {"round": self.round, "tps": self.tps, "transactions": self.transactions,
                "seconds": round(self.seconds, 3), "events": self.events}


class Target:
    """A database the mix runs on: the bench schema, the table, capture, and the database's
    `mix`, which seeds the table, levels the ground between runs and drives the clients."""

    clients = CLIENTS
    rows = ROWS

    def __init__(self, url: str, schema: str, mix: Any) -> None:
        self.url = url
        self.schema_name = schema
        self.mix = mix
        self.config = Config(database=DatabaseConfig(url=url, schema=schema))
        self.engine: Engine = connect(self.config)
        self.table = self.qualified(TABLE)

    @property
    def password(self) -> str | None:
        password = make_url(self.config.database.sqlalchemy_url()).password
        return str(password) if password else None

    def failure(self, message: str) -> CaptureBenchError:
        return CaptureBenchError(message)

    def qualified(self, name: str) -> str:
        return f"{self.schema_name}.{name}"

    @contextmanager
    def schema(self) -> Iterator[None]:
        """The bench schema with an empty event log, dropped afterwards whatever happens."""
        word = self.mix.schema_word
        drop = f"DROP {word} IF EXISTS {self.schema_name}{self.mix.cascade}"
        self.execute(drop, f"CREATE {word} {self.schema_name}")
        try:
            install_capture(self.config, self.engine, [])
            yield
        finally:
            self.execute(drop)
            self.engine.dispose()

    def execute(self, *statements: str) -> None:
        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))

    def configurations(self) -> tuple[Configuration, ...]:
        """The native capture's too, where the server can run it."""
        try:
            capture_of(self.config, self.engine).check_native()
        except CaptureError:
            return CONFIGURATIONS
        return CONFIGURATIONS + NATIVE

    def measure(self, configuration: Configuration, round_number: int, seconds: int) -> Run:
        self.prepare(configuration)
        transactions, elapsed = self.drive(seconds)
        return Run(configuration, round_number, transactions, elapsed, self.logged_events())

    def prepare(self, configuration: Configuration) -> None:
        """A fresh, seeded table with the configuration's triggers, and an empty event log."""
        self.execute(f"DROP TABLE IF EXISTS {self.table}", self.mix.table_ddl.format(table=self.table))
        self.mix.seed(self.engine, self.table, ROWS)
        if configuration != "none":
            style, native = CAPTURES[configuration]
            install_capture(self.config, self.engine, [TABLE], style=style, native=native)
        self.execute(f"TRUNCATE TABLE {self.qualified(EVENT_LOG)}")
        self.mix.settle(self.engine, self.table, self.qualified(EVENT_LOG))

    def logged_events(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text(f"SELECT COUNT(*) FROM {self.qualified(EVENT_LOG)}")).scalar_one())

    def drive(self, seconds: int) -> tuple[int, float]:
        """Run the mix for `seconds`; the transactions committed and the seconds they took."""
        transactions, elapsed = self.mix.drive(self, seconds)
        return int(transactions), float(elapsed)
