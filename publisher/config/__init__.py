"""One typed configuration tree, frozen. `loading` builds it from the TOML file, then PUBLISHER_*
environment variables, then CLI --set, and checks every value before any connection opens.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from publisher.config.database import DatabaseConfig

EVENT_LOG_COLUMNS = (
    "record_id",
    "status",
    "event_type",
    "event_time",
    "perpetrator",
    "table_name",
    "table_key",
    "column_name",
    "old_value",
    "new_value",
)
"""The fixed order of the event log's columns; their names are configurable."""


class InsertRowOperation(enum.StrEnum):
    """What an insert's row query-back (type 5) publishes."""

    MODIFY = "modify"
    """The vendor's <modify> that removes every value and adds the row's own: creates an object
    the consumer lacks and replaces one it holds."""
    ADD = "add"
    """An <add> of the current row, which a consumer refuses for an object it holds."""


class PublicationMode(enum.StrEnum):
    """Where a cycle finds the changes it publishes."""

    TRIGGERED = "triggered"
    """In the event log the triggers write."""
    TRIGGERLESS = "triggerless"
    """By comparing the published tables with the state the previous cycle kept (no triggers,
    no event log: docs: guides/triggerless.md)."""


class RetiredColumns(enum.StrEnum):
    """What the consumer is told of the values of a column a migration dropped or renamed away."""

    KEEP = "keep"
    """Nothing, as the vendor connector: they stay downstream, and `verify` counts them apart."""
    REMOVE = "remove"
    """Each object of the table gets <remove-all-values/> of the retired attribute, published
    with the rows the migration's resync publishes again."""


class StartupOption(enum.StrEnum):
    """What a triggerless publisher's first cycle (no state kept yet) publishes."""

    RESYNC = "resync"
    """Every current row, as an <add>."""
    FUTURE = "future"
    """Nothing: it records the tables, and later cycles publish what changes after."""


class ConfigError(ValueError):
    """A configuration that cannot work; the message names the key and what it expects."""


@dataclass(frozen=True)
class EventLogColumns:
    record_id: str = "record_id"
    """Its column's name. The row's number, handed out in logging order; the order events are published in."""
    status: str = "status"
    """Its column's name. N new, S done, W object gone, E rejected, F reserved; others a site's own."""
    event_type: str = "event_type"
    """Its column's name. 1-8: what the change was and whether its value is logged or read back."""
    event_time: str = "event_time"
    """Its column's name. When the change was logged; the order of future-event processing."""
    perpetrator: str = "perpetrator"
    """Its column's name. The database user who made the change; the publisher's own user's rows are loopback."""
    table_name: str = "table_name"
    """Its column's name. The published table (or logical class) the change is of."""
    table_key: str = "table_key"
    """Its column's name. The changed row's primary key, as `col=value` pairs in the table_key grammar."""
    column_name: str = "column_name"
    """Its column's name. The column a per-field event (types 1-3, 7, 8) changed."""
    old_value: str = "old_value"
    """Its column's name. The column's text before the change (type 2)."""
    new_value: str = "new_value"
    """Its column's name. The column's text after the change (types 1-3)."""
    transaction_id: str = "transaction_id"
    """The optional eleventh column: the transaction that logged the row, where the database
    can tell. An event log without it is read as if every value were NULL."""

    def in_order(self) -> tuple[str, ...]:
        """The ten fixed columns, in their order."""
        return tuple(getattr(self, name) for name in EVENT_LOG_COLUMNS)


@dataclass(frozen=True)
class EventLogConfig:
    table: str = "event_log"
    """The event log table the triggers write and the publisher reads."""
    columns: EventLogColumns = field(default_factory=EventLogColumns)


