"""`publisher soak`: its arguments, and its report as text or one JSON line."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from publisher.workshop.databases import databases, native_capture
from publisher.workshop.soak.outcome import Outcome
from publisher.workshop.soak.run import SoakOptions, soak, soaked

DESCRIPTION = """\
Runs the publisher the way production does, under faults, and checks that the consumer saw
every change. Per database, on a server of its own (a private PostgreSQL cluster and a private
MariaDB server, each in a temporary directory on 127.0.0.1 and a free port; SQLite a file):

  1. tables   acct: a compound key (text that needs quoting, a date, a boolean or small
              integer), NULLable columns, a binary column; team: a logical class whose
              members are rows of team_member. `publisher install` puts field style on one
              and row style on the other (by --seed; SQLite the other way round)
  2. writers  threads making random transactions of 1-4 changes: inserts, updates of any column
              including the key, deletes, deletes and re-inserts of one key, members added and
              removed, texts with quotes, commas, `=`, non-ASCII, emoji and newlines, and a few
              values over 1 MiB; a steady pace, and one second in ten as fast as they can
  3. faults   `publisher run` (status mode, and a subscriber where the database serves them)
              SIGKILLed with its JVM and workers at random moments and started again, with a
              random query_limit, batch size and cycle path; the database server restarted
              (fast or immediate shutdown)
  4. drain    writers stopped, `run` left to publish until no row is N and the subscriber has
              caught up (at most --drain-seconds), then stopped with SIGTERM
  5. verify   `verify` for the status mode and the subscriber: the documents replayed into the
              consumer mirror and compared with the tables

Exit 0 only if every database drained, no row was rejected, verify found no difference and
compared every row. Exit 1 otherwise; the report names what failed.
"""

EPILOG = """\
reading the report:
  writes        statements that changed rows, in committed transactions
  conflicts     transactions the database refused (duplicate key, foreign key) and rolled back
  aborted       transactions lost to a fault (a restart, a deadlock)
  events        rows of the event log at the end
  kills         SIGKILLs of `run`; restarts: of the database server
  differences   what verify found, per reader; objects and documents: what it compared
  rows left N   event log rows the drain did not publish
  peak RSS      the highest resident size of run's Python driver and of its JVM

examples:
  publisher soak --database {quick} --minutes 1
  publisher soak --minutes 10 --seed 7 --json
  publisher soak --database {native} --no-large-values --keep soak-out
  publisher soak --database {native} --native --minutes 5
