"""What `publisher bench` takes: the workshop's command, whose help explains its reports."""
from __future__ import annotations

import argparse
from typing import Any

from publisher.cli.argument_types import not_negative, positive
from publisher.workshop.databases import copying, draining, mixing, names

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
(SELECT * FROM usr) TO STDOUT read in Python; then `publisher snapshot --direct` of the table
(its rows written as documents, in key ranges taken at once: on a local master by the driver's
threads, with --small-cycle-events 0 or on a cluster by Spark's tasks), or with
--snapshot-logged its logging (a row query-back per row) and the drain of those events by cycles
of QUERY_LIMIT events on one warm SparkSession; with the peak memory of the driver, the JVM and
the workers. Beside the COPY, a second floor: the COPY plus as many bytes as the snapshot's
documents written to one file and fsynced.

With --targets it runs, in turn on PostgreSQL, what the drain's targets name, each with its floor
measured in the same run, and prints one table: the measure, its seconds, its floor's seconds,
the ratio, the target and whether it is met, with the machine's cores and load average at the
start and the end. The capture mix (--seconds, --rounds) comes first, with no Spark running; then
one backlog of EVENTS events on ROWS rows (default 100000), drained by a cold `publisher poll`
process, by the warm session, and by it again with change tables and messages on (the backlog set
back to new in between); the reference and latency phases run at their smallest. Last,
`snapshot --direct` of a table of ROWS rows (default 1000000) on the same session.
"""

BENCH_EPILOG = """\
reading the report:
  publisher time / floor time        how many times the database's own minimum the drain took
  publisher speed / reference speed  how many times faster than publishing one event at a time
  stage ...                          where the drain spent its time (the stages of a cycle)
  messages to Kafka / files only     with --broker: the drain sending its messages to the broker,
                                     against the same backlog drained with the messages in files only,
                                     the two in turn, the order alternating; wall time, and CPU time of
                                     the publisher's process (librdkafka's threads included, the
                                     broker's not): the median of the --repeat pairs

examples:
  publisher bench --database {filed} --rows 5000 --events 20000 --latency-cycles 10
  publisher bench --url {served_url} --query-limit 100000
  publisher bench --json > bench.json
  publisher bench --cluster --events 200000      the same drain on a standalone cluster
  publisher bench --database {filed} --formats --broker kafka://127.0.0.1:9092 --encoding avro --repeat 5
                                                 what sending the messages to Kafka costs

reading the --capture report:
  median tps    transactions per second, the median of the rounds (each round's beside it)
  slowdown      median tps without triggers / median tps with the style's triggers
  events/tx     events logged per committed transaction (0 without triggers)

  publisher bench --capture                              {mixed}, 3 rounds of 20 s
  publisher bench --capture --database {other_mixed} --rounds 5 --seconds 30 --json

reading the --snapshot report:
  logging       the snapshot command: a chunk of rows' events per transaction
  drain         the cycles that publish those events, each row read back as it is then
  total / floor (logging + drain) / the COPY of the table
  every row published   one operation per row and no new row left in the event log

  publisher bench --snapshot                             1000000 rows, query_limit 200000
  publisher bench --snapshot --rows 5000000 --json
  publisher bench --triggerless --rows 1000000   a triggerless cycle against COPY of the table

reading the --targets report (each ratio is seconds / floor seconds):
  cold `poll` process / floor       a poll process from start to exit / the floor (COPY of the new rows
                                    and one UPDATE marking them, on a vacuumed copy of the log); <= 3x
  warm drain / floor                the warm session's drain of the same backlog / the same floor; <= 3x
  change tables + messages / XDS    the backlog drained again with the formats / the drain without; <= 1.3x
  capture field, capture row        seconds per transaction with the style's triggers / without
                                    (the --capture mix); <= 1.3x field, <= 1.2x row
  snapshot --direct / (COPY + write)  the snapshot / COPY of the table plus writing its documents'
                                    bytes with fsync; <= 2x

  publisher bench --targets --rows 5000 --events 20000 --seconds 5 --rounds 1
  publisher bench --targets --json > targets.json
"""


def _epilog() -> str:
    """The examples, on the databases the registry holds."""
    drained, mixed = draining(), mixing()
    filed = [d for d in drained if d.bench_url is None] or drained
    served = [d for d in drained if d.bench_url is not None] or drained
    return BENCH_EPILOG.format(filed=filed[0].name, served_url=served[0].bench_url, mixed=mixed[0].name,
                               other_mixed=mixed[-1].name)


def _database_help() -> str:
    drained, mixed = set(names(draining())), set(names(mixing()))
    only = [f"{name} only with --capture" for name in names() if name in mixed - drained]
    only += [f"{name} only without" for name in names() if name in drained - mixed]
    return f"where the backlog lives (default: the --url's database, else {draining()[0].name}); {', '.join(only)}"


def _url_help() -> str:
    first = draining()[0]
    urls = [str(first.bench_url)] + [f"{d.bench_url} for {d.name}" for d in mixing() if d is not first]
    files = [d.name for d in draining() if d.bench_url is None]
    tail = f", or a temporary file for {' and '.join(files)}" if files else ""
    return f"SQLAlchemy URL (default: {', '.join(urls)}{tail})"


def add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench", help="generate a backlog, drain it and compare with the floor and a one-at-a-time publisher",
        description=BENCH_DESCRIPTION, epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--database", choices=names(), help=_database_help())
    bench.add_argument("--url", metavar="URL", help=_url_help())
    bench.add_argument("--capture", action="store_true",
                       help="measure what the capture triggers cost the application's transactions instead "
                       "(see above); uses only --database, --url, --seconds, --rounds and --json")
    bench.add_argument("--targets", action="store_true",
                       help="run every measurement the targets name, in turn, each with its floor, and print one "
                       "table of ratios against the targets instead (see above); on "
                       f"{' or '.join(names(copying()))}; uses --url, --rows, --events, --query-limit, --seconds, "
                       "--rounds, --master, --small-cycle-events and --json")
    bench.add_argument("--snapshot", action="store_true",
                       help="measure what a snapshot of a table of --rows rows costs instead (see above), on "
                       f"{' or '.join(names(copying()))}; uses only --url, --rows, --query-limit, --master, "
                       "--small-cycle-events and --json")
    bench.add_argument("--triggerless", action="store_true",
                       help="measure a triggerless cycle over a table of --rows rows instead: one with 1%% of "
                       "the rows changed and an idle one, against PostgreSQL's COPY of the table; uses only "
                       "--url, --rows, --master, --cluster (whose tasks then compare the buckets) and --json")
    bench.add_argument("--snapshot-logged", action="store_true",
                       help="--snapshot: measure the logged path (every row a row query-back the cycles publish) "
                       "instead of `snapshot --direct`")
    bench.add_argument("--seconds", type=positive, default=20, metavar="S",
                       help="--capture: seconds each configuration runs per round (default: 20)")
    bench.add_argument("--rounds", type=positive, default=3, metavar="N",
                       help="--capture: rounds of the three configurations; the report takes medians (default: 3)")
    bench.add_argument("--rows", type=positive, metavar="R",
                       help="rows of the usr table before the events start (default: 100000; "
                       "--snapshot: 1000000)")
    bench.add_argument("--events", type=positive, default=1_000_000, metavar="E",
                       help="events in the backlog (default: 1000000)")
    bench.add_argument("--query-limit", type=positive, default=200_000, metavar="Q",
                       help="events per drain cycle (default: 200000)")
    bench.add_argument("--transaction-events", type=positive, metavar="T",
                       help="make the backlog in transactions of about T events each (default: in 20 "
                       "transactions). A cycle cut by --query-limit inside a transaction takes the rest of it, "
                       "so T well below Q makes every cycle about Q events: drains of different backlogs then "
                       "compare cycle for cycle")
    bench.add_argument("--latency-cycles", type=positive, default=50, metavar="N",
                       help="small polls of 10 events for the latency figures (default: 50)")
    bench.add_argument("--reference-sample", type=positive, default=5_000, metavar="SAMPLE",
                       help="events the one-at-a-time reference publishes (default: 5000)")
    bench.add_argument("--master", default="local[*]", metavar="M", help="Spark master (default: local[*])")
    bench.add_argument("--cluster", action="store_true",
                       help="start a Spark standalone master and worker on 127.0.0.1 from the installed Spark's "
                       "scripts and run the drain on them (ignores --master)")
    bench.add_argument("--formats", action="store_true",
                       help="also write change tables and messages (output.change_tables, output.messages, with "
                       "trail headers); the stage table shows their cost as `changes`")
    bench.add_argument("--broker", metavar="URL",
                       help="with --formats: after the drain, time a pair of drains of the same backlog (set back "
                       "to new before each), the messages in files only and also sent to this Kafka broker "
                       "(kafka://host:port[,host:port]); the report gives their ratio, of wall and of CPU time")
    bench.add_argument("--repeat", type=positive, default=1, metavar="N",
                       help="with --broker: time N such pairs, one after the other, and report each pair's ratios "
                       "and their medians (default: 1)")
    bench.add_argument("--encoding", choices=("json", "avro"),
                       help="with --broker: what the messages are sent as (output.messages.encoding; default json)")
    bench.add_argument("--backlog", choices=("mix", "rejected", "gone"), default="mix",
                       help="mix: the events as the triggers logged them (default); rejected: each row then "
                       "rewritten to name a table that is not published, so every row is E; gone: each row "
                       "a row query-back of a key no row has, so every row is W")
    bench.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True,
                       help="first time a `publisher poll` process started cold on the whole backlog (one "
                       "cycle), from its start to its exit, as a scheduled poll runs; --no-cold skips it")
    bench.add_argument("--small-cycle-events", type=not_negative, default=None, metavar="N",
                       help="spark.small_cycle_events of the cold poll and the drain: cycles of at most N events "
                       "run in the driver alone, 0 = every cycle as Spark jobs (default: the publisher's, "
                       "1,000,000 on a local master); with --snapshot, 0 takes the key ranges as Spark tasks "
                       "instead of the driver's threads")
    bench.add_argument("--subscribers", type=not_negative, default=0, metavar="N",
                       help="also configure N subscribers of every published table, and time each one's check-out "
                       "of the whole backlog before the status mode drains it (default: 0)")
    bench.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")