@dataclass(frozen=True)
class PublisherSettings:
    polling_interval: float = 10.0
    """Seconds of idle time between cycles."""
    time_of_day: tuple[str, ...] = ()
    """Fixed times of day (HH:MM[:SS], local time) instead of an interval; excludes polling_interval."""
    query_limit: int = 10000
    """New rows a cycle takes at most, moved on to the end of a transaction it cuts."""
    batch_size: int = 128
    """Operations per XDS document."""
    max_row_bytes: int = 64 << 20
    """An event log row whose text is longer is rejected (E) unread, instead of being parsed; at most 1 GiB."""
    allow_loopback: bool = False
    """Publish the publisher's own user's changes too, instead of passing them over as loopback (S)."""
    future_events: bool = False
    """Take rows in event_time order, each only once its event_time has come."""
    delete_processed_rows: bool = False
    """Delete S and W rows once processed, instead of keeping them marked; E rows stay."""
    post_polling_statements: tuple[str, ...] = ()
    """SQL run in the transaction that writes a cycle's statuses."""
    heartbeat_interval: float = 0.0
    """Minutes of idleness after which a heartbeat document is published; 0 = off."""
    insert_row_operation: InsertRowOperation = InsertRowOperation.MODIFY
    """What a type-5 event publishes: the vendor's <modify>, or an <add> of the current row."""
    tables: tuple[str, ...] = ()
    """Tables and views that may be published (query-back touches nothing else); empty: the
    tables that carry this project's triggers."""
    when_locked: Literal["wait", "exit"] = "wait"
    """What a second publisher on the same event log does: wait for the first, or exit."""
    status_mode: bool = True
    """The status mode publishes this event log (poll/run without --subscriber): purge keeps
    every row it has not processed. false: only subscribers read it."""
    publication_mode: PublicationMode = PublicationMode.TRIGGERED
    """Where the changes come from: the triggers' event log, or a comparison of the tables."""
    startup_option: StartupOption = StartupOption.RESYNC
    """Triggerless: what the first cycle publishes, every row (resync) or nothing (future)."""
    retired_columns: RetiredColumns = RetiredColumns.KEEP
    """After a migration that drops or renames a published column: keep its values downstream,
    or remove them from every object (docs: guides/migrations.md)."""
    initial_snapshot: bool = False
    """`run` first snapshots every published table for a reader whose output holds no document
    yet and that has had no snapshot (an initial load), as `publisher snapshot` would."""


@dataclass(frozen=True)
class ChangeTablesConfig:
    """A Parquet change table per published table, under <directory>/changes/<table>/."""

    enabled: bool = False
    """Write the change tables."""
    header_prefix: str = "header__"
    """Prefix of the header columns, so they never collide with the table's own columns."""
    partition_minutes: int = 0
    """Change-table partitioning by time: each row names the period of this many minutes its
    change falls in (partition_name, e.g. 20170313T123000_20170313T170000); 0 = off."""
    trail_header: bool = False
    """Add the trail-style record header columns (HdrInd, IOType, TransInd, ...) after the others."""


@dataclass(frozen=True)
class MessagesConfig:
    """JSON lines under <directory>/messages/: a metadata message per table version, a data
    message per change."""

    enabled: bool = False
    """Write the messages."""
    server: str = ""
    """lineage.server of the metadata messages; empty: this machine's host name."""
    task: str = "publisher"
    """lineage.task of the metadata messages."""
    external_schema_id: bool = False
    """Put the table version's schemaId into every data message's headers."""
    trail_header: bool = False
    """Give every data message the trail-style record header (trailHeader)."""
    broker: str = ""
    """Also send every message, before the cycle acknowledges, to this NATS server's JetStream
    (nats://host:4222) or these Kafka brokers (kafka://host:9092[,host:9092]); empty: files only."""
    broker_subject: str = "publisher"
    """Subject (Kafka: topic) prefix: <prefix>.metadata.<schema>.<table> and <prefix>.data.<schema>.<table>."""
    broker_stream: str = "PUBLISHER"
    """The JetStream stream that stores them; created for <prefix>.> when missing."""
    encoding: Literal["json", "avro"] = "json"
    """What a Kafka broker gets as a data message's value: the JSON line, or Avro single-object
    encoding of the table version's dataSchema (the metadata message stays JSON)."""
    kafka_client_id: str = "publisher"
    """Kafka: the client.id the brokers see in their logs and quotas."""
    kafka_security_protocol: Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"] = "plaintext"
    """Kafka: security.protocol."""
    kafka_sasl_mechanism: str = ""
    """Kafka: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, for the sasl_ protocols."""
    kafka_sasl_username: str = field(default="", repr=False)
    """Kafka: the SASL user, best set by PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_USERNAME; never printed."""
    kafka_sasl_password: str = field(default="", repr=False)
    """Kafka: the SASL password, best set by PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_PASSWORD; never printed."""
    kafka_partitions: int = 1
    """Kafka: partitions of a topic the publisher creates (an existing topic keeps its own)."""
    kafka_replication: int = 1
    """Kafka: replication factor of a topic the publisher creates."""
    kafka_timeout: float = 30.0
    """Kafka: seconds a cycle waits for the brokers to take its messages (and to answer at all)
    before it fails, nothing acknowledged."""
    kafka_max_message_bytes: int = 1_000_000
    """Kafka: the producer's message.max.bytes; a message over it, or over its topic's
    max.message.bytes, fails the cycle before anything is sent."""
    transactional: bool = False
    """Kafka: send a cycle's messages in one transaction, visible to read_committed consumers
    all at once or not at all."""


