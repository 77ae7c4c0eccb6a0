"""The checks of `[output.messages]`'s broker settings (and a subscriber's): which broker the
URL names, and for Kafka its client settings, each complaint naming the key."""
from __future__ import annotations

import re

from publisher.config import ConfigError, MessagesConfig
from publisher.config.database import mask_url

NATS_URL = re.compile(r"(nats|tls)://[^/\s]+$")
KAFKA_URL = re.compile(r"kafka://([^/\s,:]+:\d{1,5})(,[^/\s,:]+:\d{1,5})*$")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_MESSAGE_BYTES = (1000, 1_000_000_000)
"""librdkafka's bounds of message.max.bytes."""
KAFKA_TIMEOUT_CEILING = 3600.0


def is_kafka(broker: str) -> bool:
    return broker.startswith("kafka://")


def kafka_servers(broker: str) -> str:
    """The bootstrap.servers of a kafka:// URL."""
    return broker.removeprefix("kafka://")


def check_broker(where: str, messages: MessagesConfig) -> None:
    """The broker URL and what goes with it; Kafka's own settings only matter with a Kafka
    broker, but are checked whenever they are set otherwise than by default."""
    key = f"{where}.messages"
    broker = messages.broker
    if broker and not (NATS_URL.match(broker) or KAFKA_URL.match(broker)):
        raise ConfigError(
            f"{key}.broker: expected nats://host:port (or tls://host:port) or kafka://host:port[,host:port], got "
            f"{mask_url(broker)!r}"
        )
    if broker and not messages.enabled:
        raise ConfigError(f"{key}.broker: sends the messages, so it needs {key}.enabled = true")
    kafka = is_kafka(broker)
    if messages.encoding != "json" and not kafka:
        raise ConfigError(f"{key}.encoding: {messages.encoding!r} is for a kafka:// broker; the files and NATS "
                          f"get JSON (set {key}.broker = \"kafka://host:port\" or encoding = \"json\")")
    if messages.transactional and not kafka:
        raise ConfigError(f"{key}.transactional: needs a kafka:// broker")
    _check_kafka(key, messages)


def _check_kafka(key: str, messages: MessagesConfig) -> None:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", messages.kafka_client_id):
        raise ConfigError(f"{key}.kafka_client_id: expected letters, digits, '.', '_' and '-', got "
                          f"{messages.kafka_client_id!r}")
    sasl = messages.kafka_security_protocol.startswith("sasl_")
    if sasl and messages.kafka_sasl_mechanism not in SASL_MECHANISMS:
        raise ConfigError(f"{key}.kafka_sasl_mechanism: security protocol {messages.kafka_security_protocol} "
                          f"needs one of {', '.join(SASL_MECHANISMS)}, got {messages.kafka_sasl_mechanism!r}")
    if sasl and not (messages.kafka_sasl_username and messages.kafka_sasl_password):
        raise ConfigError(
            f"{key}: security protocol {messages.kafka_security_protocol} needs a SASL user and password; set "
            "PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_USERNAME and PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_PASSWORD "
            "(a subscriber's: PUBLISHER_SUBSCRIBERS_<NAME>_FORMATS_MESSAGES_KAFKA_SASL_...)")
    if not sasl and (messages.kafka_sasl_mechanism or messages.kafka_sasl_username or messages.kafka_sasl_password):
        raise ConfigError(f"{key}.kafka_sasl_*: SASL settings are given, but kafka_security_protocol is "
                          f"{messages.kafka_security_protocol!r} (sasl_plaintext or sasl_ssl uses them)")
    for name in ("kafka_partitions", "kafka_replication"):
        value = getattr(messages, name)
        if not 1 <= value <= 1_000_000:
            raise ConfigError(f"{key}.{name}: expected 1 or more, got {value}")
    if not 0 < messages.kafka_timeout <= KAFKA_TIMEOUT_CEILING:
        raise ConfigError(f"{key}.kafka_timeout: expected seconds above 0, at most {KAFKA_TIMEOUT_CEILING:.0f}, "
                          f"got {messages.kafka_timeout}")
    low, high = MAX_MESSAGE_BYTES
    if not low <= messages.kafka_max_message_bytes <= high:
        raise ConfigError(f"{key}.kafka_max_message_bytes: expected {low} to {high} bytes (librdkafka's "
                          f"message.max.bytes), got {messages.kafka_max_message_bytes}")
