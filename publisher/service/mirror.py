"""The consumer mirror: the publisher's oracle.

Replays the XDS documents of an output directory, in publication order, into a model of the
downstream consumer, and compares that model with the current rows of the published tables.
When the event log is drained, every difference is a change the consumer lost or got wrong.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lxml import etree
from sqlalchemy import Engine, func, select

from publisher.config import STATUS_MODE, Config, Reader, RetiredColumns
from publisher.model.operation import OperationKind
from publisher.outputs.cycle_files import document_paths

if TYPE_CHECKING:
    from publisher.model.catalog import TableInfo
    from publisher.rules.operations import References

Objects = dict[str, dict[str, set[str]]]
"""Objects by association: attribute name → its values (an attribute with no value is absent)."""

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True)
ABSENT = "absent"
CANNOT_PUBLISH = "cannot be published"
NO_ONE_OBJECT = "no one object"
"""Said of a key that rows of a table share: they name no one object, so none is compared."""
REFUSED_ADD = "no <add> while it exists"
"""An anomaly: what the consumer did is in the documents' history, whatever is published next."""
PRESENT = "present"


@dataclass(frozen=True)
class Difference:
    """One way the consumer's object differs from the source; attribute None: the whole object."""

    association: str
    attribute: str | None
    expected: str
    published: str

    @property
    def table(self) -> str:
        """The `table=` part of the association."""
        return self.association.rsplit(",table=", 1)[-1].rsplit(",schema=", 1)[0]

    def __str__(self) -> str:
        return (f"{self.table}  {self.association}  {self.attribute or 'object'}: "
                f"expected {_abbreviated(self.expected)}, published {_abbreviated(self.published)}")


SHOWN_CHARACTERS = 200
"""A difference's side longer than this is shown by its start and length: values of some MB
would make each difference's line as long."""


def _abbreviated(side: str) -> str:
    if len(side) <= SHOWN_CHARACTERS:
        return side
    return f"{side[:SHOWN_CHARACTERS // 2]}... ({len(side):,} characters)"


@dataclass
class Mirror:
    """The consumer after a replay; `anomalies` are the operations a real engine would refuse."""

    objects: Objects = field(default_factory=dict)
    anomalies: list[Difference] = field(default_factory=list)
    documents: int = 0
    applied: set[str] = field(default_factory=set)
    """The event-ids applied so far: a cycle published again after a crash repeats them."""


@dataclass(frozen=True)
class Verification:
    """What `publisher verify` reports: the differences and what was compared."""

    differences: list[Difference]
    objects: int
    tables: int
    documents: int
    pending: int
    retired: dict[tuple[str, str], int] = field(default_factory=dict)
    """Values the consumer keeps of columns the tables no longer have (`compare`): said apart,
    not differences."""


def replay(paths: Iterable[Path]) -> Mirror:
    """Apply the documents' operations in order, by file name (publication order)."""
    mirror = Mirror()
    for path in sorted(paths, key=lambda p: p.name):
        mirror.documents += 1
        for op in _operations(etree.parse(str(path), _PARSER).getroot()):
            event_id = op.get("event-id")
            if event_id is not None and event_id in mirror.applied:
                continue
            _apply(mirror, op)
            if event_id is not None:
                mirror.applied.add(event_id)
    return mirror


_OPERATION_TAGS = frozenset(kind.value for kind in OperationKind)


def _operations(document: etree._Element) -> Iterator[etree._Element]:
    """The <add>, <modify> and <delete> of a document; a heartbeat's <status> carries none."""
    operations = document.find("input")
    for op in operations if operations is not None else ():
        if op.tag in _OPERATION_TAGS:
            yield op


def _apply(mirror: Mirror, op: etree._Element) -> None:
    objects = mirror.objects
    association = (op.findtext("association") or "").strip()
    if op.tag == OperationKind.DELETE:
        objects.pop(association, None)
    elif op.tag == OperationKind.ADD:
        if association in objects:
            mirror.anomalies.append(Difference(
                association, None, REFUSED_ADD,
                f"an <add> for an object that already exists (event-id {op.get('event-id')}) was refused",
            ))
            return
        objects[association] = {}
        for attr in op.iter("add-attr"):
            _values(objects[association], attr.get("attr-name", "")).update(_texts(attr))
    else:
        _modify(objects.setdefault(association, {}), op)
    if association in objects:
        objects[association] = {name: values for name, values in objects[association].items() if values}


