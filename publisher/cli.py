"""The `publisher` command.

Exit codes: 0 done (rows may still have been rejected: see the statuses), 1 the database or the
output could not be used, 2 a bad configuration, argument or key.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from publisher.config import Config, ConfigError, load_config
from publisher.service.logs import configure_logging

if TYPE_CHECKING:
    from publisher.service.lock import PublisherLock

EPILOG = """\
configuration:
  A TOML file (see examples/publisher.toml). Any key can be overridden by an environment
  variable PUBLISHER_<SECTION>_<KEY> (PUBLISHER_DATABASE_URL, PUBLISHER_PUBLISHER_BATCH_SIZE)
  or by --set section.key=value, in that order of strength.

output (in output.directory):
  *.xml        XDS documents, always; names sort in publication order
  changes/     a Parquet change table per table, with output.change_tables.enabled = true
  messages/    metadata and data messages as JSON lines, with output.messages.enabled = true
               (and to NATS JetStream with output.messages.broker = "nats://host:4222")
  rejects.jsonl  the rows marked E, with the reason

statuses written to the event log:
  S published, or redundant/loopback (nothing left to do)   W query-back found no object
  E malformed row, not published (see rejects.jsonl)         N waiting (only triggers write N)

examples:
  publisher demo
  publisher install -c publisher.toml --table usr --style field --dry-run
  publisher install -c publisher.toml --check          exit 1 if a migration left a table's capture behind
  publisher poll -c publisher.toml
  publisher run -c publisher.toml --set publisher.polling_interval=2
  publisher verify -c publisher.toml    replay the documents, compare with the tables
  publisher poll -c publisher.toml --subscriber vault    one check-out of [subscribers.vault]
  publisher checkin -c publisher.toml --subscriber vault -e "UPDATE usr SET fname = 'x' WHERE idu = 1"
  publisher requeue -c publisher.toml --status E --table usr --reason "usr.born fixed" --dry-run
  publisher parse-key 'pkey=", ; \\' + \\" = \\\\ < >"'
