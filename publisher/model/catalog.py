"""What the database says about the published tables: their columns, value types and keys.

Reflected on the driver once per cycle and handed to Spark workers as plain, picklable data.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import types as sqltypes
from sqlalchemy.exc import NoSuchTableError

from publisher.config import ClassConfig
from publisher.dialects import dialect_of
from publisher.dialects.reflection import reflection
from publisher.model.column_types import IN_ARRAYS, int_attribute, key_kind_of, type_name
from publisher.model.keys import KeyKind, writable_key_column
from publisher.model.logical import ChildLink, LogicalClassError, child_links, class_config
from publisher.model.values import ValueType, shown, value_type_of, xml_problem

VIEW_KEY_PREFIX = "pk_"


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    value_type: ValueType
    is_key: bool
    ordinal: int = 0
    """Position in the table as the database lists its columns, from 1 (0: not reflected)."""
    sql_type: str = ""
    """The database type as SQLAlchemy names it, e.g. VARCHAR(64) or NUMERIC(10, 2)."""
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    key_position: int = 0
    """Position in the primary key (or a view's pk_ columns), from 1; 0 for other columns."""
    key_kind: KeyKind = KeyKind.TEXT
    """How the column's values are spelled in a canonical table_key."""
    matched_as_text: bool = False
    """Query-back finds a row by the column's text, not its value, where a column stores what it
    is given and the two may not compare equal (`Dialect.matched_as_text`)."""
    in_arrays: bool = False
    """A plain type (integer, text, numeric, date-time, date, uuid, boolean) whose values an
    array literal or list carries as they are: query-back names a chunk of such keys as the database
    names a list (`ValueLists.key_among`, as one array where it can). Others (arrays, domains,
    composite types) go one parameter each."""


@dataclass(frozen=True)
class MultiValued:
    """A multi-valued attribute of a logical class: the rows of a child table (`model.logical`)."""

    attribute: ColumnInfo
    """The attribute as the event log names it, with the value column's type."""
    table: str
    value: ColumnInfo
    """The child's column whose values the attribute holds."""
    links: tuple[ColumnInfo, ...]
    """The child's columns holding the parent's key, in the parent's key order (with its key kinds)."""


@dataclass(frozen=True)
class TableInfo:
    """A published table or view; a view marks its key columns with a `pk_` prefix. As a logical
    class (`[classes.NAME]`) it also has multi-valued attributes and references."""

    name: str
    columns: tuple[ColumnInfo, ...]
    is_view: bool = False
    multi_valued: tuple[MultiValued, ...] = ()
    references: tuple[tuple[str, str], ...] = ()
    """(attribute, class) pairs: the attribute's values are keys of that class."""
    retired: tuple[str, ...] = ()
    """Columns an earlier shape of the table had and it has no more (a migration dropped or
    renamed them away): an event removing all of such an attribute's values (type 3) still names
    an attribute (`retired_columns = "remove"`)."""

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        """Computed once: tables key the per-table caches of every change a worker lays out."""
        return hash((self.name, self.columns, self.is_view, self.multi_valued, self.references, self.retired))

    @property
    def is_logical(self) -> bool:
        """A class with child tables or references: its objects' rules read their current rows or
        the objects they name (`rules.columnar.logical`)."""
        return bool(self.multi_valued or self.references)

    @functools.cached_property
    def multi_valued_names(self) -> frozenset[str]:
        return frozenset(m.attribute.name for m in self.multi_valued)

    def reference(self, attribute: str) -> str | None:
        """The class whose keys the attribute's values are, or None."""
        return dict(self.references).get(attribute)

    @functools.cached_property
    def key_columns(self) -> tuple[tuple[str, KeyKind], ...]:
        return tuple((c.name, c.key_kind) for c in self.columns if c.is_key)

    @functools.cached_property
    def value_columns(self) -> tuple[ColumnInfo, ...]:
        return tuple(c for c in self.columns if not c.is_key)

    @functools.cached_property
    def data_columns(self) -> tuple[ColumnInfo, ...]:
        """Every column in the table's own order (the order change tables and messages use)."""
        return tuple(sorted(self.columns, key=lambda c: c.ordinal))

    def column(self, name: str) -> ColumnInfo | None:
        """Look a column (or multi-valued attribute) up as the event log names it: exact
        spelling first, then ignoring case."""
        attributes = (*self.columns, *(m.attribute for m in self.multi_valued))
        for c in attributes:
            if c.name == name:
                return c
        lowered = name.lower()
        for c in attributes:
            if c.name.lower() == lowered:
                return c
        return None

    def retired_column(self, name: str) -> str | None:
        """The retired column `name` names (exact spelling first, then ignoring case), if it is
        not a column of the table now."""
        if self.column(name) is not None:
            return None
        if name in self.retired:
            return name
        return next((r for r in self.retired if r.lower() == name.lower()), None)


@functools.lru_cache(maxsize=256)
def child_table(multi: MultiValued) -> TableInfo:
    """A child table as query-back reads it: its link columns as the key (spelled as the
    parent's), its value column as the one value."""
    return TableInfo(multi.table, (*multi.links, multi.value))


@dataclass(frozen=True)
class Catalog:
    """Every published table of the schema, and what the schema holds besides, so that a worker
    can resolve any table name of the event log (exactly, else ignoring case) without asking
    the database."""

    tables: dict[str, TableInfo]
    """The publishable tables and views, by their actual names."""
    refused: dict[str, str]
    """Actual names that exist but cannot be published, with the reason."""
    existing: tuple[str, ...] = ()
    """Every table and view name of the schema."""
    where: str = "the database"

    def _actual(self, name: str) -> str | None:
        if name in self.tables or name in self.refused or name in self.existing:
            return name
        lowered = name.lower()
        for candidates in (sorted(self.tables), sorted(self.refused), sorted(self.existing)):
            for actual in candidates:
                if actual.lower() == lowered:
                    return actual
        return None

    def lookup(self, name: str) -> TableInfo | None:
        found = self.tables.get(name)
        if found is not None:
            return found
        actual = self._actual(name)
        return None if actual is None else self.tables.get(actual)

    def refusal(self, name: str) -> str:
        """Why `name` (as the event log spells it) resolves to no publishable table."""
        actual = self._actual(name)
        if actual is None:
            return f"table {shown(name)} does not exist in {self.where}"
        return self.refused.get(actual, f"table {shown(name)} is not published")


@dataclass(frozen=True)
class PublishedTables:
    """The allow-list: the tables and views a cycle may publish and query back."""

    names: tuple[str, ...]
    configured: bool
    """True: ``publisher.tables``; False: the tables found carrying capture triggers."""

    def refusal(self, name: str) -> str:
        why = "not in publisher.tables" if self.configured else "has no publisher triggers"
        return f"table {shown(name)} is not published ({why})"


def reflect_catalog(engine: Engine, schema: str | None, published: PublishedTables,
                    classes: Mapping[str, ClassConfig] | None = None) -> Catalog:
    """Reflect every table of the allow-list that `schema` holds, with the child tables and
    references of those that are logical classes (`classes`).

    The allow-list's names match exactly, else ignoring case. Only names the database itself
    lists are ever handed to it, so event log text never reaches SQL. A class the database
    cannot carry raises `LogicalClassError`, before any event is read.
    """
    inspector = reflection(engine, schema)
    dialect = engine.dialect.name
    kinds = {t: False for t in inspector.get_table_names(schema=schema)}
    kinds.update({v: True for v in inspector.get_view_names(schema=schema)})
    where = f"schema {schema}" if schema else "the database"
    listing = Catalog({}, {}, tuple(sorted(kinds)), where)
    allowed = {actual for actual in map(listing._actual, published.names) if actual is not None}
    tables: dict[str, TableInfo] = {}
    refused: dict[str, str] = {name: published.refusal(name) for name in kinds if name not in allowed}
    for name in sorted(allowed):
        try:
            info = _reflect_table(inspector, dialect, schema, name, kinds[name])
        except NoSuchTableError:
            continue
        problem = _unpublishable(info)
        if problem is None:
            tables[name] = info
        else:
            refused[name] = problem
    if classes:
        tables = _logical_classes(inspector, dialect, schema, tables, classes)
        refused.update(_child_refusals(tables))
    existing = tuple(n for n in sorted(kinds) if n not in tables and n not in refused)
    return Catalog(tables, refused, existing, where)


def _child_refusals(tables: Mapping[str, TableInfo]) -> dict[str, str]:
    """A logical class's child table carries the class's triggers, which log its rows against the
    parent: an event naming the child itself was not logged by them."""
    return {
        multi.table: f"table {shown(multi.table)} is not published on its own: it is a child table of logical class "
                     f"{shown(name)} (values of {name}.{multi.attribute.name}), whose rows are logged against {name}"
        for name, table in tables.items() for multi in table.multi_valued
    }


def _logical_classes(inspector, dialect: str, schema: str | None, tables: dict[str, TableInfo],  # type: ignore[no-untyped-def]
                     classes: Mapping[str, ClassConfig]) -> dict[str, TableInfo]:
    """The published tables, those configured as classes with their multi-valued attributes
    and references."""
    out = dict(tables)
    for name, table in tables.items():
        cls = class_config(classes, name)
        if cls is None:
            continue
        keys = [c for c in table.columns if c.is_key]
        links = child_links(inspector, schema, name, [c.name for c in keys], cls)
        multi = tuple(_multi_valued(inspector, dialect, schema, table, keys, link) for link in links)
        out[name] = dataclasses.replace(table, multi_valued=multi)
    for name, table in list(out.items()):
        cls = class_config(classes, name)
        if cls is not None and cls.references:
            out[name] = dataclasses.replace(table, references=_references(out[name], cls, out))
    missing = [name for name in classes if class_config({n: ClassConfig() for n in out}, name) is None]
    if missing:
        raise LogicalClassError(f"classes.{missing[0]}: no published table {missing[0]!r}")
    return out


def _multi_valued(inspector, dialect: str, schema: str | None, parent: TableInfo, keys: list[ColumnInfo],  # type: ignore[no-untyped-def]
                  link: ChildLink) -> MultiValued:
    child = _reflect_table(inspector, dialect, schema, link.table, False)
    where = f"classes.{parent.name}.multi_valued.{link.attribute}"
    value = child.column(link.value)
    assert value is not None
    if parent.column(link.attribute) is not None:
        raise LogicalClassError(f"{where}: {parent.name!r} has a column {link.attribute!r} already")
    problem = xml_problem(link.attribute)
    if problem is not None:
        raise LogicalClassError(f"{where}: attribute name {link.attribute!r} {problem}")
    linked = []
    for key, column_name in zip(keys, link.links, strict=True):
        column = child.column(column_name)
        assert column is not None
        check_link(link, key, column)
        linked.append(dataclasses.replace(column, is_key=True, key_position=key.key_position))
    value = dataclasses.replace(value, is_key=False, key_position=0)
    attribute = ColumnInfo(link.attribute, value.value_type, False, sql_type=value.sql_type, length=value.length,
                           precision=value.precision, scale=value.scale)
    return MultiValued(attribute, link.table, value, tuple(linked))


def referenced_tables(catalog: Catalog, tables: Mapping[str, TableInfo]) -> dict[str, TableInfo]:
    """The classes the tables' references name: read to tell whether a referenced object exists,
    whether or not they are published (a subscriber may not track them)."""
    return {target: catalog.tables[target] for table in tables.values() for _, target in table.references}


def check_link(link: ChildLink, key: ColumnInfo, column: ColumnInfo) -> None:
    """A child's link column must spell its values in a table_key as the parent's key column
    does (text holding an integer key would spell `idu=01`, an object the consumer lacks)."""
    if column.key_kind is not key.key_kind or column.value_type is not key.value_type:
        raise LogicalClassError(
            f"classes.{link.parent}.multi_valued.{link.attribute}: {link.table}.{column.name} ({column.sql_type}) "
            f"holds {link.parent}.{key.name} ({key.sql_type}), whose values a table_key spells otherwise")


def column_info(name: str, sql_type: sqltypes.TypeEngine[Any], dialect: str) -> ColumnInfo:
    """What `check_link` compares of a column, from its reflected type."""
    return ColumnInfo(name, value_type_of(sql_type), False, sql_type=type_name(sql_type),
                      key_kind=key_kind_of(sql_type, dialect))


def _references(table: TableInfo, cls: ClassConfig, tables: Mapping[str, TableInfo]) -> tuple[tuple[str, str], ...]:
    """Each reference's attribute and the class it names, which has a key of one column (the
    value is that key)."""
    out = []
    for attribute, target_name in cls.references.items():
        where = f"classes.{table.name}.references.{attribute}"
        column = table.column(attribute)
        if column is None or column.is_key:
            raise LogicalClassError(f"{where}: {table.name!r} has no attribute {attribute!r} "
                                    "(a value column or a multi-valued attribute)")
        target = next((t for n, t in tables.items() if n == target_name), None) or next(
            (t for n, t in tables.items() if n.lower() == target_name.lower()), None)
        if target is None:
            raise LogicalClassError(f"{where}: {target_name!r} is not a published table")
        if len(target.key_columns) != 1:
            raise LogicalClassError(f"{where}: {target.name!r} has a key of {len(target.key_columns)} columns; "
                                    "a reference's value is the key of a class keyed by one column")
        out.append((column.name, target.name))
    return tuple(out)


def _unpublishable(info: TableInfo) -> str | None:
    """Why a table cannot be published at all: no key, or a name XML cannot carry."""
    if not any(c.is_key for c in info.columns):
        return f"table {info.name!r} has no primary key" + (
            " (a view marks its key columns with a pk_ prefix)" if info.is_view else ""
        )
    problem = xml_problem(info.name)
    if problem is not None:
        return f"table name {info.name!r} {problem}"
    for column in info.columns:
        problem = xml_problem(column.name)
        if problem is not None:
            return f"column name {column.name!r} of table {info.name!r} {problem}"
    for column in info.columns:
        if column.is_key and not writable_key_column(column.name):
            return (
                f"key column name {column.name!r} of table {info.name!r} cannot be written in a table_key"
                " (it holds one of , ; ' + \" = \\ < > or surrounding spaces)"
            )
    return None


def _reflect_table(inspector, dialect: str, schema: str | None, name: str, is_view: bool) -> TableInfo:  # type: ignore[no-untyped-def]
    columns = inspector.get_columns(name, schema=schema)
    if is_view:
        keys = {c["name"] for c in columns if c["name"].lower().startswith(VIEW_KEY_PREFIX)}
        order = [c["name"] for c in columns if c["name"] in keys]
    else:
        order = list(inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or [])
        keys = set(order)
    key_rank = {n: i for i, n in enumerate(order)}
    found = dialect_of(dialect)
    infos = [
        ColumnInfo(
            c["name"],
            value_type_of(c["type"]),
            c["name"] in keys,
            ordinal=ordinal,
            sql_type=type_name(c["type"]),
            length=int_attribute(c["type"], "length"),
            precision=int_attribute(c["type"], "precision"),
            scale=int_attribute(c["type"], "scale"),
            key_position=key_rank[c["name"]] + 1 if c["name"] in keys else 0,
            key_kind=key_kind_of(c["type"], dialect),
            matched_as_text=found.matched_as_text(c["type"]),
            in_arrays=isinstance(c["type"], IN_ARRAYS),
        )
        for ordinal, c in enumerate(columns, start=1)
    ]
    infos.sort(key=lambda c: (0, key_rank[c.name]) if c.is_key else (1, 0))
    return TableInfo(name, tuple(infos), is_view)
