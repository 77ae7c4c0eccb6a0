"""The `publisher` command.

Exit codes: 0 done (rows may still have been rejected: see the statuses), 1 the database or the
output could not be used, 2 a bad configuration, argument or key.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from publisher.config import Config, ConfigError, load_config

EPILOG = """\
configuration:
  A TOML file (see examples/publisher.toml). Any key can be overridden by an environment
  variable PUBLISHER_<SECTION>_<KEY> (PUBLISHER_DATABASE_URL, PUBLISHER_PUBLISHER_BATCH_SIZE)
  or by --set section.key=value, in that order of strength.

statuses written to the event log:
  S published, or redundant/loopback (nothing left to do)   W query-back found no object
  E malformed row, not published (see rejects.jsonl)         N waiting (only triggers write N)

examples:
  publisher demo
  publisher install -c publisher.toml --table usr --style field --dry-run
  publisher poll -c publisher.toml
  publisher run -c publisher.toml --set publisher.polling_interval=2
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

    install = with_config(commands.add_parser(
        "install", help="create the event log table and the capture triggers",
        description="Creates the event log table (if missing) and (re)creates the triggers of each named "
        "table, reflecting its columns and primary key.",
    ))
    install.add_argument("--table", action="append", default=[], metavar="T", help="table to capture (repeatable)")
    install.add_argument(
        "--style", choices=("field", "row"), default="field",
        help="field: one event per changed column (types 1, 2, 4); row: query-back events (5, 6, 4)",
    )
    install.add_argument("--dry-run", action="store_true", help="print the SQL instead of running it")

    with_config(commands.add_parser(
        "poll", help="run one polling cycle and print a JSON summary",
        description="Runs one polling cycle and prints one JSON line: events, operations, documents, statuses.",
    ))
    with_config(commands.add_parser(
        "run", help="poll continuously until SIGINT/SIGTERM",
        description="Polls at the polling interval (or the times of day) with one warm SparkSession, "
        "logs one line per active cycle, and on SIGINT/SIGTERM finishes the current cycle and exits 0.",
    ))
    stats = with_config(commands.add_parser(
        "stats", help="show the backlog of the event log",
        description="Rows per status and per table, and the age of the oldest new row.",
    ))
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")

    parse_key_cmd = commands.add_parser(
        "parse-key", help="parse a table_key and print it as JSON",
        description="Parses TEXT with the table_key grammar; prints its parts and canonical text, "
        "or the error with its position.",
    )
    parse_key_cmd.add_argument("text", metavar="TEXT")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        return _dispatch(args)
    except UsageError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
        return 2
    except UnavailableError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "parse-key":
        return _parse_key(args.text)
    if args.command == "demo":
        from publisher.demo import run_demo

        return _guard(lambda: run_demo(Path(args.directory), args.master), None)
    config = _load(args)
    if args.command == "install":
        return _guard(lambda: _install(config, args), config)
    if args.command == "poll":
        return _guard(lambda: _poll(config), config)
    if args.command == "run":
        return _guard(lambda: _run(config), config)
    if args.command == "stats":
        return _guard(lambda: _stats(config, args.json), config)
    raise UsageError(f"unknown command {args.command}")  # pragma: no cover


def _load(args: argparse.Namespace) -> Config:
    try:
        return load_config(args.config, overrides=args.set)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _guard(action: Any, config: Config | None) -> int:
    """Turn an unreachable database or unwritable output into exit 1 with one readable line."""
    from sqlalchemy.exc import DBAPIError, NoSuchTableError, OperationalError

    from publisher.capture import CaptureError

    try:
        return int(action())
    except CaptureError as exc:
        raise UsageError(str(exc)) from None
    except NoSuchTableError as exc:
        raise UsageError(f"table {exc} does not exist") from None
    except (OperationalError, DBAPIError) as exc:
        where = config.database.display_url() if config else "the database"
        detail = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise UnavailableError(f"cannot use the database at {where}: {detail}") from None
    except OSError as exc:
        raise UnavailableError(f"cannot write the output: {exc}") from None


def _parse_key(text: str) -> int:
    from publisher.keys import KeySyntaxError, format_key, parse_key

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
    from publisher.capture import install_capture
    from publisher.database import connect

    statements = install_capture(config, connect(config), args.table, args.style, args.dry_run)
    if args.dry_run:
        for statement in statements:
            print(statement.rstrip().rstrip(";") + ";\n")
    else:
        names = ", ".join(args.table) or "no tables"
        print(f"installed the event log {config.event_log.table} and the {args.style} triggers of {names}",
              file=sys.stderr)
    return 0


def _poll(config: Config) -> int:
    from publisher.cycle import run_cycle
    from publisher.database import connect
    from publisher.spark import get_spark

    engine = connect(config)
    _check_reachable(engine)
    result = run_cycle(get_spark(config.spark), engine, config)
    print(json.dumps(result.summary()))
    return 0


def _run(config: Config) -> int:
    from publisher.database import connect
    from publisher.loop import install_stop_handlers, run_forever
    from publisher.spark import get_spark

    engine = connect(config)
    _check_reachable(engine)
    stop = threading.Event()
    install_stop_handlers(stop)
    spark = get_spark(config.spark)
    logging.getLogger("publisher").info(
        "publishing %s from %s to %s", config.event_log.table, config.database.display_url(), config.output.directory
    )
    run_forever(spark, engine, config, stop)
    logging.getLogger("publisher").info("stopped")
    return 0


def _stats(config: Config, as_json: bool) -> int:
    from publisher.database import connect
    from publisher.stats import backlog, format_backlog

    report = backlog(config, connect(config))
    print(json.dumps(report, default=str) if as_json else format_backlog(report))
    return 0


def _check_reachable(engine: Any) -> None:
    """Fail fast, before Spark starts, when the database is not there."""
    with engine.connect():
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