"""


class UsageError(Exception):
    """Bad arguments or configuration: exit 2."""


class UnavailableError(Exception):
    """The database or output cannot be used now: exit 1."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="publisher",
        description="Publish the changes that database triggers log in an event log table as XDS documents.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("-c", "--config", required=True, metavar="CONFIG", help="TOML configuration file")
        sub.add_argument(
            "--set", action="append", default=[], metavar="KEY=VALUE",
            help="override one setting, e.g. --set publisher.query_limit=500 (repeatable)",
        )
        return sub

    demo = commands.add_parser(
        "demo", help="create a sample SQLite database, change it, poll once and print the documents",
        description="Creates DIR/demo.db with a usr table, the event log and triggers, makes inserts, "
        "updates and deletes, runs one polling cycle and prints the XDS documents it published. "
        "DIR/publisher.toml is left behind for further `publisher poll -c` runs.",
    )
    demo.add_argument("--directory", default="demo", metavar="DIR", help="where to put the demo (default: ./demo)")
    demo.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    demo.add_argument("--formats", action="store_true",
                      help="also write and print the change tables and messages (output.change_tables, "
                      "output.messages)")

    install = with_config(commands.add_parser(
        "install", help="create the event log table and the capture triggers",
        description="Creates the event log table (if missing) and (re)creates the triggers of each named "
        "table, reflecting its columns and primary key. A table configured as a logical class "
        "([classes.NAME]) gets the triggers of its child tables too, which log their rows as values of "
        "the parent's multi-valued attributes (README, \"Logical classes\").",
    ))
    install.add_argument("--table", action="append", default=[], metavar="T", help="table to capture (repeatable)")
    install.add_argument(
        "--style", choices=("field", "row"), default=None,
        help="field: one event per changed column (types 1, 2, 4); row: query-back events (5, 6, 4). "
        "Default: the style the table was installed with, else field",
    )
    install.add_argument("--dry-run", action="store_true", help="print the SQL instead of running it")
    install.add_argument(
        "--check", action="store_true",
        help="install nothing: exit 1 naming every installed table whose capture no longer matches its columns "
        "and key (a migration since), 0 if every one matches. For deployment pipelines: run it after the "
        "migrations, and `install --table T` for each table it names",
    )

    snapshot = with_config(commands.add_parser(
        "snapshot", help="publish every current row of the tables as a row query-back (initial load, resync)",
        description="Logs every current row of the tables (default: every published table) in the event log as a "
        "row query-back (type 5), in key order, a chunk per transaction; the next cycles (poll, run) publish each "
        "as the row as it is then, in order with the changes made meanwhile: a <modify> of every column, or with "
        "insert_row_operation = \"add\" an <add>, which a consumer refuses for an object it holds. A snapshot "
        "killed and started again with the same tables and condition continues after its last chunk. Prints one JSON "
        "summary line, and progress on stderr.",
    ))
    snapshot.add_argument("--table", action="append", default=[], metavar="T",
                          help="a published table to snapshot (repeatable; default: every published table)")
    snapshot.add_argument("--where", metavar="SQL",
                          help="only the rows this condition on the table selects, e.g. \"dept = 'sales'\"")
    snapshot.add_argument("--subscriber", metavar="NAME",
                          help="for this [subscribers.NAME] only: the tables and columns its subscription tracks, "
                          "published by its check-outs; the status mode and other subscribers pass it over")
    snapshot.add_argument("--dry-run", action="store_true", help="count the rows per table; log nothing")
    snapshot.add_argument("--chunk-rows", type=_positive, default=None, metavar="N",
                          help="rows logged per transaction (default 1000)")

    poll = with_config(commands.add_parser(
        "poll", help="run one polling cycle (or one subscriber's check-out) and print a JSON summary",
        description="Runs one polling cycle and prints one JSON line: events, operations, documents, statuses. "
        "With --subscriber, one check-out instead: every event of the subscriber's subscription committed since its "
        "previous check-out, published to its own output; the status column is not touched.",
    ))
    poll.add_argument("--subscriber", metavar="NAME",
                      help="check out for this [subscribers.NAME] instead of running the status mode's cycle")
    checkin = with_config(commands.add_parser(
        "checkin", help="run a subscriber's own changes, which are then never delivered back to it",
        description="Runs SQL in one transaction and records it as checked in by the subscriber (seed 002's "
        "check-in): the events it logs are delivered to every other subscriber, never to this one. Nothing is "
        "recorded if a statement fails.",
    ))
    checkin.add_argument("--subscriber", metavar="NAME", required=True, help="the [subscribers.NAME] checking in")
    sql = checkin.add_mutually_exclusive_group(required=True)
    sql.add_argument("-e", "--execute", action="append", metavar="SQL", help="a statement (repeatable, run in order)")
    sql.add_argument("-f", "--file", metavar="FILE", help="a file of statements separated by ;")
    run = with_config(commands.add_parser(
        "run", help="poll continuously until SIGINT/SIGTERM",
        description="Polls at the polling interval (or the times of day) with one warm SparkSession, "
        "logs one line per active cycle, and on SIGINT/SIGTERM finishes the current cycle and exits 0. "
        "Serves the status mode and every configured subscriber side by side, each under its own lock; "
        "one failing is retried with backoff while the others go on.",
    ))
    run.add_argument("--subscriber", metavar="NAME", help="serve only this [subscribers.NAME]")
    run.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="text: one readable line per entry (default); json: one JSON object per line (time, "
                     "level, message and, for a cycle, its summary's fields) for log collectors")
    _add_requeue(commands, with_config)
    with_config(commands.add_parser(
        "purge", help="delete the event log rows no reader needs any more",
        description="Deletes, in one transaction, the event log rows every configured subscriber has checked out "
        "and, unless publisher.status_mode = false, the status mode has processed (S or W; E rows stay). A "
        "subscriber that has never checked out holds every row back; one removed from the configuration holds "
        "nothing back.",
    ))
    stats = with_config(commands.add_parser(
        "stats", help="show the backlog of the event log",
        description="Rows per status and per table, and the age of the oldest new row; per subscriber, the events "
        "waiting for its next check-out, the oldest one's age, its last check-out, and the rows it alone holds back "
        "from purge.",
    ))
    stats_format = stats.add_mutually_exclusive_group()
    stats_format.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats_format.add_argument("--prometheus", action="store_true",
                              help="print the event log's gauges in the Prometheus text format (README, Metrics)")
    verify = with_config(commands.add_parser(
        "verify", help="replay the published documents and compare them with the tables",
        description="Replays the XDS documents of the output directory in order into a model of the "
        "downstream consumer and compares it with the current rows of the published tables; prints "
        "one line per difference and exits 1 if there is any. Poll until the event log is drained first.",
    ))
    verify.add_argument("--documents", metavar="DIR",
                        help="the directory of the documents to replay (default: output.directory)")
    verify.add_argument("--subscriber", metavar="NAME",
                        help="verify this subscriber's documents (default: its output) against the tables and "
                        "columns its subscription tracks")
    verify.add_argument("--repair", action="store_true",
                        help="for exactly the objects that differ, publish what makes the consumer equal (the "
                        "object's whole current state, or a <delete>) through the event log, then verify again. "
                        "If another publisher holds the lock, it publishes them")

    parse_key_cmd = commands.add_parser(
        "parse-key", help="parse a table_key and print it as JSON",
        description="Parses TEXT with the table_key grammar; prints its parts and canonical text, "
        "or the error with its position.",
    )
    parse_key_cmd.add_argument("text", metavar="TEXT")
    _add_bench(commands)
    from publisher.soak.command import add_parser as add_soak

    add_soak(commands)
    return parser