@dataclass(frozen=True)
class OutputConfig:
    directory: str = "out"
    """Where the documents, rejects.jsonl and the formats' files go."""
    change_tables: ChangeTablesConfig = field(default_factory=ChangeTablesConfig)
    messages: MessagesConfig = field(default_factory=MessagesConfig)

    @property
    def publishes_changes(self) -> bool:
        """True when a format beside XDS needs the cycle's changes."""
        return self.change_tables.enabled or self.messages.enabled


LOCAL_DRIVER_EVENTS = 1_000_000
"""Measured on 2 cores (docs: performance.md): a cold poll of 1M events in the driver alone took
half the time of the same cycle as Spark jobs on `local[*]`, and 1.4 GiB at its peak; above it,
Spark's jobs keep memory flat where the driver's would grow with the cycle."""
CLUSTER_DRIVER_EVENTS = 20_000


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    """Any Spark master URL: local[N], spark://host:7077, or sc://host:port for Spark Connect."""
    read_partitions: int = 0
    """Partitions of the event log read; 0 = Spark's default parallelism."""
    small_cycle_events: int | None = None
    """A cycle of at most this many events runs in the driver alone, without a Spark job (same
    rules); 0 = every cycle runs on Spark; unset: 1,000,000 on a local master, 20,000 elsewhere."""
    conf: Mapping[str, str] = field(default_factory=dict)
    """Extra Spark settings, e.g. {"spark.driver.memory" = "4g"}."""

    @property
    def local(self) -> bool:
        """Whether Spark runs on the driver's machine (a local master), its executors sharing the
        driver's cores."""
        return self.master.startswith("local")

    @property
    def on_tasks(self) -> bool:
        """Whether work that parallel threads of the driver can do goes to Spark's tasks all the
        same (`small_cycle_events = 0`, or a cluster): a direct snapshot's key ranges."""
        return not self.local or self.small_cycle_events == 0

    @property
    def driver_events(self) -> int:
        """The largest cycle the driver takes alone: `small_cycle_events` where it is set; else,
        on a local master, LOCAL_DRIVER_EVENTS (its executors share the driver's cores, and the
        rows' trip to the JVM and back costs more than their parallelism gives), and on a cluster
        or Spark Connect, CLUSTER_DRIVER_EVENTS (a Spark job's fixed cost dominates below it)."""
        if self.small_cycle_events is not None:
            return self.small_cycle_events
        return LOCAL_DRIVER_EVENTS if self.local else CLUSTER_DRIVER_EVENTS


OPERATIONS = ("insert", "update", "delete", "change")
"""What a subscription may track (seed 002's RDB$INSERT, RDB$UPDATE, RDB$DELETE, RDB$CHANGE)."""


