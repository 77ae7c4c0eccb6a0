"""The commands an operator looks with: the event log's backlog and metrics (`stats`), and the
consumer compared with the tables (`verify`, which may repair what differs)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from publisher.cli.errors import UnavailableError, UsageError
from publisher.config import Config, Reader


def prometheus_command(config: Config) -> int:
    from publisher.database import connect
    from publisher.service.metrics import exposition

    print(exposition(config, connect(config)), end="")
    return 0


def stats_command(config: Config, as_json: bool) -> int:
    from publisher.database import connect
    from publisher.service.stats import backlog, format_backlog, format_triggerless_states, triggerless_states

    if config.triggerless:
        state = triggerless_states(config)
        print(json.dumps(state, default=str) if as_json else format_triggerless_states(state))
        return 0
    report = backlog(config, connect(config))
    print(json.dumps(report, default=str) if as_json else format_backlog(report))
    return 0


def verify_command(config: Config, documents: str | None, reader: Reader, repair: bool = False) -> int:
    from publisher.database import connect
    from publisher.service.mirror import check

    engine = connect(config)
    default = reader.output(config)
    directory = Path(documents or default)
    if repair and documents is not None and directory.resolve() != Path(default).resolve():
        raise UsageError("verify --repair: repairs the consumer of the configured output; --documents names another")
    if repair:
        directory.mkdir(parents=True, exist_ok=True)  # no document yet: a consumer that holds nothing
    if not directory.is_dir():
        raise UnavailableError(f"no documents to replay: the directory {directory} does not exist")
    if not repair:
        result = check(config, engine, directory, reader)
        _report_verification(result, reader)
        _note_interrupted_cycle(config, reader)
        return 1 if result.differences else 0
    from publisher.service.repair import repair_consumer

    outcome = repair_consumer(config, engine, directory, reader, lambda found: _report_verification(found, reader))
    if outcome.logged is None:
        return 0
    print(json.dumps(outcome.logged.summary()))
    if not outcome.published:
        print(f"logged {plural(outcome.logged.total, 'event')}; the publisher holding the lock publishes them",
              file=sys.stderr)
        return 0
    _report_verification(outcome.final, reader)
    return 1 if outcome.final.differences else 0


def _report_verification(result: Any, reader: Reader) -> None:
    for difference in result.differences:
        print(difference)
    counted = f"{plural(result.objects, 'object')} in {plural(result.tables, 'table')}"
    if result.differences:
        print(f"{plural(len(result.differences), 'difference')} over {counted}")
    else:
        print(f"mirror equals source: {counted}, {plural(result.documents, 'document')} replayed")
    for (table, attribute), count in sorted(getattr(result, "retired", {}).items()):
        keep = "keeps" if count == 1 else "keep"
        print(f"retired: {table}.{attribute}: {plural(count, 'object')} {keep} values of a column the table no "
              "longer has (dropped or renamed); not a difference")
    if result.pending:
        are = "is" if result.pending == 1 else "are"
        waiting = "still new" if reader.is_status_mode else "not checked out yet"
        print(f"note: {plural(result.pending, 'event')} {are} {waiting}; poll until drained before verifying")


def _note_interrupted_cycle(config: Config, reader: Reader) -> None:
    """Triggerless: a cycle killed before it kept its read may have published part of it, or
    none; the next cycle publishes it again, so the consumer is only to be judged after that."""
    if not config.triggerless:
        return
    from publisher.triggerless.state import ComparisonState

    interrupted = ComparisonState(Path(reader.output(config)).resolve()).read_done()
    if interrupted is not None:
        print(f"note: a cycle read generation {interrupted.number} and was interrupted before keeping it; "
              "the next poll publishes that read again: poll, then verify")


def plural(number: int, noun: str) -> str:
    """`number` and the noun, in the plural unless it is one."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
