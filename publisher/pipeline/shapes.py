"""A cycle's window ends where a published table's events change shape (a migration), so that
change tables and messages describe every table by one shape in a cycle: the one its events
were logged for (`model.shapes`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sqlalchemy import Engine, func, select

from publisher.capture.shape import recorded_styles
from publisher.capture.shape_history import recorded_shapes
from publisher.config import Config
from publisher.model.catalog import Catalog, TableInfo
from publisher.model.shapes import ShapeHistory, retired_names
from publisher.pipeline.event_log import EventLogSource
from publisher.pipeline.window import CycleWindow, window_predicate


def shape_history(config: Config, engine: Engine, tables: Mapping[str, TableInfo]) -> ShapeHistory:
    """The shapes of the published tables whose events carry values: in row style they carry
    keys alone, and each change is read back from the table as it is now."""
    styles = recorded_styles(config, engine)
    records = {name: shapes for name, shapes in recorded_shapes(config, engine).items()
               if styles.get(name.lower()) != "row"}
    return ShapeHistory(records, tables)


def within_one_shape(log: EventLogSource, engine: Engine, window: CycleWindow, history: ShapeHistory) -> CycleWindow:
    """The window up to the first change of shape in it. In future mode, whose rows go in event
    time order, the window is left whole: its tables are described as they are now."""
    if window.future:
        return window
    change = history.first_change(window.lo, window.hi)
    if change is None:
        return window
    predicate = window_predicate(window, log.with_transaction, window.lo, change - 1, engine.dialect.name)
    with engine.connect() as conn:
        count = int(conn.execute(select(func.count()).where(predicate)).scalar_one())
    return window.ending_at(change - 1, count) if count else window


def described_tables(history: ShapeHistory, window: CycleWindow) -> dict[str, TableInfo]:
    """The tables as the window's events were logged for them."""
    return dict(history.now) if window.future else history.at(window.lo)


def with_retired(config: Config, engine: Engine, catalog: Catalog) -> Catalog:
    """The catalog with each table's retired columns (`TableInfo.retired`), from its recorded
    shapes, so that the removal of a retired attribute's values classifies."""
    records = {name.lower(): shapes for name, shapes in recorded_shapes(config, engine).items()}
    tables = {}
    for name, table in catalog.tables.items():
        retired = retired_names(records.get(name.lower(), ()), table.columns)
        tables[name] = dataclasses.replace(table, retired=retired) if retired else table
    return dataclasses.replace(catalog, tables=tables)