@dataclass(frozen=True)
class SubscriptionConfig:
    """What a subscription tracks: which tables, which of their columns, which kinds of change."""

    tables: tuple[str, ...] = ()
    """The published tables it tracks."""
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per table, the columns tracked (the key columns always are); a table not named: all."""
    operations: tuple[str, ...] = ("change",)
    """insert, update, delete, or change (any of them)."""


@dataclass(frozen=True)
class SubscriberFormats:
    change_tables: ChangeTablesConfig = field(default_factory=ChangeTablesConfig)
    messages: MessagesConfig = field(default_factory=MessagesConfig)


@dataclass(frozen=True)
class SubscriberConfig:
    """Who reads a subscription, and where its documents, rejects and formats go."""

    subscription: str = ""
    """The [subscriptions.NAME] it reads."""
    output: str = ""
    """Its own output directory: documents, rejects.jsonl, formats."""
    formats: SubscriberFormats = field(default_factory=SubscriberFormats)

    def output_config(self) -> OutputConfig:
        return OutputConfig(self.output, self.formats.change_tables, self.formats.messages)


@dataclass(frozen=True)
class ClassConfig:
    """A logical database class (docs: concepts/logical-classes.md): the parent table or view the class
    is named after, plus child tables whose rows are the values of multi-valued attributes."""

    multi_valued: Mapping[str, str] = field(default_factory=dict)
    """Attribute → "child_table.value_column"; the child's other key columns hold the parent's key."""
    references: Mapping[str, str] = field(default_factory=dict)
    """Attribute (a parent column or a multi-valued attribute) → the published class whose keys
    its values are: published as association-refs."""


@dataclass(frozen=True)
class MetricsConfig:
    """Prometheus metrics served over HTTP by `publisher run` (docs: guides/metrics.md)."""

    port: int = 0
    """The port of http://ADDRESS:PORT/metrics; 0 = no metrics served."""
    address: str = "127.0.0.1"
    """The address to listen on; "0.0.0.0" for every interface (the metrics name tables and users)."""


@dataclass(frozen=True)
class Config:
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    event_log: EventLogConfig = field(default_factory=EventLogConfig)
    publisher: PublisherSettings = field(default_factory=PublisherSettings)
    output: OutputConfig = field(default_factory=OutputConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    subscriptions: Mapping[str, SubscriptionConfig] = field(default_factory=dict)
    subscribers: Mapping[str, SubscriberConfig] = field(default_factory=dict)
    classes: Mapping[str, ClassConfig] = field(default_factory=dict)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    @property
    def triggerless(self) -> bool:
        return self.publisher.publication_mode == PublicationMode.TRIGGERLESS

    def subscriber(self, name: str) -> SubscriberConfig:
        """The [subscribers.NAME] a command names."""
        found = self.subscribers.get(name)
        if found is None:
            known = ", ".join(sorted(self.subscribers)) or "none is configured"
            raise ConfigError(f"--subscriber {name}: no [subscribers.{name}] in the configuration ({known})")
        return found


@dataclass(frozen=True)
class Reader:
    """Who a cycle publishes the event log for: the status mode, which marks each row's status,
    or one subscriber, which checks windows of the log out and in whatever the statuses."""

    subscriber: str | None = None

    @property
    def is_status_mode(self) -> bool:
        return self.subscriber is None

    @property
    def key(self) -> str:
        """How state tables name the reader: the subscriber's name, "" for the status mode."""
        return self.subscriber or ""

    def output(self, config: Config) -> str:
        """The directory its documents, rejects and formats go to (a subscriber must exist)."""
        return config.output.directory if self.subscriber is None else config.subscriber(self.subscriber).output

    def __str__(self) -> str:
        return "the status mode" if self.subscriber is None else f"subscriber {self.subscriber}"


STATUS_MODE = Reader()


def child_column(spec: str) -> tuple[str, str]:
    """(child table, value column) of a multi_valued entry "child_table.value_column"; the last
    dot separates them."""
    table, dot, column = spec.rpartition(".")
    if not dot or not table.strip() or not column.strip():
        raise ValueError(f"expected \"child_table.value_column\", got {spec!r}")
    return table, column