BENCH_DESCRIPTION = """\
Measures how fast the publisher drains a large backlog, against two yardsticks:

  1. workload   creates its own tables (PostgreSQL: schema `bench`, dropped and recreated;
                SQLite: a file) with the capture triggers, and makes EVENTS events through real
                inserts, updates and deletes, with query-back, loopback (5%) and malformed (0.1%) rows
  2. floor      the database itself: reading every new row (COPY ... TO STDOUT on PostgreSQL)
                and marking them all in one UPDATE, rolled back
  3. reference  one event at a time, as the vendor product works (one SELECT, one document and
                one commit per event), timed on the first SAMPLE events and extrapolated
  4. drain      the real publisher: cycles of QUERY_LIMIT events on one warm SparkSession until
                no new row is left; events/s, seconds per stage, peak memory, documents written
  5. latency    N cycles that each find 10 events just committed through the triggers: time from
                the commit to the documents on disk, median and p95

Documents go to a temporary directory that is removed afterwards. The default sizes take a long
while on a small machine: start with --rows 5000 --events 20000.

With --capture it measures something else: what the capture triggers cost the application.
On one table of four columns (int key, text, int, timestamp; 10000 rows) in a schema (MariaDB:
database) `capture_bench` it creates and drops, 4 clients run transactions of two UPDATEs of
existing keys, one INSERT and one DELETE for SECONDS seconds, with no triggers, with field-style
and with row-style capture (as `publisher install` puts them), alternating over ROUNDS rounds;
each run starts from a fresh table and an emptied event log. PostgreSQL runs the mix through
pgbench (on PATH); MariaDB through Python threads, one connection each. A failed transaction
stops the benchmark rather than lower the figures.

With --snapshot it measures what a snapshot of a large table costs, on PostgreSQL. In a schema
`snapshot_bench` it creates and drops, the workload's `usr` table is filled with ROWS rows
(default 1000000) and no trigger, so no event exists, then captured. It times the floor, COPY
(SELECT * FROM usr) TO STDOUT read in Python; the snapshot's logging, `publisher snapshot` of
the table (a row query-back per row); and the drain of those events by cycles of QUERY_LIMIT
events on one warm SparkSession, with the peak memory of the driver, the JVM and the workers.
"""

