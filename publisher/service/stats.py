"""`publisher stats`: what waits in the event log, by status and table, and how old it is."""
from __future__ import annotations

import datetime as dt
import enum
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from publisher.config import STATUS_MODE, Config, Reader
from publisher.database import table_schema
from publisher.dialects import dialect_of
from publisher.model.events import Status
from publisher.model.operation import OperationKind
from publisher.model.values import shown
from publisher.pipeline.event_log import event_log_table
from publisher.pipeline.read import as_utc
from publisher.service.event_groups import decoded, loopback_groups, summed, utc_of
from publisher.snapshots.state import RecordedSnapshot, recorded_snapshots, rows_of_total


def backlog(config: Config, engine: Engine) -> dict[str, Any]:
    """Rows per status, new rows per table, and the oldest new row's event time and age."""
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns

    def readable(name: str) -> Any:
        """Text may hold any bytes (`Dialect.exact`): read it as bytes, so one bad value cannot
        fail the report."""
        return dialect_of(engine).exact(table.c[name])

    status, table_name = readable(names.status), readable(names.table_name)
    with engine.connect() as conn:
        per_status = {
            decoded(s): int(n)
            for s, n in conn.execute(select(status, func.count()).group_by(status).order_by(status))
        }
        new = table.c[names.status] == Status.NEW.value
        per_table = {
            decoded(t): int(n)
            for t, n in conn.execute(
                select(table_name, func.count()).where(new).group_by(table_name).order_by(table_name)
            )
        }
        oldest = conn.execute(select(func.min(readable(names.event_time))).where(new)).scalar()
    oldest_time = utc_of(oldest)
    age = _age(oldest_time)
    return {
        "event_log": config.event_log.table,
        "statuses": per_status,
        "new_by_table": per_table,
        "oldest_new_event_time": None if oldest_time is None else oldest_time.isoformat(),
        "oldest_new_age_seconds": age,
        "unpublished_tables": unpublished_tables(config, engine),
        "loopback_by_table": loopback_by_table(config, engine),
        "subscribers": {name: _subscriber(config, engine, name) for name in sorted(config.subscribers)},
        "snapshots": [_snapshot(recorded) for recorded in recorded_snapshots(config, engine)],
    }


def loopback_by_table(config: Config, engine: Engine) -> dict[str, int]:
    """The rows the status mode passed over as loopback (S, logged by its own user), by table:
    the `publisher_loopback_rows` gauge's count."""

    return summed((group.table, group.count) for group in loopback_groups(config, engine))


def triggerless_states(config: Config) -> dict[str, Any]:
    """The status mode's triggerless state, with each subscriber's under `subscribers`."""
    report = triggerless_state(config, STATUS_MODE)
    report["subscribers"] = {name: triggerless_state(config, Reader(name)) for name in sorted(config.subscribers)}
    return report


def triggerless_state(config: Config, reader: Reader) -> dict[str, Any]:
    """A triggerless publisher's state for `reader`: the generation its consumer holds, when it
    was kept, the rows of each table (and child table) in it, a read an interrupted cycle left,
    and what the last cycle published. Read from the output directory alone: the database is
    not touched."""
    from publisher.triggerless.state import ComparisonState

    state = ComparisonState(Path(reader.output(config)).resolve())
    current = state.current()
    interrupted = state.read_done()
    written = state.written_at()
    tables: dict[str, Any] = {}
    for layout in current.tables if current is not None else ():
        if not layout.parent:
            tables[layout.name] = {"rows": layout.rows, "buckets": layout.buckets, "attributes": {}}
    for layout in current.tables if current is not None else ():
        if layout.parent in tables:
            tables[layout.parent]["attributes"][layout.attribute] = {"table": layout.name, "rows": layout.rows}
    written_time = None if written is None else dt.datetime.fromtimestamp(written, dt.UTC)
    return {
        "mode": "triggerless",
        "state": str(state.root),
        "generation": None if current is None else current.number,
        "kept_at": None if written_time is None else written_time.isoformat(),
        "kept_age_seconds": _age(written_time),
        "tables": tables,
        "interrupted_read": None if interrupted is None else interrupted.number,
        "last_cycle": None if current is None else state.last_cycle(current),
    }


