"""The two ways through a cycle publish the same thing: the same events, drained once in the
driver alone and once as Spark jobs, give the same operations in the same order, the same
statuses and the same rejected rows."""
from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import POSTGRES_URL
from harness import read_change_tables, read_messages
from lxml import etree
from sqlalchemy import text

from publisher.config import ChangeTablesConfig, Config, MessagesConfig
from publisher.database import connect
from publisher.pipeline import driver
from publisher.pipeline.cycle import CycleResult, run_cycle
from publisher.workshop.bench.workload import discard, generate

ROWS, EVENTS, QUERY_LIMIT, BATCH_SIZE = 120, 3_000, 1_100, 50


def drain(spark: Any, config: Config) -> list[CycleResult]:
    engine = connect(config)
    try:
        results = []
        while not (result := run_cycle(spark, engine, config)).idle:
            results.append(result)
        return results
    finally:
        engine.dispose()


def operations(directory: Path) -> list[bytes]:
    """Every published operation, serialised, in publication order (documents in name order)."""
    documents = sorted(directory.glob("*.xml"))
    return [
        etree.tostring(op) for path in documents for op in etree.parse(str(path)).getroot().find("input")
    ]


def statuses(config: Config) -> dict[int, str]:
    engine = connect(config)
    try:
        with engine.connect() as conn:
            table = f"{config.database.schema}.event_log" if config.database.schema else "event_log"
            return {int(r): s for r, s in conn.execute(text(f"SELECT record_id, status FROM {table}"))}
    finally:
        engine.dispose()


def cycle_sizes(config: Config) -> list[int]:
    """The cycles' sizes by the window rule: query_limit rows, then the rest of every
    transaction they hold, and of every transaction that takes in. SQLite records no
    transaction: there a statement's rows share their event_time, and the rows after the cut
    that continue the window's last statement for an object it holds from that statement are
    taken too (`window_end.WindowEnd`; statements that fall in one millisecond share a time)."""
    engine = connect(config)
    try:
        with engine.connect() as conn:
            table = f"{config.database.schema}.event_log" if config.database.schema else "event_log"
            rows = conn.execute(text(
                f"SELECT transaction_id, event_time, table_name, table_key FROM {table} ORDER BY record_id"
            )).all()
    finally:
        engine.dispose()
    transactions = [row[0] for row in rows]
    last = {transaction: index for index, transaction in enumerate(transactions) if transaction is not None}
    sizes, start = [], 0
    while start < len(rows):
        end = min(start + QUERY_LIMIT, len(rows))
        while True:
            through = max((last[t] + 1 for t in set(transactions[start:end]) - {None}), default=end)
            through = max(through, _statement_run_end(rows, start, through))
            if through == end:
                break
            end = through
        sizes.append(end - start)
        start = end
    return sizes


def _statement_run_end(rows: list[Any], start: int, end: int) -> int:
    """Where the window rows[start:end] ends once the rows without a transaction that continue
    its last statement (the same event_time) for an object it holds from that statement are in."""
    if end == len(rows) or rows[end - 1][0] is not None:
        return end
    run = rows[end - 1][1]
    objects = set()
    for index in range(end - 1, start - 1, -1):
        if rows[index][0] is not None or rows[index][1] != run:
            break
        objects.add(tuple(rows[index][2:4]))
    taken = end
    for index in range(end, len(rows)):
        if rows[index][0] is not None or rows[index][1] != run:
            break
        if tuple(rows[index][2:4]) in objects:
            objects.update(tuple(row[2:4]) for row in rows[taken : index + 1])
            taken = index + 1
    return taken


def renew(config: Config) -> None:
    """Put every event back to N: the same backlog again, over unchanged tables."""
    engine = connect(config)
    try:
        with engine.begin() as conn:
            table = f"{config.database.schema}.event_log" if config.database.schema else "event_log"
            conn.execute(text(f"UPDATE {table} SET status = 'N'"))
    finally:
        engine.dispose()


def with_path(config: Config, output: Path, small_cycle_events: int) -> Config:
    """The path, with every output format on."""
    return dataclasses.replace(
        config,
        output=dataclasses.replace(
            config.output,
            directory=str(output),
            change_tables=ChangeTablesConfig(enabled=True, trail_header=True, partition_minutes=60),
            messages=MessagesConfig(enabled=True, trail_header=True, external_schema_id=True),
        ),
        spark=dataclasses.replace(config.spark, small_cycle_events=small_cycle_events),
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_driver_and_spark_paths_publish_the_same_operations(spark, tmp_path: Path, dialect: str, monkeypatch) -> None:
    # The driver classifies and resolves a large cycle in threads, a part each: here, three.
    monkeypatch.setattr(driver, "THREADS", 3)
    monkeypatch.setattr(driver, "PART_EVENTS", 100)
    assert driver._threads(QUERY_LIMIT) == 3
    url = f"sqlite:///{tmp_path / 'paths.db'}" if dialect == "sqlite" else POSTGRES_URL
    workload = generate(dialect, url, ROWS, EVENTS, f"paths_{uuid.uuid4().hex[:10]}")  # type: ignore[arg-type]
    try:
        config = workload.config(tmp_path / "unused", QUERY_LIMIT, BATCH_SIZE)
        in_driver = with_path(config, tmp_path / "driver", small_cycle_events=EVENTS)
        on_spark = with_path(config, tmp_path / "spark", small_cycle_events=0)

        sizes = cycle_sizes(config)
        driver_cycles = drain(spark, in_driver)
        driver_statuses = statuses(config)
        renew(config)
        spark_cycles = drain(spark, on_spark)
        spark_statuses = statuses(config)
    finally:
        discard(workload)

    assert [c.distributed for c in driver_cycles] == [False] * 3
    assert [c.distributed for c in spark_cycles] == [True] * 3
    assert [c.events for c in driver_cycles] == [c.events for c in spark_cycles] == sizes
    assert len(sizes) == 3 and sum(sizes) == EVENTS
    assert sizes[0] > 1_100 if dialect == "postgresql" else sizes[0] >= 1_100  # transactions cross the first cut

    published = operations(tmp_path / "driver")
    assert published == operations(tmp_path / "spark")
    tags = {etree.fromstring(op).tag for op in published}
    assert tags == {"add", "modify", "delete"}
    assert len(published) == sum(c.operations for c in driver_cycles) == sum(c.operations for c in spark_cycles)

    tables = read_change_tables(tmp_path / "driver")
    assert tables == read_change_tables(tmp_path / "spark")
    assert {row["header__change_oper"] for rows in tables.values() for row in rows} == {"I", "U", "B", "D"}
    assert sum(map(len, tables.values())) == sum(c.change_rows for c in spark_cycles)
    sent = read_messages(tmp_path / "driver", keep_time=False)
    assert sent == read_messages(tmp_path / "spark", keep_time=False)
    data = [m for m in sent if "headers" in m]
    assert len(data) == len(published) == sum(c.messages for c in spark_cycles)
    if dialect == "postgresql":
        # Every transaction of the workload publishes several operations, and no cycle cuts one
        # (a cut used to leave a lone operation, marked 3: whole transaction).
        assert {m["trailHeader"]["TransInd"] for m in data} == {0, 1, 2}

    assert driver_statuses == spark_statuses
    assert set(driver_statuses.values()) == {"S", "W", "E"}
    assert [c.statuses for c in driver_cycles] == [c.statuses for c in spark_cycles]

    def rejects(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (path / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]

    rejected = rejects(tmp_path / "driver")
    assert rejected == rejects(tmp_path / "spark")
    assert len(rejected) == workload.plan.malformed