BENCH_EPILOG = """\
reading the report:
  publisher time / floor time        how many times the database's own minimum the drain took
  publisher speed / reference speed  how many times faster than publishing one event at a time
  stage ...                          where the drain spent its time (the stages of a cycle)

examples:
  publisher bench --database sqlite --rows 5000 --events 20000 --latency-cycles 10
  publisher bench --url postgresql://postgres@127.0.0.1:5432/test --query-limit 100000
  publisher bench --json > bench.json
  publisher bench --cluster --events 200000      the same drain on a standalone cluster

reading the --capture report:
  median tps    transactions per second, the median of the rounds (each round's beside it)
  slowdown      median tps without triggers / median tps with the style's triggers
  events/tx     events logged per committed transaction (0 without triggers)

  publisher bench --capture                              PostgreSQL, 3 rounds of 20 s
  publisher bench --capture --database mariadb --rounds 5 --seconds 30 --json

reading the --snapshot report:
  logging       the snapshot command: a chunk of rows' events per transaction
  drain         the cycles that publish those events, each row read back as it is then
  total / floor (logging + drain) / the COPY of the table
  every row published   one operation per row and no new row left in the event log

  publisher bench --snapshot                             1000000 rows, query_limit 200000
  publisher bench --snapshot --rows 5000000 --json
"""


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench", help="generate a backlog, drain it and compare with the floor and a one-at-a-time publisher",
        description=BENCH_DESCRIPTION, epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--database", choices=("postgresql", "sqlite", "mariadb"),
                       help="where the backlog lives (default: the --url's database, else postgresql); "
                       "mariadb only with --capture, sqlite only without")
    bench.add_argument("--url", metavar="URL",
                       help="SQLAlchemy URL (default: postgresql://postgres@127.0.0.1:5432/test, "
                       "mysql://root@127.0.0.1:3306/test for mariadb, or a temporary SQLite file)")
    bench.add_argument("--capture", action="store_true",
                       help="measure what the capture triggers cost the application's transactions instead "
                       "(see above); uses only --database, --url, --seconds, --rounds and --json")
    bench.add_argument("--snapshot", action="store_true",
                       help="measure what a snapshot of a table of --rows rows costs instead (see above), on "
                       "PostgreSQL; uses only --url, --rows, --query-limit, --master and --json")
    bench.add_argument("--seconds", type=_positive, default=20, metavar="S",
                       help="--capture: seconds each configuration runs per round (default: 20)")
    bench.add_argument("--rounds", type=_positive, default=3, metavar="N",
                       help="--capture: rounds of the three configurations; the report takes medians (default: 3)")
    bench.add_argument("--rows", type=_positive, metavar="R",
                       help="rows of the usr table before the events start (default: 100000; "
                       "--snapshot: 1000000)")
    bench.add_argument("--events", type=_positive, default=1_000_000, metavar="E",
                       help="events in the backlog (default: 1000000)")
    bench.add_argument("--query-limit", type=_positive, default=200_000, metavar="Q",
                       help="events per drain cycle (default: 200000)")
    bench.add_argument("--latency-cycles", type=_positive, default=50, metavar="N",
                       help="small polls of 10 events for the latency figures (default: 50)")
    bench.add_argument("--reference-sample", type=_positive, default=5_000, metavar="SAMPLE",
                       help="events the one-at-a-time reference publishes (default: 5000)")
    bench.add_argument("--master", default="local[*]", metavar="M", help="Spark master (default: local[*])")
    bench.add_argument("--cluster", action="store_true",
                       help="start a Spark standalone master and worker on 127.0.0.1 from the installed Spark's "
                       "scripts and run the drain on them (ignores --master)")
    bench.add_argument("--formats", action="store_true",
                       help="also write change tables and messages (output.change_tables, output.messages, with "
                       "trail headers); the stage table shows their cost as `changes`")
    bench.add_argument("--backlog", choices=("mix", "rejected", "gone"), default="mix",
                       help="mix: the events as the triggers logged them (default); rejected: each row then "
                       "rewritten to name a table that is not published, so every row is E; gone: each row "
                       "a row query-back of a key no row has, so every row is W")
    bench.add_argument("--subscribers", type=_not_negative, default=0, metavar="N",
                       help="also configure N subscribers of every published table, and time each one's check-out "
                       "of the whole backlog before the status mode drains it (default: 0)")
    bench.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")


REQUEUE_DESCRIPTION = """\
Puts event log rows the publisher set aside back to N, once their cause is fixed, so that the
next cycle publishes them: E (rejected as malformed, see rejects.jsonl) by default, W (query-back
found no object) with --status W, both with --status E,W. --table and --from/--to narrow the
choice; all filters together must hold. One transaction; prints one JSON line with the rows put
back per status and table. Every requeue (not --dry-run) is recorded with its --reason as a JSON
line in requeue.jsonl in the output directory. A running publisher need not stop: it picks the
rows up in its next cycle.
"""