def format_triggerless_states(report: dict[str, Any]) -> str:
    shown = [format_triggerless_state(report)]
    for name, state in report["subscribers"].items():
        shown.append(f"subscriber {name}:\n" + format_triggerless_state(state))
    return "\n".join(shown)


def format_triggerless_state(report: dict[str, Any]) -> str:
    if report["generation"] is None:
        lines = [f"triggerless state {report['state']}: none kept yet "
                 "(the next cycle follows publisher.startup_option)"]
    else:
        lines = [f"triggerless state {report['state']}: generation {report['generation']}, kept "
                 f"{report['kept_at']} ({report['kept_age_seconds']:.0f} s ago)", "rows by table:"]
        for name, table in report["tables"].items():
            lines.append(f"  {name:<30} {table['rows']:>10}  ({table['buckets']} buckets)")
            lines += [f"    {attribute:<28} {child['rows']:>10}  ({child['table']})"
                      for attribute, child in table["attributes"].items()]
    if report["interrupted_read"] is not None:
        lines.append(f"a cycle read generation {report['interrupted_read']} and was interrupted before its "
                     "state was kept: the next cycle publishes it again, under the same event-ids")
    last = report["last_cycle"]
    if last:
        kinds = ", ".join(f"{sum(t.get(kind.value, 0) for t in last['tables'].values())} {kind.value}"
                          for kind in OperationKind)
        lines.append(f"last cycle: {last['operations']} operations ({kinds}), {last['documents']} documents, "
                     f"{last['rejected']} rejected"
                     + (", recorded only" if last.get("recorded_only") else ""))
    return "\n".join(lines)


def _snapshot(recorded: RecordedSnapshot) -> dict[str, Any]:
    return {
        "reader": recorded.reader or "status mode",
        "table": recorded.table,
        "rows_logged": recorded.rows_logged,
        "rows_total": recorded.rows_total,
        "started_at": recorded.started_at,
        "finished_at": recorded.finished_at,
    }


def _subscriber(config: Config, engine: Engine, name: str) -> dict[str, Any]:
    from publisher.pipeline.subscribers import subscriber_backlog

    found = subscriber_backlog(config, engine, name)
    oldest = utc_of(found.oldest_waiting)
    last = as_utc(found.last_check_out)
    return {
        "subscription": config.subscribers[name].subscription,
        "waiting": found.waiting,
        "oldest_waiting_event_time": None if oldest is None else oldest.isoformat(),
        "oldest_waiting_age_seconds": _age(oldest),
        "last_check_out": None if last is None else last.isoformat(),
        "check_out_under_way": found.under_way,
        "holding_back": found.holding_back,
    }


def _age(time: dt.datetime | None) -> float | None:
    return None if time is None else round((dt.datetime.now(dt.UTC) - time).total_seconds(), 1)


def format_backlog(report: dict[str, Any]) -> str:
    lines = [f"event log {report['event_log']}", "rows by status:"]
    lines += [f"  {s}  {n:>10}" for s, n in report["statuses"].items()] or ["  (empty)"]
    lines.append("new rows by table:")
    lines += [f"  {t:<30} {n:>10}" for t, n in report["new_by_table"].items()] or ["  (none)"]
    if report["unpublished_tables"]:
        lines.append("new rows of tables that are not published (a cycle marks them E):")
        lines += [f"  {shown(t):<30} {why}" for t, why in report["unpublished_tables"].items()]
    if report.get("loopback_by_table"):
        lines.append("rows passed over as loopback (S, logged by the publisher's own user; publisher.allow_loopback "
                     "publishes them):")
        lines += [f"  {shown(t):<30} {n:>10}" for t, n in report["loopback_by_table"].items()]
    if report["oldest_new_event_time"]:
        lines.append(
            f"oldest new row: {report['oldest_new_event_time']} ({report['oldest_new_age_seconds']:.0f} s ago)"
        )
    for name, subscriber in report["subscribers"].items():
        lines.append(f"subscriber {name} (subscription {subscriber['subscription']}):")
        waiting = f"  waiting {subscriber['waiting']} events"
        if subscriber["oldest_waiting_event_time"]:
            waiting += f", the oldest of {subscriber['oldest_waiting_event_time']} " \
                f"({subscriber['oldest_waiting_age_seconds']:.0f} s ago)"
        lines.append(waiting)
        under_way = " (a check-out is under way)" if subscriber["check_out_under_way"] else ""
        lines.append(f"  last check-out: {subscriber['last_check_out'] or 'never'}{under_way}")
        held = subscriber["holding_back"]
        lines.append(f"  holds back retention: {'no' if not held else f'yes, {held} rows'}")
    if report.get("snapshots"):
        lines.append("snapshots (rows logged; the cycles publish them):")
    for snapshot in report.get("snapshots", ()):
        state = "under way" if snapshot["finished_at"] is None else f"finished {snapshot['finished_at']}"
        counted = rows_of_total(snapshot["rows_logged"], snapshot["rows_total"])
        lines.append(f"  {snapshot['table']:<30} for {snapshot['reader']}: {counted}, {state}")
    return "\n".join(lines)


