"""What each command takes, with the help that teaches it."""
from __future__ import annotations

import argparse
import textwrap
from typing import Any

from publisher.cli.argument_types import positive
from publisher.cli.bench_arguments import add_bench

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="publisher",
        description="Publish the changes that database triggers log in an event log table as XDS documents.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _add_demo, _add_install, _add_snapshot, _add_poll, _add_migrate, _add_checkin,
        _add_run, _add_requeue, _add_purge, _add_stats, _add_verify, _add_parse_key, add_bench,
    ):
        add_command(commands)
    from publisher.workshop.soak.command import add_parser as add_soak

    add_soak(commands)
    return parser


def _with_config(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The two options of every command that reads the configuration."""
    sub.add_argument("-c", "--config", required=True, metavar="CONFIG", help="TOML configuration file")
    sub.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one setting, e.g. --set publisher.query_limit=500 (repeatable)",
    )
    return sub


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser(
        "demo", help="create a sample database in a file, change it, poll once and print the documents",
        description="Creates DIR/demo.db with a usr table, the event log and triggers, makes inserts, "
        "updates and deletes, runs one polling cycle and prints the XDS documents it published. "
        "DIR/publisher.toml is left behind for further `publisher poll -c` runs.",
    )
    demo.add_argument("--directory", default="demo", metavar="DIR", help="where to put the demo (default: ./demo)")
    demo.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    demo.add_argument("--formats", action="store_true",
                      help="also write and print the change tables and messages (output.change_tables, "
                      "output.messages)")


def _add_install(commands: Any) -> None:
    install = _with_config(commands.add_parser(
        "install", help="create the event log table and the capture triggers",
        description="Creates the event log table (if missing) and (re)creates the triggers of each named "
        "table, reflecting its columns and primary key. A table configured as a logical class "
        "([classes.NAME]) gets the triggers of its child tables too, which log their rows as values of "
        "the parent's multi-valued attributes (docs: Concepts, \"Logical classes\").",
    ))
    install.add_argument("--table", action="append", default=[], metavar="T",
                         help="table to capture (repeatable). Default: the tables of [publisher] tables, "
                         "else none (the event log alone)")
    install.add_argument(
        "--style", choices=("field", "row"), default=None,
        help="field: one event per changed column (types 1, 2, 4); row: query-back events (5, 6, 4). "
        "Default: the style the table was installed with, else field",
    )
    install.add_argument(
        "--native", action=argparse.BooleanOptionalAction, default=None,
        help="capture through a C function built for the database server, where the database has one "
        "(about a third of the PL/pgSQL capture's cost to the application's writes; migrations never break it). "
        "Needs the library on the database server (`make native` there) and a superuser. "
        "Default: what the table has, else PL/pgSQL",
    )
    install.add_argument("--dry-run", action="store_true", help="print the SQL instead of running it")
    install.add_argument(
        "--check", action="store_true",
        help="install nothing: exit 1 naming every installed table whose capture no longer matches its columns "
        "and key (a migration since), 0 if every one matches. For deployment pipelines: run it after the "
        "migrations, and `install --table T` for each table it names",
    )


def _add_snapshot(commands: Any) -> None:
    snapshot = _with_config(commands.add_parser(
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
    snapshot.add_argument("--chunk-rows", type=positive, default=None, metavar="N",
                          help="rows read per transaction (default 1000; 10000 with --direct)")
    snapshot.add_argument("--direct", action="store_true",
                          help="write the rows' operations into the status mode's documents itself, holding its "
                          "lock (no cycle runs meanwhile), instead of logging them: many times faster for a large "
                          "table. Rows with events waiting in the log, views and logical classes are still logged. "
                          "Not with --subscriber, nor with change tables or messages on")
    snapshot.add_argument("--parallel-rows", type=positive, default=None, metavar="N",
                          help="--direct: a table with at least N rows left is cut into key ranges taken at once, "
                          "by the driver's threads on a local master, else by Spark's tasks (default 200000)")


def _add_poll(commands: Any) -> None:
    poll = _with_config(commands.add_parser(
        "poll", help="run one polling cycle (or one subscriber's check-out) and print a JSON summary",
        description="Runs one polling cycle and prints one JSON line: events, operations, documents, statuses. "
        "With --subscriber, one check-out instead: every event of the subscriber's subscription committed since its "
        "previous check-out, published to its own output; the status column is not touched.",
    ))
    poll.add_argument("--subscriber", metavar="NAME",
                      help="check out for this [subscribers.NAME] instead of running the status mode's cycle")


def _add_migrate(commands: Any) -> None:
    migrate = _with_config(commands.add_parser(
        "migrate", help="run a migration of published tables without failing the application's writes",
        description=textwrap.fill(
        "Runs the application's SQL (DDL and data changes) and makes the capture of every published "
        "table it changes anew right after each statement, where no write of the table can run in between: in one "
        "transaction where the database's DDL is transactional (undone whole if a statement fails), else under LOCK "
        "TABLES (where DDL cannot be undone: a failure says which statements had run). The application's writes of "
        "those tables wait meanwhile instead of failing. A TRUNCATE of a published table publishes a delete per row "
        "on every database. Statements on other tables pass through. Once committed, every table whose shape "
        "changed is published again (a snapshot), so that the consumer ends equal. Prints one JSON summary line.",
        width=100),
        epilog="examples:\n"
        "  publisher migrate -c publisher.toml -e 'ALTER TABLE usr RENAME COLUMN fname TO given'\n"
        "  publisher migrate -c publisher.toml -f migrations/0042.sql --dry-run\n"
        "  publisher migrate -c publisher.toml --resync-owed --set database.url=\"$OWNER_URL\"",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ))
    migration = migrate.add_mutually_exclusive_group(required=True)
    migration.add_argument("-e", "--execute", action="append", metavar="SQL",
                           help="a statement (repeatable, run in order)")
    migration.add_argument("-f", "--file", metavar="FILE",
                           help="a file of statements separated by ; (- for standard input)")
    migration.add_argument("--resync-owed", action="store_true",
                           help="run no SQL: publish again the rows that migrations owe (their resync), for every "
                           "reader; as the tables' owner, where a migration's own resync did not finish (its process "
                           "killed) and the publisher's user may not take it")
    migrate.add_argument("--dry-run", action="store_true",
                         help="print every statement the migration would run, the capture's included: where the "
                         "database's DDL is transactional it runs and is rolled back, so the capture's SQL is the new "
                         "shape's; elsewhere nothing runs")


def _add_checkin(commands: Any) -> None:
    checkin = _with_config(commands.add_parser(
        "checkin", help="run a subscriber's own changes, which are then never delivered back to it",
        description="Runs SQL in one transaction and records it as checked in by the subscriber (seed 002's "
        "check-in): the events it logs are delivered to every other subscriber, never to this one. Nothing is "
        "recorded if a statement fails.",
    ))
    checkin.add_argument("--subscriber", metavar="NAME", required=True, help="the [subscribers.NAME] checking in")
    sql = checkin.add_mutually_exclusive_group(required=True)
    sql.add_argument("-e", "--execute", action="append", metavar="SQL", help="a statement (repeatable, run in order)")
    sql.add_argument("-f", "--file", metavar="FILE", help="a file of statements separated by ;")


def _add_run(commands: Any) -> None:
    run = _with_config(commands.add_parser(
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


def _add_purge(commands: Any) -> None:
    _with_config(commands.add_parser(
        "purge", help="delete the event log rows no reader needs any more",
        description="Deletes, in one transaction, the event log rows every configured subscriber has checked out "
        "and, unless publisher.status_mode = false, the status mode has processed (S or W; E rows stay). A "
        "subscriber that has never checked out holds every row back; one removed from the configuration holds "
        "nothing back.",
    ))


def _add_stats(commands: Any) -> None:
    stats = _with_config(commands.add_parser(
        "stats", help="show the backlog of the event log",
        description="Rows per status and per table, and the age of the oldest new row; per subscriber, the events "
        "waiting for its next check-out, the oldest one's age, its last check-out, and the rows it alone holds back "
        "from purge. A triggerless publisher (publication_mode = \"triggerless\") has no event log: it shows its "
        "state instead (the generation the consumer holds, when it was kept, the rows of each table, what the last "
        "cycle published), read from the output directory.",
    ))
    stats_format = stats.add_mutually_exclusive_group()
    stats_format.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats_format.add_argument("--prometheus", action="store_true",
                              help="print the event log's gauges (a triggerless publisher's: its state's) in the "
                              "Prometheus text format (docs: Reference, \"Metrics\")")


def _add_verify(commands: Any) -> None:
    verify = _with_config(commands.add_parser(
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


def _add_parse_key(commands: Any) -> None:
    parse_key_cmd = commands.add_parser(
        "parse-key", help="parse a table_key and print it as JSON",
        description="Parses TEXT with the table_key grammar; prints its parts and canonical text, "
        "or the error with its position.",
    )
    parse_key_cmd.add_argument("text", metavar="TEXT")


REQUEUE_DESCRIPTION = """\
Puts event log rows the publisher set aside back to N, once their cause is fixed, so that the
next cycle publishes them: E (rejected as malformed, see rejects.jsonl) by default, W (query-back
found no object) with --status W, both with --status E,W. --table and --from/--to narrow the
choice; all filters together must hold. One transaction; prints one JSON line with the rows put
back per status and table. Every requeue (not --dry-run) is recorded with its --reason as a JSON
line in requeue.jsonl in the output directory. A running publisher need not stop: it picks the
rows up in its next cycle.
"""


def _add_requeue(commands: Any) -> None:
    requeue = _with_config(commands.add_parser(
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
