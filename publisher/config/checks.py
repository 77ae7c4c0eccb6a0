"""The configuration's rules that its types alone cannot say: ranges, names, and what one
section asks of another (a subscription's tables and columns, a logical class's children, the
triggerless mode's settings); each complaint names the key."""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from publisher.config import (
    EVENT_LOG_COLUMNS,
    OPERATIONS,
    Config,
    ConfigError,
    OutputConfig,
    child_column,
)
from publisher.config.brokers import check_broker
from publisher.config.database import mask_url
from publisher.dialects import URL_EXAMPLES

MAX_ROW_BYTES_CEILING = 1 << 30
"""1 GiB, the longest text every supported database holds (the lowest limit: see the dialects)."""
INTEGER_CEILING = (1 << 63) - 1
"""The largest signed 64-bit integer: the most a count setting may be, as the databases' integers
(the widest integer column, a LIMIT) and Arrow's lengths hold no more."""
POLLING_INTERVAL_CEILING = 365 * 24 * 3600
"""The longest polling_interval, in seconds (365 days): a wait far longer than the platform
allows would end the run with an overflow naming no key."""


def check_config(config: Config, raw: Mapping[str, Any]) -> None:
    """Rules across keys and ranges that types alone cannot say."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(config.database.url)
    except (ArgumentError, ValueError):
        raise ConfigError(
            f"database.url: {mask_url(config.database.url)!r} is not a SQLAlchemy URL "
            f"(e.g. {URL_EXAMPLES})"
        ) from None
    p = config.publisher
    for key, number in {"publisher.query_limit": p.query_limit, "publisher.batch_size": p.batch_size}.items():
        if not 0 < number <= INTEGER_CEILING:
            raise ConfigError(
                f"{key}: expected a whole number from 1 to {INTEGER_CEILING} (the largest signed 64-bit integer), "
                f"got {number}"
            )
    if not 0 < p.polling_interval <= POLLING_INTERVAL_CEILING:
        raise ConfigError(
            f"publisher.polling_interval: expected seconds above 0, at most {POLLING_INTERVAL_CEILING} (365 days), "
            f"got {p.polling_interval}"
        )
    if not 0 < p.max_row_bytes <= MAX_ROW_BYTES_CEILING:
        raise ConfigError(
            f"publisher.max_row_bytes: expected bytes from 1 to {MAX_ROW_BYTES_CEILING} (1 GiB), "
            f"got {p.max_row_bytes}"
        )
    if p.heartbeat_interval < 0:
        raise ConfigError(f"publisher.heartbeat_interval: expected minutes >= 0, got {p.heartbeat_interval}")
    small = config.spark.small_cycle_events
    if small is not None and not 0 <= small <= INTEGER_CEILING:
        raise ConfigError(
            f"spark.small_cycle_events: expected 0 (always Spark) or more, at most {INTEGER_CEILING} (the largest "
            f"signed 64-bit integer), got {small}"
        )
    if not 0 <= config.spark.read_partitions <= INTEGER_CEILING:
        raise ConfigError(
            f"spark.read_partitions: expected 0 (automatic) or more, at most {INTEGER_CEILING} (the largest signed "
            f"64-bit integer), got {config.spark.read_partitions}"
        )
    for text in p.time_of_day:
        parse_time_of_day(text, "publisher.time_of_day")
    if p.time_of_day and "polling_interval" in raw.get("publisher", {}):
        raise ConfigError(
            "publisher.time_of_day excludes publisher.polling_interval: set one of them, not both"
        )
    for i, statement in enumerate(p.post_polling_statements):
        if not statement.strip():
            raise ConfigError(f"publisher.post_polling_statements[{i}]: empty statement")
    if not config.event_log.table.strip():
        raise ConfigError("event_log.table: expected a table name, got an empty string")
    names = config.event_log.columns.in_order()
    for role, name in zip(EVENT_LOG_COLUMNS, names, strict=True):
        if not name.strip():
            raise ConfigError(f"event_log.columns.{role}: expected a column name, got an empty string")
    lowered = [n.lower() for n in names]
    for role, name in zip(EVENT_LOG_COLUMNS, lowered, strict=True):
        if lowered.count(name) > 1:
            raise ConfigError(f"event_log.columns.{role}: {name!r} names two columns of the event log")
    if not config.output.directory.strip():
        raise ConfigError("output.directory: expected a path, got an empty string")
    _check_formats("output", config.output)
    for name, subscriber in config.subscribers.items():
        _check_formats(f"subscribers.{name}.formats", subscriber.output_config())
    if not config.spark.master.strip():
        raise ConfigError("spark.master: expected a Spark master URL such as local[*]")
    if not 0 <= config.metrics.port <= 65535:
        raise ConfigError(f"metrics.port: expected a TCP port from 1 to 65535, or 0 (off), got {config.metrics.port}")
    if not config.metrics.address.strip():
        raise ConfigError("metrics.address: expected an address to listen on, e.g. 127.0.0.1 or 0.0.0.0")
    _check_subscriptions(config)
    _check_classes(config)
    _check_triggerless(config)


def _check_formats(where: str, output: OutputConfig) -> None:
    """The change tables' and messages' settings of one output: the status mode's (`output`) or
    a subscriber's (`subscribers.NAME.formats`)."""
    changes = output.change_tables
    if changes.partition_minutes < 0 or (changes.partition_minutes and 1440 % changes.partition_minutes):
        raise ConfigError(
            f"{where}.change_tables.partition_minutes: expected 0 (off) or minutes that divide a day "
            f"(e.g. 60, 240, 1440), got {changes.partition_minutes}"
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", changes.header_prefix):
        raise ConfigError(
            f"{where}.change_tables.header_prefix: expected letters, digits and underscores, not starting "
            f"with a digit (default header__), got {changes.header_prefix!r}"
        )
    messages = output.messages
    if not messages.task.strip():
        raise ConfigError(f"{where}.messages.task: expected a task name, got an empty string")
    check_broker(where, messages)
    if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*", messages.broker_subject):
        raise ConfigError(
            f"{where}.messages.broker_subject: expected subject tokens of letters, digits, _ and - joined by dots, "
            f"got {messages.broker_subject!r}"
        )
    if not re.fullmatch(r"[A-Za-z0-9_-]+", messages.broker_stream):
        raise ConfigError(
            f"{where}.messages.broker_stream: expected a stream name of letters, digits, _ and -, got "
            f"{messages.broker_stream!r}"
        )


_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _check_subscriptions(config: Config) -> None:
    """Subscriptions name tables, columns and kinds of change; subscribers name a subscription
    and an output directory of their own."""
    for name, subscription in config.subscriptions.items():
        key = f"subscriptions.{name}"
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{key}: a subscription's name is letters, digits, _, . and -")
        if not subscription.tables:
            raise ConfigError(f"{key}.tables: expected the tables it tracks, e.g. tables = [\"usr\"]")
        lowered = [t.lower() for t in subscription.tables]
        for table in subscription.tables:
            if not table.strip() or lowered.count(table.lower()) > 1:
                raise ConfigError(f"{key}.tables: {table!r} is {'empty' if not table.strip() else 'named twice'}")
        for table, columns in subscription.columns.items():
            if table.lower() not in lowered:
                raise ConfigError(
                    f"{key}.columns.{table}: not one of the subscription's tables ({', '.join(subscription.tables)})"
                )
            if not columns or any(not c.strip() for c in columns):
                raise ConfigError(f"{key}.columns.{table}: expected column names, got {list(columns)!r}")
        unknown = [op for op in subscription.operations if op not in OPERATIONS]
        if not subscription.operations or unknown:
            raise ConfigError(
                f"{key}.operations: expected some of {', '.join(map(repr, OPERATIONS))}, "
                f"got {list(subscription.operations)!r}"
            )
    outputs = {str(Path(config.output.directory).resolve()): "output.directory"}
    subjects = {}
    if config.output.messages.broker:
        subjects[config.output.messages.broker_subject] = "output.messages.broker_subject"
    for name, subscriber in config.subscribers.items():
        key = f"subscribers.{name}"
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{key}: a subscriber's name is letters, digits, _, . and -")
        if subscriber.subscription not in config.subscriptions:
            known = ", ".join(sorted(config.subscriptions)) or "none is configured"
            raise ConfigError(
                f"{key}.subscription: expected a [subscriptions.NAME] ({known}), got {subscriber.subscription!r}"
            )
        if not subscriber.output.strip():
            raise ConfigError(f"{key}.output: expected the subscriber's own output directory")
        where = str(Path(subscriber.output).resolve())
        if where in outputs:
            raise ConfigError(f"{key}.output: {subscriber.output!r} is also {outputs[where]}; every subscriber writes "
                              "to a directory of its own")
        outputs[where] = f"{key}.output"
        messages = subscriber.formats.messages
        if messages.broker and not messages.enabled:
            raise ConfigError(f"{key}.formats.messages.broker: needs {key}.formats.messages.enabled = true")
        if messages.broker:
            if messages.broker_subject in subjects:
                raise ConfigError(
                    f"{key}.formats.messages.broker_subject: {messages.broker_subject!r} is also "
                    f"{subjects[messages.broker_subject]}; every reader sends to subjects of its own"
                )
            subjects[messages.broker_subject] = f"{key}.formats.messages.broker_subject"


def _tracked_classes(config: Config, subscription: str, classes: list[str]) -> list[str]:
    """The `classes` a subscriber's subscription tracks (all of them, for a subscription the
    configuration lacks: that is refused on its own)."""
    found = config.subscriptions.get(subscription)
    if found is None:
        return classes
    tracked = {t.lower() for t in found.tables}
    return [name for name in classes if name.lower() in tracked]


def _check_classes(config: Config) -> None:
    """A class's attributes name a child table each, a child table serves one attribute of one
    class, and a reference names a class."""
    children: dict[str, str] = {}
    with_children = [name for name, cls in config.classes.items() if cls.multi_valued]
    formats = [("output", config.output, with_children)] + [
        (f"subscribers.{n}.formats", s.output_config(), _tracked_classes(config, s.subscription, with_children))
        for n, s in config.subscribers.items()]
    for where, output, sent in formats:
        if sent and output.publishes_changes:
            raise ConfigError(
                f"{where}: change tables and messages carry a table's columns, and class {sent[0]!r} has "
                "multi-valued attributes (classes.*.multi_valued), which have none; publish it as XDS only")
    for name, cls in config.classes.items():
        key = f"classes.{name}"
        if not name.strip():
            raise ConfigError(f"{key}: expected the parent table's name")
        for attribute, spec in cls.multi_valued.items():
            where = f"{key}.multi_valued.{attribute}"
            if not attribute.strip():
                raise ConfigError(f"{where}: expected an attribute name")
            try:
                child, _ = child_column(spec)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            if child.lower() == name.lower() or child.lower() in (c.lower() for c in config.classes):
                raise ConfigError(f"{where}: {child!r} is a class of its own, not a child table")
            if child.lower() in children:
                raise ConfigError(f"{where}: child table {child!r} is also {children[child.lower()]}; "
                                  "a child table holds the values of one attribute")
            children[child.lower()] = where
        for attribute, target in cls.references.items():
            where = f"{key}.references.{attribute}"
            if not attribute.strip() or not target.strip():
                raise ConfigError(f"{where}: expected an attribute = \"class\" of another published class")


def parse_time_of_day(text: str, key: str = "time_of_day") -> dt.time:
    for fmt in ("%H:%M:%S", "%H:%M"):
        try:
            return dt.datetime.strptime(text.strip(), fmt).time()
        except ValueError:
            continue
    raise ConfigError(f"{key}: expected HH:MM or HH:MM:SS, got {text!r}")


def _check_triggerless(config: Config) -> None:
    """What a triggerless publisher needs, and what it cannot do: loopback is told by the
    perpetrator an event names, and a comparison of tables has none."""
    if not config.triggerless:
        return
    mode = 'publisher.publication_mode = "triggerless"'
    if not config.publisher.tables:
        raise ConfigError(f"publisher.tables: {mode} needs the tables to publish (there are no triggers to find "
                          "them by), e.g. tables = [\"usr\", \"grp\"]")
    if config.publisher.allow_loopback:
        raise ConfigError(f"publisher.allow_loopback: {mode} has no perpetrator to tell the publisher's own "
                          "changes by; set it to false")
    if config.publisher.initial_snapshot:
        raise ConfigError(f"publisher.initial_snapshot: {mode} loads the consumer by publisher.startup_option "
                          "= \"resync\"; set initial_snapshot to false")
