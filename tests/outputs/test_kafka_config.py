"""The Kafka settings of `[output.messages]`: each bad value is refused at start naming its key,
and the SASL credentials come from the environment and are never printed."""
from __future__ import annotations

import pytest

from publisher.config import ConfigError
from publisher.config.loading import load_config
from publisher.outputs.messages.kafka import client_settings

KAFKA = ["output.messages.enabled=true", "output.messages.broker='kafka://127.0.0.1:9092'"]


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (["output.messages.broker='kafka://127.0.0.1'"], "output.messages.broker: expected nats://host:port (or "
                                                         "tls://host:port) or kafka://host:port[,host:port], got "),
        (["output.messages.broker='kafka://a:9092,b'"], "output.messages.broker: expected "),
        (["output.messages.broker='kafka://a:9092/x'"], "output.messages.broker: expected "),
        (["output.messages.encoding='xml'"], "output.messages.encoding"),
        (["output.messages.kafka_client_id='a b'"], "output.messages.kafka_client_id: expected letters, digits"),
        (["output.messages.kafka_security_protocol='tls'"], "output.messages.kafka_security_protocol"),
        (["output.messages.kafka_security_protocol='sasl_ssl'"],
         "output.messages.kafka_sasl_mechanism: security protocol sasl_ssl needs one of PLAIN, SCRAM-SHA-256, "
         "SCRAM-SHA-512, got ''"),
        (["output.messages.kafka_security_protocol='sasl_ssl'", "output.messages.kafka_sasl_mechanism='PLAIN'"],
         "output.messages: security protocol sasl_ssl needs a SASL user and password; set "
         "PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_USERNAME and PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_PASSWORD"),
        (["output.messages.kafka_sasl_mechanism='PLAIN'"],
         "output.messages.kafka_sasl_*: SASL settings are given, but kafka_security_protocol is 'plaintext'"),
        (["output.messages.kafka_partitions=0"], "output.messages.kafka_partitions: expected 1 or more, got 0"),
        (["output.messages.kafka_replication=-1"], "output.messages.kafka_replication: expected 1 or more, got -1"),
        (["output.messages.kafka_timeout=0"], "output.messages.kafka_timeout: expected seconds above 0, at most 3600"),
        (["output.messages.kafka_timeout=7200"], "output.messages.kafka_timeout: expected seconds above 0"),
        (["output.messages.kafka_max_message_bytes=10"],
         "output.messages.kafka_max_message_bytes: expected 1000 to 1000000000 bytes (librdkafka's message.max.bytes), "
         "got 10"),
    ],
)
def test_bad_kafka_settings_are_refused_naming_the_key(settings, complaint):
    with pytest.raises(ConfigError) as refused:
        load_config(environ={}, overrides=[*KAFKA, *settings])
    assert str(refused.value).startswith(complaint)


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (["output.messages.encoding='avro'"], "output.messages.encoding: 'avro' is for a kafka:// broker"),
        (["output.messages.transactional=true"], "output.messages.transactional: needs a kafka:// broker"),
    ],
)
def test_kafka_only_settings_are_refused_without_a_kafka_broker(settings, complaint):
    for broker in ("output.messages.broker='nats://127.0.0.1:4222'", "output.messages.broker=''"):
        with pytest.raises(ConfigError) as refused:
            load_config(environ={}, overrides=["output.messages.enabled=true", broker, *settings])
        assert str(refused.value).startswith(complaint)


def test_a_kafka_broker_needs_the_messages_switched_on():
    with pytest.raises(ConfigError, match="output.messages.broker: sends the messages, so it needs"):
        load_config(environ={}, overrides=["output.messages.broker='kafka://127.0.0.1:9092'"])


def test_sasl_credentials_come_from_the_environment_and_are_never_printed():
    environ = {"PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_USERNAME": "svc-user",
               "PUBLISHER_OUTPUT_MESSAGES_KAFKA_SASL_PASSWORD": "pa55-w0rd"}
    config = load_config(environ=environ, overrides=[
        "output.messages.enabled=true", "output.messages.broker='kafka://k1:9092,k2:9093'",
        "output.messages.kafka_security_protocol='sasl_ssl'", "output.messages.kafka_sasl_mechanism='SCRAM-SHA-512'",
        "output.messages.encoding='avro'", "output.messages.kafka_client_id='pub.1'"])
    settings = client_settings(config.output.messages)
    assert settings["bootstrap.servers"] == "k1:9092,k2:9093"
    assert (settings["sasl.username"], settings["sasl.password"]) == ("svc-user", "pa55-w0rd")
    assert (settings["security.protocol"], settings["sasl.mechanism"], settings["client.id"]) == (
        "sasl_ssl", "SCRAM-SHA-512", "pub.1")
    assert "pa55-w0rd" not in repr(config) and "svc-user" not in repr(config)


def test_a_subscriber_sends_to_kafka_topics_of_its_own(tmp_path):
    path = tmp_path / "publisher.toml"
    broker = 'enabled = true\nbroker = "kafka://127.0.0.1:9092"\n'
    body = (f'[output.messages]\n{broker}[subscriptions.hr]\ntables = ["usr"]\n[subscribers.v]\n'
            f'subscription = "hr"\noutput = "x"\n[subscribers.v.formats.messages]\n{broker}')
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"subscribers.v.formats.messages.broker_subject: 'publisher' is also "):
        load_config(path, environ={})
    path.write_text(body + 'broker_subject = "hr"\nencoding = "avro"\n', encoding="utf-8")
    assert load_config(path, environ={}).subscribers["v"].formats.messages.encoding == "avro"
