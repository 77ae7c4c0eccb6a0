"""What the database says about the published tables: their columns, value types and keys.

Reflected on the driver once per cycle and handed to Spark workers as plain, picklable data.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Engine, inspect
from sqlalchemy.exc import NoSuchTableError

from publisher.keys import KeyKind
from publisher.values import ValueType, value_type_of

VIEW_KEY_PREFIX = "pk_"


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    value_type: ValueType
    is_key: bool


@dataclass(frozen=True)
class TableInfo:
    """A published table or view; a view marks its key columns with a `pk_` prefix."""

    name: str
    columns: tuple[ColumnInfo, ...]
    is_view: bool = False

    @property
    def key_columns(self) -> tuple[tuple[str, KeyKind], ...]:
        return tuple(
            (c.name, KeyKind.INTEGER if c.value_type is ValueType.INT else KeyKind.TEXT)
            for c in self.columns
            if c.is_key
        )

    @property
    def value_columns(self) -> tuple[ColumnInfo, ...]:
        return tuple(c for c in self.columns if not c.is_key)

    def column(self, name: str) -> ColumnInfo | None:
        """Look a column up as the event log names it: exact spelling first, then ignoring case."""
        for c in self.columns:
            if c.name == name:
                return c
        lowered = name.lower()
        for c in self.columns:
            if c.name.lower() == lowered:
                return c
        return None


@dataclass(frozen=True)
class Catalog:
    """The published tables a cycle refers to, by the names the event log uses."""

    tables: dict[str, TableInfo]
    missing: dict[str, str]
    """Names that resolve to nothing usable, with the reason."""

    def lookup(self, name: str) -> TableInfo | None:
        return self.tables.get(name)


def reflect_catalog(engine: Engine, schema: str | None, names: Iterable[str]) -> Catalog:
    """Resolve each table name of the event log to a table or view of `schema`, case-insensitively."""
    inspector = inspect(engine)
    tables = {t: False for t in inspector.get_table_names(schema=schema)}
    tables.update({v: True for v in inspector.get_view_names(schema=schema)})
    by_lower: dict[str, str] = {}
    for t in sorted(tables):
        by_lower.setdefault(t.lower(), t)
    found: dict[str, TableInfo] = {}
    missing: dict[str, str] = {}
    where = f"schema {schema}" if schema else "the database"
    for name in names:
        if name is None:
            continue
        actual = name if name in tables else by_lower.get(name.lower())
        if actual is None:
            missing[name] = f"table {name!r} does not exist in {where}"
            continue
        try:
            info = _reflect_table(inspector, schema, actual, tables[actual])
        except NoSuchTableError:
            missing[name] = f"table {name!r} does not exist in {where}"
            continue
        if not any(c.is_key for c in info.columns):
            missing[name] = (
                f"table {actual!r} has no primary key"
                + (" (a view marks its key columns with a pk_ prefix)" if info.is_view else "")
            )
            continue
        found[name] = info
    return Catalog(found, missing)


def _reflect_table(inspector, schema: str | None, name: str, is_view: bool) -> TableInfo:  # type: ignore[no-untyped-def]
    columns = inspector.get_columns(name, schema=schema)
    if is_view:
        keys = {c["name"] for c in columns if c["name"].lower().startswith(VIEW_KEY_PREFIX)}
        order = [c["name"] for c in columns if c["name"] in keys]
    else:
        order = list(inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or [])
        keys = set(order)
    infos = [ColumnInfo(c["name"], value_type_of(c["type"]), c["name"] in keys) for c in columns]
    key_rank = {n: i for i, n in enumerate(order)}
    infos.sort(key=lambda c: (0, key_rank[c.name]) if c.is_key else (1, 0))
    return TableInfo(name, tuple(infos), is_view)
