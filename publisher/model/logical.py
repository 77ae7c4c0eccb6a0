"""Logical database classes: how a child table's rows attach to their parent object.

A class ``[classes.usr]`` with ``multi_valued.phone = "usr_phone.phone"`` publishes each row of
``usr_phone`` as one value of the attribute ``phone`` of the ``usr`` object its other key
columns name. The capture triggers (which log a child row against its parent's key) and the
reads of the published side (query-back, the mirror) find those columns here, by one rule.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from publisher.config import ClassConfig, ConfigError, child_column


class LogicalClassError(ConfigError):
    """A [classes.NAME] entry that the database's tables cannot carry; says which and why."""


@dataclass(frozen=True)
class ChildLink:
    """The rows of one child table as values of one multi-valued attribute of the parent."""

    attribute: str
    table: str
    """The child table's actual name."""
    value: str
    """The column whose values the attribute holds."""
    links: tuple[str, ...]
    """The child's columns holding the parent's key, in the parent's key order."""
    parent: str
    """The parent table's actual name (the class name)."""


def class_config(classes: Mapping[str, ClassConfig], table: str) -> ClassConfig | None:
    """The [classes.NAME] entry of a table: its exact name, else the one ignoring case."""
    if table in classes:
        return classes[table]
    found = [c for name, c in classes.items() if name.lower() == table.lower()]
    return found[0] if len(found) == 1 else None


def child_tables(classes: Mapping[str, ClassConfig]) -> frozenset[str]:
    """The child tables of every configured class, lower-cased: values, not classes of their own
    (their triggers log their parent's events; they are never published tables)."""
    return frozenset(child_column(spec)[0].lower() for cls in classes.values() for spec in cls.multi_valued.values())


@dataclass(frozen=True)
class ChildOf:
    """A table named in ``[classes.NAME.multi_valued]``: its class, restricted to its attribute."""

    class_name: str
    cls: ClassConfig


def installed_children(classes: Mapping[str, ClassConfig], tables: Sequence[str]) -> list[tuple[str, str, str]]:
    """(class, attribute, child table) of each child table `install --table` names or installs
    with its class."""
    named = {t.lower() for t in tables}
    return [(name, attribute, child_column(spec)[0])
            for name, cls in classes.items() for attribute, spec in cls.multi_valued.items()
            if name.lower() in named or child_column(spec)[0].lower() in named]


def child_of(classes: Mapping[str, ClassConfig], table: str) -> ChildOf | None:
    """The class whose multi-valued attribute the table holds (compared ignoring case, as table
    names are), with only that attribute: naming a child installs that child alone."""
    for name, cls in classes.items():
        for attribute, spec in cls.multi_valued.items():
            if child_column(spec)[0].lower() == table.lower():
                return ChildOf(name, dataclasses.replace(cls, multi_valued={attribute: spec}))
    return None


def child_links(inspector: Any, schema: str | None, parent: str, parent_key: Sequence[str],
                cls: ClassConfig) -> tuple[ChildLink, ...]:
    """Each multi-valued attribute's child table, checked against what the database says."""
    return tuple(_child_link(inspector, schema, parent, parent_key, attribute, spec)
                 for attribute, spec in cls.multi_valued.items())


def _child_link(inspector: Any, schema: str | None, parent: str, parent_key: Sequence[str], attribute: str,
                spec: str) -> ChildLink:
    """The child's link columns: those of its foreign key to the parent, else its key columns
    other than the value column, matched to the parent's key by name, else by position. Its
    primary key must be the link columns and the value column, so that a value appears once
    per object (the attribute is a set)."""
    where = f"classes.{parent}.multi_valued.{attribute}"
    table_name, value_name = child_column(spec)
    tables = inspector.get_table_names(schema=schema)
    table = _named(table_name, tables)
    if table is None:
        raise LogicalClassError(f"{where}: child table {table_name!r} does not exist"
                                f"{f' in schema {schema}' if schema else ''}")
    columns = [c["name"] for c in inspector.get_columns(table, schema=schema)]
    value = _named(value_name, columns)
    if value is None:
        raise LogicalClassError(f"{where}: table {table!r} has no column {value_name!r} "
                                f"(its columns: {', '.join(columns)})")
    key = list(inspector.get_pk_constraint(table, schema=schema).get("constrained_columns") or [])
    links = _by_foreign_key(inspector, schema, table, parent, parent_key)
    if links is None:
        others = [c for c in key if c != value]
        by_name = [_named(k, others) for k in parent_key]
        if all(by_name) and len(others) == len(parent_key):
            links = tuple(n for n in by_name if n is not None)
        elif len(others) == len(parent_key):
            links = tuple(others)
        else:
            raise LogicalClassError(
                f"{where}: cannot tell which columns of {table!r} hold the key of {parent!r} "
                f"({', '.join(parent_key)}): give {table!r} a foreign key to {parent!r}, or a primary key of "
                f"those columns and {value!r}")
    if value in links:
        raise LogicalClassError(f"{where}: {table}.{value} holds the key of {parent!r}, not a value")
    if sorted(key) != sorted([*links, value]):
        raise LogicalClassError(
            f"{where}: the primary key of {table!r} is ({', '.join(key) or 'none'}); it must be the columns "
            f"holding the key of {parent!r} and the value column ({', '.join([*links, value])}), so that a "
            "value appears once per object")
    return ChildLink(attribute, table, value, links, parent)


def _by_foreign_key(inspector: Any, schema: str | None, table: str, parent: str,
                    parent_key: Sequence[str]) -> tuple[str, ...] | None:
    for fk in inspector.get_foreign_keys(table, schema=schema):
        if fk.get("referred_table", "").lower() != parent.lower():
            continue
        referred = dict(zip(fk["referred_columns"], fk["constrained_columns"], strict=True))
        if sorted(referred) == sorted(parent_key):
            return tuple(referred[k] for k in parent_key)
    return None


def _named(name: str, names: Sequence[str]) -> str | None:
    """The exact name if present, else the one name that matches it ignoring case."""
    if name in names:
        return name
    matches = [n for n in names if n.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None