def _add_requeue(commands: Any, with_config: Any) -> None:
    requeue = with_config(commands.add_parser(
        "requeue", help="put E (or W) rows back to N once their cause is fixed",
        description=REQUEUE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    ))
    requeue.add_argument("--status", action="append", type=_requeue_statuses, metavar="E|W",
                         help="which rows: E (default), W, or E,W (repeatable)")
    requeue.add_argument("--table", metavar="T",
                         help="only rows of this table_name (exactly or ignoring case, as a cycle resolves it)")
    requeue.add_argument("--from", dest="first", type=int, metavar="ID", help="only record_ids from ID on (inclusive)")
    requeue.add_argument("--to", dest="last", type=int, metavar="ID", help="only record_ids up to ID (inclusive)")
    requeue.add_argument("--reason", metavar="TEXT", help="why: recorded with the requeue in requeue.jsonl")
    requeue.add_argument("--dry-run", action="store_true", help="count what would be put back, change nothing")


def _requeue_statuses(text: str) -> tuple[Any, ...]:
    from publisher.service.requeue import RequeueError, parse_statuses

    try:
        return parse_statuses(text)
    except RequeueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _not_negative(text: str) -> int:
    return _positive(text, least=0)


def _positive(text: str, least: int = 1) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < least:
        raise argparse.ArgumentTypeError(f"expected a number of at least {least}, got {number}")
    return number


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(getattr(args, "log_format", "text"))
    try:
        return _dispatch(args)
    except UsageError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
        return 2
    except UnavailableError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("publisher: interrupted; what was not acknowledged is published again next time", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "parse-key":
        return _parse_key(args.text)
    if args.command == "demo":
        from publisher.service.demo import run_demo

        return _guard(lambda: run_demo(Path(args.directory), args.master, args.formats), None)
    if args.command == "bench":
        return _guard(lambda: _bench(args), None)
    if args.command == "soak":
        from publisher.soak.command import run as run_soak

        return run_soak(args)
    config = _load(args)
    if args.command == "install":
        return _guard(lambda: _install(config, args), config)
    if args.command == "poll":
        return _guard(lambda: _poll(config, args.subscriber), config)
    if args.command == "snapshot":
        return _guard(lambda: _snapshot(config, args), config)
    if args.command == "purge":
        return _guard(lambda: _purge(config), config)
    if args.command == "requeue":
        return _guard(lambda: _requeue(config, args), config)
    if args.command == "checkin":
        return _guard(lambda: _checkin(config, args), config)
    if args.command == "run":
        return _guard(lambda: _run(config, args.subscriber), config)
    if args.command == "stats":
        if args.prometheus:
            return _guard(lambda: _stats_prometheus(config), config)
        return _guard(lambda: _stats(config, args.json), config)
    if args.command == "verify":
        return _guard(lambda: _verify(config, args.documents, args.subscriber, args.repair), config)
    raise UsageError(f"unknown command {args.command}")  # pragma: no cover


def _load(args: argparse.Namespace) -> Config:
    try:
        return load_config(args.config, overrides=args.set)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _guard(action: Any, config: Config | None) -> int:
    """Turn an unreachable database or unwritable output into exit 1 with one readable line."""
    from sqlalchemy.exc import DBAPIError, NoSuchTableError, OperationalError

    from publisher.capture.install import CaptureError
    from publisher.database import MissingDriverError
    from publisher.errors import TransientError, root_cause
    from publisher.errors import MissingStateError
    from publisher.service.lock import LockHeldError
    from publisher.service.snapshot import SnapshotError

    redact = config.database.redact if config else str
    try:
        return int(action())
    except (CaptureError, ConfigError, MissingStateError, SnapshotError) as exc:
        raise UsageError(str(exc)) from None
    except MissingDriverError as exc:
        raise UnavailableError(str(exc)) from None
    except (TransientError, LockHeldError) as exc:
        raise UnavailableError(redact(str(exc))) from None
    except NoSuchTableError as exc:
        raise UsageError(f"table {exc} does not exist") from None
    except (OperationalError, DBAPIError) as exc:
        where = config.database.display_url() if config else "the database"
        raise UnavailableError(f"cannot use the database at {where}: {redact(root_cause(exc))}") from None
    except OSError as exc:
        raise UnavailableError(f"cannot write the output: {exc}") from None


def _parse_key(text: str) -> int:
    from publisher.model.keys import KeySyntaxError, format_key, parse_key

    try:
        parts = parse_key(text)
    except KeySyntaxError as exc:
        print(f"publisher: {exc}\n  {text}\n  {' ' * exc.position}^", file=sys.stderr)
        return 2
    print(json.dumps({
        "parts": [{"column": p.column, "value": p.value} for p in parts],
        "canonical": format_key(parts),
    }, ensure_ascii=False))
    return 0


def _install(config: Config, args: argparse.Namespace) -> int:
    from publisher.capture.install import install_capture
    from publisher.database import connect, is_mysql
    from publisher.model.logical import installed_children

    engine = connect(config)
    if args.check:
        return _check_capture(config, engine)
    statements = install_capture(config, engine, args.table, args.style, args.dry_run)
    if args.dry_run:
        # The mariadb/mysql clients end a statement at the first ';', inside a trigger's BEGIN ... END too.
        mysql = is_mysql(engine)
        print("DELIMITER //\n" if mysql and statements else "", end="")
        for statement in statements:
            print(statement.rstrip().rstrip(";") + ("\n//\n" if mysql else ";\n"))
        print("DELIMITER ;" if mysql and statements else "", end="\n" if mysql and statements else "")
    else:
        names = ", ".join(args.table) or "no tables"
        children = [f"{child} (values of {table}.{attribute})" for table, attribute, child in
                    installed_children(config.classes, args.table)]
        print(f"installed the event log {config.event_log.table} and the {args.style or 'capture'} triggers of {names}"
              + (f"; child tables: {', '.join(children)}" if children else ""), file=sys.stderr)
    return 0


def _snapshot(config: Config, args: argparse.Namespace) -> int:
    from publisher.database import connect
    from publisher.service.snapshot import CHUNK_ROWS, ProgressLines, snapshot

    result = snapshot(config, connect(config), args.table, args.where, args.subscriber, args.dry_run,
                      args.chunk_rows or CHUNK_ROWS, ProgressLines())
    print(json.dumps(result.summary()))
    if not args.dry_run:
        by = "run or poll" if args.subscriber is None else f"poll --subscriber {args.subscriber}"
        print(f"logged {result.summary()['events']} row query-backs; {by} publishes them", file=sys.stderr)
    return 0


def _check_capture(config: Config, engine: Any) -> int:
    from publisher.capture.install import capture_problems

    problems = capture_problems(config, engine)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} table(s) to install again: publisher install -c CONFIG --table T", file=sys.stderr)
        return 1
    print("every installed table's capture matches its columns and key", file=sys.stderr)
    return 0