def _modify(obj: dict[str, set[str]], op: etree._Element) -> None:
    """Apply each <modify-attr> child in document order; a modify of an unknown object creates it."""
    for attr in op.iter("modify-attr"):
        values = _values(obj, attr.get("attr-name", ""))
        for change in attr:
            if change.tag == "remove-all-values":
                values.clear()
            elif change.tag == "remove-value":
                values.difference_update(_texts(change))
            elif change.tag == "add-value":
                values.update(_texts(change))


def _values(obj: dict[str, set[str]], name: str) -> set[str]:
    return obj.setdefault(name, set())


def _texts(parent: etree._Element) -> list[str]:
    return [value.text or "" for value in parent.iter("value")]


def source_objects(
    config: Config, engine: Engine, reader: Reader = STATUS_MODE
) -> tuple[Objects, list[Difference]]:
    """The objects the consumer should hold, read from the published tables as query-back reads
    them (a subscriber's: the tables and columns its subscription tracks), and the values that
    cannot be published (`published` left empty for compare to fill)."""
    _, objects, problems, _ = _source(config, engine, reader)
    return objects, problems


def _source(config: Config, engine: Engine, reader: Reader
            ) -> tuple[int, Objects, list[Difference], dict[str, frozenset[str]]]:
    """(tables, objects, problems, the attributes each table publishes now)."""
    from publisher.capture.install import published_tables
    from publisher.database import association_schema, table_schema
    from publisher.model.catalog import reflect_catalog
    from publisher.model.operation import association
    from publisher.pipeline.queryback import QueryBackContext, scan_children, scan_table
    from publisher.rules.operations import References

    schema = table_schema(config, engine)
    catalog = reflect_catalog(engine, schema, published_tables(config, engine), config.classes)
    tables = catalog.tables
    if reader.subscriber is not None:
        from publisher.pipeline.subscribers import tracked
        from publisher.subscriptions.filter import tracked_tables

        tables = tracked_tables(catalog, tracked(config, reader.subscriber, catalog))
    ctx = QueryBackContext(config.database.sqlalchemy_url(), schema, tables)
    label = association_schema(config, engine)
    objects: Objects = {}
    problems: list[Difference] = []
    references = References(catalog.tables, label)
    for table in tables.values():
        rows: collections.Counter[str] = collections.Counter()
        for key, row, row_problems in scan_table(ctx, table):
            name = association(key, table.name, label)
            rows[name] += 1
            objects[name] = {column: {_published(table, column, value, references)}
                             for column, value in row.items() if value is not None}
            for column, reason in row_problems.items():
                objects[name].pop(column, None)
                problems.append(Difference(name, column, f"{CANNOT_PUBLISH}: {reason}", ""))
        for name, count in rows.items():
            if count > 1:  # a view whose pk_ columns are not unique, 1 and '1' (`keys_spelled_by_type`): no one object
                objects.pop(name)
                problems.append(Difference(name, None, f"{NO_ONE_OBJECT}: {count} rows of {table.name} share this key",
                                           ""))
        for key, attribute, value, problem in scan_children(ctx, table, config.triggerless) if table.multi_valued \
                else ():
            name = association(key, table.name, label)
            if name not in objects:
                continue
            if problem is not None:
                problems.append(Difference(name, attribute, f"{CANNOT_PUBLISH}: {problem}", ""))
            elif value is not None:
                objects[name].setdefault(attribute, set()).add(_published(table, attribute, value, references))
    attributes = {table.name: frozenset(c.name for c in table.columns) | table.multi_valued_names
                  for table in tables.values()}
    return len(tables), objects, problems, attributes


def _published(table: TableInfo, attribute: str, value: str, references: References) -> str:
    """A value's text as the consumer holds it: a reference's, the referenced object's association."""
    target = table.reference(attribute)
    return value if target is None else references.value(target, value).text


Retired = dict[tuple[str, str], int]
"""Per table and attribute, the objects whose values the consumer holds for a column the table
no longer has (dropped or renamed by a migration): kept there, as the connector keeps them."""


