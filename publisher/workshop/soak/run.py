"""One soak per database: set up, write under faults, drain, verify, report.

The report counts what was compared as well as what differed, and a soak that compared nothing
(no events, no documents, no objects) fails: "0 differences" must mean something.
"""
from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from publisher.config import DatabaseConfig
from publisher.databases.workbench import Workbench
from publisher.workshop.databases import databases, named, names, native_capture
from publisher.workshop.soak.drain import SPARK_PATH, drain, verify_readers
from publisher.workshop.soak.migrations import Migrations
from publisher.workshop.soak.outcome import Outcome
from publisher.workshop.soak.process import Publisher
from publisher.workshop.soak.schema import Site, create_tables, install, styles_for, write_config
from publisher.workshop.soak.writers import Writers

FAULT_GRACE = 120.0


def soaked() -> tuple[str, ...]:
    """The databases the soak drives, in the order it soaks them: the quick ones, which need no
    server, first, then the registry's order."""
    return names(tuple(sorted(databases(), key=lambda d: not d.soak_first)))


@dataclass(frozen=True)
class SoakOptions:
    """What a soak does; every stressor can be switched off on its own."""

    databases: tuple[str, ...] = field(default_factory=soaked)
    minutes: float = 2.0
    """Time the writers write, per database."""
    seed: int = 1
    writers: int = 5
    rate: float = 2.0
    """Transactions per second per writer, on average."""
    bursts: bool = True
    """One second in ten, the writers write as fast as they can."""
    kills: bool = True
    restarts: bool = True
    large_values: int = 3
    """How many values over 1 MiB the writers may write per database (0: none)."""
    small_windows: bool = True
    """A small query_limit, so that windows are cut inside transactions."""
    spark_path: bool = True
    """Some starts of `run` run every cycle as Spark jobs instead of in the driver."""
    gap: tuple[float, float] = (3.0, 12.0)
    """Seconds from the publisher publishing to the next fault, drawn uniformly."""
    drain_seconds: float = 300.0
    keep: Path | None = None
    native: bool = False
    """The native capture in place of the trigger language's, where the database has one."""
    migrations: bool = True
    """Migrations of `acct` among the faults (`soak.migrations`)."""


def soak(options: SoakOptions, say: Callable[[str], None] = lambda _: None) -> list[Outcome]:
    """Soak each database in turn; `say` hears progress."""
    return [soak_database(d, options, say) for d in options.databases]


def soak_database(dialect: str, options: SoakOptions, say: Callable[[str], None]) -> Outcome:
    outcome = Outcome(dialect, styles_for(dialect, options.seed))
    root = Path(tempfile.mkdtemp(prefix=f"soak-{dialect}-"))
    root.chmod(0o755)
    server: Any | None = None
    try:
        database = named(dialect)
        server = database.soak_server(root)
        _soak(database, server, root, options, outcome, lambda line: say(f"{dialect}: {line}"))
    except Exception as exc:  # noqa: BLE001 - any failure is the soak's finding, reported
        outcome.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        if server is not None:
            server.close()
        if options.keep is not None:
            shutil.copytree(root, options.keep / dialect, dirs_exist_ok=True, ignore=_sockets(named(dialect)))
        shutil.rmtree(root, ignore_errors=True)
    return outcome


def _sockets(database: Workbench) -> Callable[[str, list[str]], list[str]]:
    """What `--keep` leaves behind: a server's sockets and pid files, which cannot be copied."""
    def ignored(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n.endswith((".sock", ".pid")) or n.startswith(database.soak_sockets)]
    return ignored


def _soak(database: Workbench, server: Any, root: Path, options: SoakOptions, outcome: Outcome,
          say: Callable[[str], None]) -> None:
    """Soak one database on its `server`; `say` hears progress, each line about this database."""
    engine = create_engine(DatabaseConfig(url=server.url).sqlalchemy_url(), pool_pre_ping=True,
                           pool_size=options.writers + 2)
    try:
        create_tables(engine, database, server.schema)
        site = Site(database, server.url, server.schema,
                    write_config(root, database, server.url, server.schema), outcome.styles,
                    native=options.native and native_capture(database))
        install(site)
        rng = random.Random(options.seed * 7919 + len(database.name))
        publisher = Publisher(site.config, root / "run.log")
        writers = Writers(engine, site, options.seed, options.writers, options.large_values, options.rate,
                          options.bursts)
        try:
            capture = "native capture, " if site.native else ""
            say(f"writing for {options.minutes:g} min ({capture}{outcome.styles})")
            publisher.start(*_settings(options, rng))
            writers.start()
            migrations = Migrations(site, engine) if options.migrations else None
            faults = _faults(server, publisher, options, rng, say, migrations)
            writers.join()
            outcome.counts.update({**dict(writers.counts), **faults,
                                   "aborted_by": dict(writers.reasons.most_common(4))})
            say("writers stopped, draining")
            outcome.counts.update(drain(engine, site, publisher, options.drain_seconds))
            code = publisher.stop()
            if code not in (0, None):
                outcome.problems.append(f"publisher run exited {code} when stopped")
        finally:
            writers.join()
            publisher.close()
        outcome.counts.update(starts=publisher.starts, kills=publisher.kills, exits=publisher.exits,
                              exit_codes=publisher.exit_codes, failed_cycles=publisher.failed_cycles(),
                              stopped_readers=publisher.stopped_readers(),
                              peak_rss_mib={k: round(v / 2**20) for k, v in publisher.peaks.items()})
        verify_readers(engine, site, outcome)
        _check(outcome, options, server)
        if not outcome.ok:
            outcome.counts["run_log_tail"] = (root / "run.log").read_text(errors="replace")[-3000:]
    finally:
        engine.dispose()