def _poll(config: Config, subscriber: str | None) -> int:
    from publisher.database import connect
    from publisher.pipeline.cycle import run_cycle
    from publisher.pipeline.spark import get_spark
    from publisher.service.lock import PublisherLock

    engine = connect(config)
    _check_reachable(engine)
    if subscriber is None:
        _warn_unpublished(config, engine)
        with PublisherLock(config) as lock:
            result = run_cycle(lambda: get_spark(config.spark), engine, config)
        print(json.dumps(result.summary()))
        _check_not_lost(lock)
        return 0
    from publisher.service.checkouts import check_out

    with PublisherLock(config, subscriber=subscriber) as lock:
        results = check_out(lambda: get_spark(config.spark), engine, config, subscriber)
    print(json.dumps(results.summary()))
    _check_not_lost(lock)
    return 0


def _purge(config: Config) -> int:
    from publisher.database import connect
    from publisher.pipeline.retention import purge

    purged = purge(connect(config), config)
    print(json.dumps({"deleted": purged.deleted, "waiting_for": list(purged.waiting_for)}))
    if purged.waiting_for:
        print(f"publisher: nothing deleted: {', '.join(purged.waiting_for)} never checked out, so every row may "
              "still be needed", file=sys.stderr)
    return 0


def _requeue(config: Config, args: argparse.Namespace) -> int:
    from publisher.database import connect
    from publisher.service.requeue import DEFAULT_STATUSES, RequeueError, Selection, requeue

    statuses = tuple(dict.fromkeys(s for given in args.status for s in given)) if args.status else DEFAULT_STATUSES
    try:
        selection = Selection(statuses, args.table, args.first, args.last)
        done = requeue(config, connect(config), selection, args.reason, args.dry_run)
    except RequeueError as exc:
        raise UsageError(f"requeue: {exc}") from None
    print(json.dumps(done.summary()))
    counted = ", ".join(f"{status} {n}" for status, n in done.by_status.items()) or "none"
    if args.dry_run:
        print(f"dry run: would put {_count(done.total, 'row')} back to N ({counted}); nothing changed",
              file=sys.stderr)
    else:
        print(f"put {_count(done.total, 'row')} back to N ({counted}); recorded in {done.record}"
              + (f" with the reason: {args.reason}" if args.reason else ""), file=sys.stderr)
        if config.subscribers:
            print("publisher: subscribers read rows whatever their status: this changes what the status mode "
                  "publishes, not what they do", file=sys.stderr)
    return 0