def compare(mirror: Mirror, source: Objects, source_problems: Iterable[Difference] = (),
            attributes: dict[str, frozenset[str]] | None = None, retired: Retired | None = None) -> list[Difference]:
    """Every difference between the consumer and the source, and the mirror's anomalies, sorted.
    With `attributes` (each table's now), an attribute the consumer holds that its table no
    longer publishes is counted in `retired` instead of being a difference."""
    if attributes is not None and retired is not None:
        _set_retired_apart(mirror, source, attributes, retired)
    problems: dict[str, dict[str, Difference]] = {}
    for problem in source_problems:
        problems.setdefault(problem.association, {})[problem.attribute or ""] = problem
    found = list(mirror.anomalies)
    for name in source.keys() | mirror.objects.keys() | problems.keys():
        expected, published = source.get(name), mirror.objects.get(name)
        whole = problems.get(name, {}).get("")
        if whole is not None:  # the source names no one object by it: said instead of its values
            found.append(dataclasses.replace(whole, published=_presence(published)))
            continue
        if expected is None or published is None:
            found.append(Difference(name, None, _presence(expected), _presence(published)))
        found += _attribute_differences(name, expected, published, problems.get(name, {}))
    return sorted(found, key=lambda d: (d.association, d.attribute or "", d.expected, d.published))


def _set_retired_apart(mirror: Mirror, source: Objects, attributes: dict[str, frozenset[str]],
                       retired: Retired) -> None:
    """Take the retired attributes out of the mirror's objects that the source holds too,
    counting them (an object the source no longer has is a difference whole, as it was)."""
    lowered = {table.lower(): {name.lower() for name in names} for table, names in attributes.items()}
    for name, published in mirror.objects.items():
        if name not in source:
            continue
        table = name.rsplit(",table=", 1)[-1].rsplit(",schema=", 1)[0]
        now = lowered.get(table.lower())
        if now is None:
            continue
        for attribute in [a for a in published if a.lower() not in now]:
            del published[attribute]
            retired[(table, attribute)] = retired.get((table, attribute), 0) + 1


def _attribute_differences(
    name: str,
    expected: dict[str, set[str]] | None,
    published: dict[str, set[str]] | None,
    problems: dict[str, Difference],
) -> Iterator[Difference]:
    """A column that cannot be published is always reported; an object present on one side
    only is one whole-object difference, not one per attribute."""
    for attribute, problem in problems.items():
        yield dataclasses.replace(problem, published=_shown((published or {}).get(attribute)))
    if expected is None or published is None:
        return
    for attribute in (expected.keys() | published.keys()) - problems.keys():
        if expected.get(attribute) != published.get(attribute):
            yield Difference(name, attribute, _shown(expected.get(attribute)), _shown(published.get(attribute)))


def _presence(obj: dict[str, set[str]] | None) -> str:
    return ABSENT if obj is None else PRESENT


def _shown(values: set[str] | None) -> str:
    return str(sorted(values)) if values else ABSENT


def pending_events(config: Config, engine: Engine) -> int:
    """Event log rows still new: until they are published, the consumer is expected to lag."""
    from publisher.database import table_schema
    from publisher.model.events import Status
    from publisher.pipeline.event_log import event_log_table

    table = event_log_table(config, table_schema(config, engine))
    status = table.c[config.event_log.columns.status]
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(status == Status.NEW.value)).scalar_one())


def check(
    config: Config, engine: Engine, documents: Path | None = None, reader: Reader = STATUS_MODE
) -> Verification:
    """Replay the documents, read the source, compare; with the counts a report needs. For a
    subscriber: its documents, against what its subscription tracks."""
    directory = Path(documents if documents is not None else reader.output(config))
    mirror = replay(document_paths(directory))
    tables, source, problems, attributes = _source(config, engine, reader)
    retired: Retired = {}
    kept = config.publisher.retired_columns is RetiredColumns.KEEP  # else removed: one left is a difference
    differences = compare(mirror, source, problems, attributes if kept else None, retired)
    objects = len(source.keys() | mirror.objects.keys())
    if config.triggerless:
        pending = 0
    elif reader.subscriber is None:
        pending = pending_events(config, engine)
    else:
        from publisher.pipeline.subscribers import subscriber_backlog

        pending = subscriber_backlog(config, engine, reader.subscriber).waiting
    return Verification(differences, objects, tables, mirror.documents, pending, retired)


def verify(
    config: Config, engine: Engine, documents: Path | None = None, reader: Reader = STATUS_MODE
) -> list[Difference]:
    """The differences between the consumer the documents make and the published tables."""
    return check(config, engine, documents, reader).differences
