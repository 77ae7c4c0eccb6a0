"""XDS documents: the one place that turns operations into XML.

Operations are serialised one by one (in parallel, on the workers) and documents are then
assembled from those bytes, so ``build_document`` concatenates instead of re-parsing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import metadata

from lxml import etree

from publisher.model.operation import AttrChange, Operation, OperationKind, Value

PRODUCT_NAME = "Event Log Publisher"
CONTACT = "event-log-publisher"
DISTRIBUTION = "event-log-publisher"


def _add_value(parent: etree._Element, value: Value) -> None:
    etree.SubElement(parent, "value", {"type": value.type.value}).text = value.text


def _build_add(root: etree._Element, attrs: tuple[AttrChange, ...]) -> None:
    for attr in attrs:
        if attr.remove_all or attr.remove is not None:
            raise ValueError(f"an add operation cannot remove values (attribute {attr.name!r})")
        if attr.add is not None:
            _add_value(etree.SubElement(root, "add-attr", {"attr-name": attr.name}), attr.add)


def _build_modify(root: etree._Element, attrs: tuple[AttrChange, ...]) -> None:
    sub = etree.SubElement
    for attr in attrs:
        if attr.is_empty:
            continue
        modify_attr = sub(root, "modify-attr", {"attr-name": attr.name})
        if attr.remove_all:
            sub(modify_attr, "remove-all-values")
        if attr.remove is not None:
            _add_value(sub(modify_attr, "remove-value"), attr.remove)
        if attr.add is not None:
            _add_value(sub(modify_attr, "add-value"), attr.add)


def build_operation(op: Operation) -> bytes:
    """One serialised operation element, without an XML declaration."""
    root = etree.Element(
        op.kind.value, {"class-name": op.class_name, "event-id": str(op.event_id)}
    )
    etree.SubElement(root, "association").text = op.association
    if op.kind is OperationKind.ADD:
        _build_add(root, op.attrs)
    elif op.kind is OperationKind.MODIFY:
        _build_modify(root, op.attrs)
    elif op.attrs:
        raise ValueError("a delete operation carries no attributes")
    return etree.tostring(root, encoding="UTF-8")


def _product_version() -> str:
    import publisher

    version = getattr(publisher, "__version__", None)
    if version:
        return str(version)
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


_INPUT_CLOSE = b"</input></nds>"


@functools.cache
def _document_head() -> bytes:
    """Everything up to and including ``<input>``, serialised by lxml once per process."""
    nds = etree.Element("nds", {"dtdversion": "4.0"})
    source = etree.SubElement(nds, "source")
    etree.SubElement(source, "product", {"version": _product_version()}).text = PRODUCT_NAME
    etree.SubElement(source, "contact").text = CONTACT
    etree.SubElement(nds, "input")
    skeleton = etree.tostring(nds, encoding="UTF-8")
    empty_input = b"<input/></nds>"
    if not skeleton.endswith(empty_input):
        raise AssertionError(f"unexpected document skeleton {skeleton!r}")
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        + skeleton[: -len(empty_input)]
        + b"<input>"
    )


def build_document(operations: Iterable[bytes]) -> bytes:
    """An ``<nds>`` document whose ``<input>`` holds the given serialised operations, in order.

    Well-formed as long as each item came from ``build_operation``.
    """
    return b"".join((_document_head(), *operations, _INPUT_CLOSE))


@functools.cache
def _heartbeat_status() -> bytes:
    return etree.tostring(
        etree.Element("status", {"level": "success", "type": "heartbeat"}), encoding="UTF-8"
    )


def build_heartbeat() -> bytes:
    """A document that says only that the publisher is alive."""
    return build_document((_heartbeat_status(),))