def _warn_unpublished(config: Config, engine: Any) -> None:
    """Say once, before publishing, which tables new rows name that a cycle would reject."""
    from publisher.service.stats import unpublished_tables

    found = unpublished_tables(config, engine)
    if found:
        logging.getLogger("publisher").warning(
            "new rows of the event log name tables that are not published, and a cycle marks them E: %s",
            "; ".join(f"{table} ({why})" for table, why in found.items()),
            extra={"fields": {"unpublished_tables": found}},
        )


def _checkin(config: Config, args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from publisher.database import connect
    from publisher.errors import root_cause
    from publisher.service.checkouts import check_in, statements_of

    config.subscriber(args.subscriber)
    engine = connect(config)
    if args.file is not None:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"-f {args.file}: {exc.strerror or exc}") from None
        statements = statements_of(text, engine.dialect.name)
    else:
        statements = list(args.execute)
    with check_in(engine, config, args.subscriber) as conn:
        for number, statement in enumerate(statements, start=1):
            try:
                conn.exec_driver_sql(statement)
            except DBAPIError as exc:
                which = f"statement {number}" if len(statements) > 1 else "the SQL"
                raise UnavailableError(
                    f"checkin: {which} failed, nothing was changed or checked in: "
                    f"{config.database.redact(root_cause(exc))}"
                ) from None
    print(f"checked in {len(statements)} statement(s) for subscriber {args.subscriber}", file=sys.stderr)
    return 0


def _run(config: Config, subscriber: str | None) -> int:
    """Serve every reader of the event log (the status mode and each subscriber, or the one
    named) side by side, each under its own lock and at its own pace; one failing does not stop
    the others."""
    from publisher.database import connect
    from publisher.service.loop import serve_readers

    log = logging.getLogger("publisher")
    if subscriber is not None:
        config.subscriber(subscriber)
        readers: list[str | None] = [subscriber]
    else:
        readers = [None] if config.publisher.status_mode else []
        readers += sorted(config.subscribers)
    if not readers:
        raise UsageError("nothing to run: publisher.status_mode = false and no [subscribers.NAME] is configured")
    engine = connect(config)
    _check_reachable(engine)
    if None in readers:
        _warn_unpublished(config, engine)
    metrics = None
    with contextlib.ExitStack() as serving:  # the metrics server stops on every way out
        if config.metrics.port:
            from publisher.service.metrics import PublisherMetrics

            metrics = PublisherMetrics(config, engine)
            serving.enter_context(metrics.serving(config.metrics))
        failed = serve_readers(config, engine, readers, metrics)
    log.info("stopped")
    if failed:
        raise UnavailableError("; ".join(failed))
    return 0


def _stats_prometheus(config: Config) -> int:
    from publisher.database import connect
    from publisher.service.metrics import exposition

    print(exposition(config, connect(config)), end="")
    return 0


def _stats(config: Config, as_json: bool) -> int:
    from publisher.database import connect
    from publisher.service.stats import backlog, format_backlog

    report = backlog(config, connect(config))
    print(json.dumps(report, default=str) if as_json else format_backlog(report))
    return 0


def _verify(config: Config, documents: str | None, subscriber: str | None, repair: bool = False) -> int:
    from publisher.database import connect
    from publisher.service.mirror import check

    engine = connect(config)
    default = config.output.directory if subscriber is None else config.subscriber(subscriber).output
    directory = Path(documents or default)
    if repair and documents is not None and directory.resolve() != Path(default).resolve():
        raise UsageError("verify --repair: repairs the consumer of the configured output; --documents names another")
    if repair:
        directory.mkdir(parents=True, exist_ok=True)  # no document yet: a consumer that holds nothing
    if not directory.is_dir():
        raise UnavailableError(f"no documents to replay: the directory {directory} does not exist")
    if not repair:
        result = check(config, engine, directory, subscriber)
        _report_verification(result, subscriber)
        return 1 if result.differences else 0
    from publisher.service.repair import repair_consumer

    outcome = repair_consumer(config, engine, directory, subscriber,
                              lambda found: _report_verification(found, subscriber))
    if outcome.logged is None:
        return 0
    print(json.dumps(outcome.logged.summary()))
    if not outcome.published:
        print(f"logged {_count(outcome.logged.total, 'event')}; the publisher holding the lock publishes them",
              file=sys.stderr)
        return 0
    _report_verification(outcome.final, subscriber)
    return 1 if outcome.final.differences else 0