def _settings(options: SoakOptions, rng: random.Random) -> list[str]:
    """Per start of `run`: the window size, the batch size and the cycle path. Spark jobs take
    seconds per cycle on a small machine, so the Spark path gets windows that keep up."""
    if options.spark_path and rng.random() < 0.25:
        return ["publisher.query_limit=1000", f"publisher.batch_size={rng.choice([2, 128])}", SPARK_PATH]
    limit = rng.choice([7, 25, 100]) if options.small_windows else 10000
    return [f"publisher.query_limit={limit}", f"publisher.batch_size={rng.choice([2, 16, 128])}"]


def _faults(server: Any, publisher: Publisher, options: SoakOptions, rng: random.Random,
            say: Callable[[str], None], migrations: Migrations | None = None) -> dict[str, Any]:
    """Until the writing time is over: restart the database and kill the publisher in turn, each
    at a random moment once the publisher is publishing, and start the publisher again whenever
    it is not running. A restart comes first: a kill costs a start-up before the next fault. The
    writing goes on past its time until each kind of fault has happened once, at most
    FAULT_GRACE seconds: a slow start-up must not make a soak without faults. Between them, the
    migrations, one a time, each at a random moment too."""
    end = time.monotonic() + options.minutes * 60
    latest = end + FAULT_GRACE
    restarts: dict[str, int] = {"fast": 0, "immediate": 0}
    kinds = (["restart"] if options.restarts and server.restartable else []) + (["kill"] if options.kills else [])
    upcoming: float | None = None
    migrating = time.monotonic() + rng.uniform(*options.gap)
    turn = 0
    while time.monotonic() < latest and (time.monotonic() < end or turn < len(kinds)):
        time.sleep(0.2)
        if migrations is not None and migrations.left and time.monotonic() >= migrating:
            say(f"migration: {migrations.run_next()}")
            migrating = time.monotonic() + rng.uniform(*options.gap) / 2
        if not publisher.alive():
            publisher.start(*_settings(options, rng))
        if upcoming is None and publisher.publishing():
            upcoming = time.monotonic() + rng.uniform(*options.gap)
        if not kinds or upcoming is None or time.monotonic() < upcoming:
            continue
        upcoming, turn = None, turn + 1
        if kinds[(turn - 1) % len(kinds)] == "kill":
            publisher.kill()
            say("publisher killed")
            publisher.start(*_settings(options, rng))
        else:
            mode = rng.choice(["fast", "immediate"])
            say(f"database restart ({mode})")
            server.restart(mode)
            restarts[mode] += 1
    return {"restarts": sum(restarts.values()), "restarts_by_mode": restarts,
            "db_restarts_offered": server.restartable, "migrations": migrations.ran if migrations else 0}


def _check(outcome: Outcome, options: SoakOptions, server: Any) -> None:
    """What makes the soak fail besides differences: work left, rejected rows, nothing compared."""
    c = outcome.counts
    if c.get("rows_left_new"):
        outcome.problems.append(f"{c['rows_left_new']} event log rows still N after the drain")
    if c.get("subscriber_waiting"):
        outcome.problems.append(f"subscriber has {c['subscriber_waiting']} events waiting after the drain")
    if c.get("statuses", {}).get("E"):
        outcome.problems.append(f"{c['statuses']['E']} rows rejected (E): the triggers logged them, see rejects.jsonl")
    if not c.get("writes") or not c.get("events"):
        outcome.problems.append("nothing was written or logged: the soak compared nothing")
    if c.get("stopped_for_drain") not in (None, 0):
        outcome.problems.append(f"publisher run exited {c['stopped_for_drain']} when stopped for the drain")
    outcome.problems += [f"publisher run: {line[:300]}" for line in c.get("stopped_readers", [])]
    if not outcome.readers:
        outcome.problems.append("verify did not run")
    if outcome.differences:
        outcome.problems.append(f"{outcome.differences} differences")
    for name, reader in outcome.readers.items():
        if not reader.get("documents") or reader.get("objects", 0) < c.get("source_rows", 1):
            outcome.problems.append(f"verify of {name} compared {reader.get('objects')} objects from "
                                    f"{reader.get('documents')} documents: not every row")
    if options.kills and not c.get("kills"):
        outcome.problems.append("the publisher was never killed: it never got to publish")
    if options.restarts and server.restartable and not c.get("restarts"):
        outcome.problems.append("the database was never restarted: the publisher never got to publish")
