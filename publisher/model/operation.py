"""An XDS operation as data: what one object's merged events tell the consumer.

Built by the rules (`rules.operations`), serialised by `model.xds`, replayed by the mirror.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from publisher.model.values import ValueType


class OperationKind(str, enum.Enum):
    ADD = "add"
    MODIFY = "modify"
    DELETE = "delete"


@dataclass(frozen=True)
class Value:
    type: ValueType
    text: str
    association_ref: str | None = None
    """A reference's (type dn): the referenced object's association, for the consumer to resolve;
    None when no such object exists (a dangling reference)."""


@dataclass(frozen=True)
class AttrChange:
    """What happens to one attribute; a ``None`` part publishes nothing for it."""

    name: str
    remove_all: bool = False
    remove: Value | None = None
    add: Value | None = None
    more: tuple[Value, ...] = ()
    """Further values added with `add`: every current value of a multi-valued attribute."""

    @property
    def is_empty(self) -> bool:
        return not self.remove_all and self.remove is None and self.add is None


@dataclass(frozen=True)
class Operation:
    kind: OperationKind
    class_name: str
    association: str
    event_id: int
    attrs: tuple[AttrChange, ...] = ()

    @property
    def changes_nothing(self) -> bool:
        """A modify whose every attribute change is empty (e.g. a type 7 on a NULL value) says nothing."""
        return self.kind is OperationKind.MODIFY and all(a.is_empty for a in self.attrs)


def association(canonical_key: str, table: str, schema: str) -> str:
    """The object's association: canonical key, then table, then schema."""
    return f"{canonical_key},table={table},schema={schema}"