def _report_verification(result: Any, subscriber: str | None) -> None:
    for difference in result.differences:
        print(difference)
    counted = f"{_count(result.objects, 'object')} in {_count(result.tables, 'table')}"
    if result.differences:
        print(f"{_count(len(result.differences), 'difference')} over {counted}")
    else:
        print(f"mirror equals source: {counted}, {_count(result.documents, 'document')} replayed")
    if result.pending:
        are = "is" if result.pending == 1 else "are"
        waiting = "still new" if subscriber is None else "not checked out yet"
        print(f"note: {_count(result.pending, 'event')} {are} {waiting}; poll until drained before verifying")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _bench(args: argparse.Namespace) -> int:
    from publisher.bench.run import BenchOptions, format_report, run_benchmark
    from publisher.bench.workload import Backlog, Dialect, WorkloadError

    if args.capture and args.snapshot:
        raise UsageError("bench: --capture and --snapshot measure different things; choose one")
    if args.capture:
        return _bench_capture(args)
    if args.snapshot:
        return _bench_snapshot(args)
    if args.database == "mariadb":
        raise UsageError("bench: --database mariadb measures only --capture")
    database: Dialect = "postgresql"
    if args.database == "sqlite" or (args.database is None and (args.url or "").startswith("sqlite")):
        database = "sqlite"
    options = BenchOptions(
        database=database, url=args.url, rows=args.rows or 100_000, events=args.events, query_limit=args.query_limit,
        latency_cycles=args.latency_cycles, reference_sample=args.reference_sample, master=args.master,
        cluster=args.cluster, formats=args.formats, backlog=Backlog(args.backlog), subscribers=args.subscribers,
    )
    try:
        report = run_benchmark(options)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(report.summary()) if args.json else format_report(report))
    return 0


def _bench_capture(args: argparse.Namespace) -> int:
    from publisher.bench.capture import CaptureBenchError, CaptureOptions, format_capture_report, run_capture_bench
    from publisher.dialects import is_mysql

    database = args.database
    if database is None:
        scheme = (args.url or "").split(":", 1)[0].split("+", 1)[0]
        database = "mariadb" if is_mysql(scheme) else "postgresql"
    if database == "sqlite":
        raise UsageError("bench --capture: sqlite has no concurrent writers to measure; use postgresql or mariadb")
    options = CaptureOptions(database=database, url=args.url, seconds=args.seconds, rounds=args.rounds)
    try:
        report = run_capture_bench(options)
    except CaptureBenchError as exc:
        raise UnavailableError(str(exc)) from None
    print(json.dumps(report.summary()) if args.json else format_capture_report(report))
    return 0


def _bench_snapshot(args: argparse.Namespace) -> int:
    from publisher.bench.snapshot import SnapshotOptions, format_snapshot_report, run_snapshot_bench
    from publisher.bench.workload import WorkloadError

    scheme = (args.url or "postgresql").split(":", 1)[0].split("+", 1)[0]
    if args.database not in (None, "postgresql") or scheme not in ("postgresql", "postgres"):
        raise UsageError("bench --snapshot: measured on postgresql only")
    options = SnapshotOptions(url=args.url, rows=args.rows or 1_000_000, query_limit=args.query_limit,
                              master=args.master)
    try:
        report = run_snapshot_bench(options)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(report.summary()) if args.json else format_snapshot_report(report))
    return 0


def _check_not_lost(lock: PublisherLock) -> None:
    """A publisher that lost its lock may have overlapped with another one: say so, exit 1."""
    if lock.lost:
        raise UnavailableError(
            "lost the lock of the event log while publishing: another publisher may have published the same events"
        )


def _check_reachable(engine: Any) -> None:
    """Fail fast, before Spark starts, when the database is not there."""
    with engine.connect():
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
