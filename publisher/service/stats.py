"""`publisher stats`: what waits in the event log, by status and table, and how old it is."""
from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine, LargeBinary, cast, func, select

from publisher.config import Config
from publisher.database import is_sqlite, table_schema
from publisher.model.events import Status
from publisher.pipeline.read import as_utc
from publisher.pipeline.window import event_log_table


def backlog(config: Config, engine: Engine) -> dict[str, Any]:
    """Rows per status, new rows per table, and the oldest new row's event time and age."""
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns

    def readable(name: str) -> Any:
        """SQLite text may hold any bytes: read it as bytes, so one bad value cannot fail the report."""
        return cast(table.c[name], LargeBinary) if is_sqlite(engine) else table.c[name]

    status, table_name = readable(names.status), readable(names.table_name)
    with engine.connect() as conn:
        per_status = {
            _decoded(s): int(n)
            for s, n in conn.execute(select(status, func.count()).group_by(status).order_by(status))
        }
        new = table.c[names.status] == Status.NEW.value
        per_table = {
            _decoded(t): int(n)
            for t, n in conn.execute(
                select(table_name, func.count()).where(new).group_by(table_name).order_by(table_name)
            )
        }
        oldest = conn.execute(select(func.min(readable(names.event_time))).where(new)).scalar()
    if isinstance(oldest, (bytes, bytearray, memoryview)):
        oldest = _decoded(oldest)
    oldest_time = as_utc(oldest)
    age = None if oldest_time is None else (dt.datetime.now(dt.UTC) - oldest_time).total_seconds()
    return {
        "event_log": config.event_log.table,
        "statuses": per_status,
        "new_by_table": per_table,
        "oldest_new_event_time": None if oldest_time is None else oldest_time.isoformat(),
        "oldest_new_age_seconds": None if age is None else round(age, 1),
    }


def _decoded(value: Any) -> str:
    """Bytes that are not UTF-8 are shown escaped."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def format_backlog(report: dict[str, Any]) -> str:
    lines = [f"event log {report['event_log']}", "rows by status:"]
    lines += [f"  {s}  {n:>10}" for s, n in report["statuses"].items()] or ["  (empty)"]
    lines.append("new rows by table:")
    lines += [f"  {t:<30} {n:>10}" for t, n in report["new_by_table"].items()] or ["  (none)"]
    if report["oldest_new_event_time"]:
        lines.append(
            f"oldest new row: {report['oldest_new_event_time']} ({report['oldest_new_age_seconds']:.0f} s ago)"
        )
    return "\n".join(lines)
