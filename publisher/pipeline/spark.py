"""The SparkSession the pipeline runs on: local by default, any master by configuration, or a
Spark Connect server (`sc://host:port`)."""
from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from publisher.config import SparkConfig

_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
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
    if config.master.startswith("local"):
        settings.setdefault("spark.sql.shuffle.partitions", "4")
    settings.update(config.conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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
