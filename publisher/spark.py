"""The SparkSession the pipeline runs on: local by default, any master by configuration."""
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


def get_spark(config: SparkConfig, app_name: str = "event-log-publisher") -> SparkSession:
    """Build (or reuse) the session; Python workers run this interpreter so they see this package."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
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
