"""What the publisher's log lines look like: text for people, or JSON lines for log collectors."""
from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, message, and the fields a record carries
    (a cycle's summary), for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "message": getattr(record, "brief", None) or record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(log_format: str) -> None:
    """Log INFO and above on stderr, as text (`"text"`) or one JSON object per line (`"json"`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if log_format == "json":
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:
                handler.setFormatter(JsonLogFormatter())
