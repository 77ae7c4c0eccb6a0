"""The SparkSession the pipeline runs on: local by default, any master by configuration, or a
Spark Connect server (`sc://host:port`)."""
from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import IO

from pyspark.sql import SparkSession

from publisher.config import SparkConfig

LOG4J_PROPERTIES = Path(__file__).with_name("log4j2.properties")
"""The driver JVM's logging: errors only (log4j's start-up notes and warnings are not for users)."""
_LOG4J_OPTION = f"-Dlog4j2.configurationFile={LOG4J_PROPERTIES.as_uri()}"
JVM_CHATTER = (
    "WARNING: Using incubator modules:",
    "Using Spark's default log4j profile:",
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel(",
)
"""Lines the driver JVM writes to stderr at start that no log configuration reaches: the JVM's
own note on the `--add-modules=jdk.incubator.vector` the Spark launcher always passes, and
Spark's notes for when a log configuration is not found. Dropped; every other line is passed on."""

_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC {_LOG4J_OPTION}",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}
CONNECT_PREFIX = "sc://"


def get_spark(config: SparkConfig, app_name: str = "event-log-publisher") -> SparkSession:
    """Build (or reuse) the session; Python workers run this interpreter so they see this package."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if config.master.startswith(CONNECT_PREFIX):
        return _connect(config, app_name)
    builder = SparkSession.builder.master(config.master).appName(app_name)
    settings = dict(_DEFAULTS)
    if config.local:
        settings.setdefault("spark.sql.shuffle.partitions", "4")
    settings.update(config.conf)
    driver_options = settings["spark.driver.extraJavaOptions"]
    if "log4j2.configurationFile" not in driver_options:
        settings["spark.driver.extraJavaOptions"] = f"{driver_options} {_LOG4J_OPTION}".strip()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    _launch_jvm(config.master, app_name, settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _launch_jvm(master: str, app_name: str, settings: dict[str, str]) -> None:
    """Start the driver JVM as pyspark would (the same spark-submit command and settings), but
    with its stderr through a filter that drops `JVM_CHATTER`; nothing when it runs already."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf().setMaster(master).setAppName(app_name)
        for key, value in settings.items():
            conf.set(key, value)
        read, write = os.pipe()
        threading.Thread(target=_pass_on, args=(os.fdopen(read, "rb"),), name="spark-stderr", daemon=True).start()
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": write})
        finally:
            os.close(write)
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


def _pass_on(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to ours line by line, without its start-up chatter. The pipe is
    read to its end whatever happens to our stderr (closed, or a reader that went away): a
    JVM whose stderr fills up stops at its next write."""
    chatter = tuple(c.encode() for c in JVM_CHATTER)
    writable = True
    for line in iter(stream.readline, b""):
        if writable and not line.lstrip().startswith(chatter):
            try:
                os.write(2, line)
            except OSError:
                writable = False


def _connect(config: SparkConfig, app_name: str) -> SparkSession:
    """A session on a Spark Connect server. A client may set only runtime SQL settings: the server
    fixed the rest when it started, and warns about (and ignores) any other key in `config.conf`."""
    builder = SparkSession.builder.remote(config.master).appName(app_name)
    settings = {k: v for k, v in _DEFAULTS.items() if k.startswith("spark.sql.")}
    settings.update(config.conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def is_connect(session: SparkSession) -> bool:
    """True for a Spark Connect session, which has no SparkContext (no accumulators, no default
    parallelism). Its class comes from a module that needs the Connect client's packages, so it
    is looked up only if something imported it: no Connect session exists otherwise."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    return connect is not None and isinstance(session, connect.SparkSession)