class Unpublished(enum.StrEnum):
    """Why a cycle would not publish a table's rows. String-valued, so the text and JSON
    outputs show the value itself."""

    NOT_CONFIGURED = "not in publisher.tables"
    NO_TRIGGERS = "has no publisher triggers"
    MISSING = "does not exist"
    CHILD_TABLE = "a logical class's child table: its triggers log its rows against the parent"
    CAPTURE_MOVED = "renamed? its capture triggers are on another table, which `install --check` names"


def unpublished_tables(config: Config, engine: Engine) -> dict[str, Unpublished]:
    """The tables that new (`N`) rows of the event log name and a cycle would not publish (it
    marks their rows E), each with why: not in `publisher.tables`, or, with that list empty,
    without this project's triggers, or not in the database at all. Names match as a cycle
    resolves them: exactly, else ignoring case. A logical class's child tables are no class of
    their own: their rows are logged against the parent."""
    from publisher.capture.install import moved_captures, published_tables
    from publisher.dialects.reflection import reflection
    from publisher.model.logical import child_tables

    published = published_tables(config, engine)
    exact = set(published.names)
    lowered = {name.lower() for name in published.names}
    why = Unpublished.NOT_CONFIGURED if published.configured else Unpublished.NO_TRIGGERS
    table = event_log_table(config, table_schema(config, engine))
    names = config.event_log.columns
    column = dialect_of(engine).exact(table.c[names.table_name])
    with engine.connect() as conn:
        found = conn.execute(
            select(column).where(table.c[names.status] == Status.NEW.value).group_by(column).order_by(column)
        ).scalars()
        named = [decoded(raw) for raw in found if raw is not None]
    children = child_tables(config.classes)
    unpublished = [name for name in named if name not in exact and name.lower() not in lowered]
    moved = {name.lower() for name in moved_captures(config, engine)} if unpublished else set()
    existing: set[str] = set()
    if unpublished:
        schema = table_schema(config, engine)
        inspector = reflection(engine, schema)
        existing = {name.lower() for name in (*inspector.get_table_names(schema=schema),
                                              *inspector.get_view_names(schema=schema))}
    return {
        name: Unpublished.CHILD_TABLE if name.lower() in children
        else Unpublished.CAPTURE_MOVED if name.lower() in moved
        else Unpublished.MISSING if name.lower() not in existing else why
        for name in unpublished
    }


def said_unpublished(found: dict[str, Unpublished]) -> str:
    """The warning of the tables a cycle would not publish, each name quoted (a table's name
    may hold any text, `; ` too), one per line where there are several."""
    if len(found) == 1:
        ((name, why),) = found.items()
        return f"new rows of the event log name table {shown(name)}, which is not published ({why}): a cycle " \
            "marks them E"
    listed = "".join(f"\n  {shown(name)}: {why}" for name, why in found.items())
    return f"new rows of the event log name {len(found)} tables that are not published; a cycle marks them E:{listed}"