"""


def _epilog() -> str:
    """The examples, on the databases the registry holds."""
    natives = [d.name for d in databases() if native_capture(d)] or list(soaked())
    return EPILOG.format(quick=soaked()[0], native=natives[0])


def add_parser(commands: Any) -> None:
    sub = commands.add_parser(
        "soak", help="write concurrently under kills and restarts, drain, and verify every reader",
        description=DESCRIPTION, epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument("--database", choices=(*soaked(), "all"), action="append",
                     help="which database (repeatable; default: all)")
    sub.add_argument("--minutes", type=float, default=2.0, metavar="M",
                     help="how long the writers write, per database (default: 2)")
    sub.add_argument("--seed", type=int, default=1, metavar="S", help="seed of every random choice (default: 1)")
    sub.add_argument("--writers", type=int, default=5, choices=range(1, 9), metavar="N",
                     help="writer threads, 1 to 8 (default: 5)")
    sub.add_argument("--rate", type=float, default=2.0, metavar="TPS",
                     help="transactions per second per writer, on average (default: 2)")
    switch = argparse.BooleanOptionalAction
    sub.add_argument("--bursts", action=switch, default=True,
                     help="one second in ten, every writer writes as fast as it can")
    sub.add_argument("--kills", action=switch, default=True, help="SIGKILL and restart `publisher run`")
    sub.add_argument("--restarts", action=switch, default=True, help="restart the database server")
    sub.add_argument("--large-values", action=switch, default=True,
                     help="let the writers write a few values over 1 MiB")
    sub.add_argument("--small-windows", action=switch, default=True,
                     help="a small query_limit (7 to 100), so windows are cut inside transactions")
    sub.add_argument("--spark-path", action=switch, default=True,
                     help="run some starts of `run` with every cycle as Spark jobs")
    sub.add_argument("--drain-seconds", type=float, default=300.0, metavar="T",
                     help="how long the drain may take before what is left is reported (default: 300)")
    sub.add_argument("--native", action="store_true",
                     help="PostgreSQL: the native capture (`make native` first) in place of the PL/pgSQL one")
    sub.add_argument("--migrations", action=switch, default=True,
                     help="migrate the published table acct among the faults: MariaDB and SQLite through `publisher "
                     "migrate`, PostgreSQL by plain DDL")
    sub.add_argument("--keep", metavar="DIR", help="keep each database's configuration, documents and logs here")
    sub.add_argument("--json", action="store_true", help="print one JSON line instead of the report")


def run(args: argparse.Namespace) -> int:
    chosen = args.database or ["all"]
    databases = soaked() if "all" in chosen else tuple(d for d in soaked() if d in chosen)
    options = SoakOptions(
        databases=databases, minutes=args.minutes, seed=args.seed, writers=args.writers, rate=args.rate,
        bursts=args.bursts, kills=args.kills, restarts=args.restarts, large_values=3 if args.large_values else 0,
        small_windows=args.small_windows, spark_path=args.spark_path, drain_seconds=args.drain_seconds,
        keep=Path(args.keep) if args.keep else None, native=args.native, migrations=args.migrations,
    )
    say = (lambda _: None) if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    outcomes = soak(options, say)
    if args.json:
        print(json.dumps(summary(outcomes, options), default=str))
    else:
        print(format_report(outcomes, options))
    return 0 if all(o.ok for o in outcomes) else 1


def summary(outcomes: list[Outcome], options: SoakOptions) -> dict[str, Any]:
    return {"ok": all(o.ok for o in outcomes), "seed": options.seed, "minutes": options.minutes,
            "stressors": stressors(options), "differences": sum(o.differences for o in outcomes),
            "databases": [o.summary() for o in outcomes]}


def stressors(options: SoakOptions) -> dict[str, bool]:
    return {"bursts": options.bursts, "kills": options.kills, "restarts": options.restarts,
            "large_values": options.large_values > 0, "small_windows": options.small_windows,
            "spark_path": options.spark_path, "migrations": options.migrations}


def format_report(outcomes: list[Outcome], options: SoakOptions) -> str:
    on = [name for name, used in stressors(options).items() if used]
    lines = [f"soak: seed {options.seed}, {options.minutes:g} min per database, stressors: {', '.join(on) or 'none'}"]
    for o in outcomes:
        c = o.counts
        rss = c.get("peak_rss_mib", {})
        restarts = c.get("restarts", 0) if c.get("db_restarts_offered") else "n/a (no server)"
        lines += [
            f"{o.database}: {'OK' if o.ok else 'FAILED'}  "
            f"(acct {o.styles['acct']} style, team {o.styles['team']} style)",
            f"  writes {c.get('writes', 0)} in {c.get('transactions', 0)} transactions, conflicts "
            f"{c.get('conflicts', 0)}, aborted {c.get('aborted', 0)}, values over 1 MiB {c.get('large', 0)}",
            *([f"  aborted by: {c['aborted_by']}"] if c.get("aborted_by") else []),
            f"  events {c.get('events', 0)} {c.get('statuses', {})}, rows {c.get('source_rows', 0)}, "
            f"members {c.get('members', 0)}",
            f"  kills {c.get('kills', 0)}, starts {c.get('starts', 0)}, unasked exits {c.get('exits', 0)} "
            f"{c.get('exit_codes', [])}, "
            f"database restarts {restarts}, migrations {c.get('migrations', 0)}, cycles failed and retried "
            f"{c.get('failed_cycles', 0)}",
            f"  drain {c.get('drain_seconds', '-')} s, rows left N {c.get('rows_left_new', '-')}, "
            f"subscriber waiting {c.get('subscriber_waiting', '-')}",
            f"  peak RSS: driver {rss.get('python', '-')} MiB, JVM {rss.get('jvm', '-')} MiB",
        ]
        for name, r in o.readers.items():
            lines.append(f"  verify {name}: {r['differences']} differences over {r['objects']} objects, "
                         f"{r['documents']} documents replayed, {r['pending']} pending")
        lines += [f"  difference: {s}" for s in o.samples]
        lines += [f"  problem: {p}" for p in o.problems]
        tail = str(c.get("run_log_tail", "")).strip().splitlines()[-4:]
        lines += [f"  run log: {line[:300]}" for line in tail]
    total = sum(o.differences for o in outcomes)
    verdict = "OK" if all(o.ok for o in outcomes) else "FAILED"
    lines.append(f"soak {verdict}: {total} differences over {len(outcomes)} databases")
    return "\n".join(lines)
