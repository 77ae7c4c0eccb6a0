"""XDS documents: the one place that turns operations into XML.

Operations are serialised one by one (in parallel, on the workers) and documents are then
assembled from those bytes, so ``build_document`` concatenates instead of re-parsing.

Serialisation is string templates rather than an element tree: building and serialising a
tree per operation was the largest per-event cost. The output is byte for byte what lxml
(libxml2) writes for the same tree, escapes included, and text XML 1.0 cannot carry is
refused with ``ValueError`` as lxml refuses it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from importlib import metadata

from publisher.model.operation import AttrChange, Operation, OperationKind, Value
from publisher.model.values import ValueType, xml_problem

PRODUCT_NAME = "Event Log Publisher"
CONTACT = "event-log-publisher"
DISTRIBUTION = "event-log-publisher"


def _text(text: str) -> str:
    """Element text escaped as libxml2 does: it escapes ``>`` and writes CR as a reference."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


def _attr(text: str) -> str:
    """An attribute value escaped as libxml2 does: whitespace other than space is a reference,
    so a parser's attribute-value normalisation cannot change it; ``'`` is left alone."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\n", "&#10;")
        .replace("\r", "&#13;")
        .replace("\t", "&#9;")
    )


_name = functools.lru_cache(maxsize=4096)(_attr)
"""``_attr`` for class and attribute names, which repeat from one operation to the next."""


def _element(tag: str, text: str | None) -> str:
    """lxml writes an element with no text as ``<tag/>`` but one with empty text as ``<tag></tag>``."""
    if text is None:
        return f"<{tag}/>"
    return f"<{tag}>{_text(text)}</{tag}>"


_VALUE_OPEN = {t: f'<value type="{_attr(t.value)}"' for t in ValueType}


def _value(value: Value) -> str:
    if value.text is None:
        return _VALUE_OPEN[value.type] + "/>"
    return f"{_VALUE_OPEN[value.type]}>{_text(value.text)}</value>"


def _add_body(attrs: tuple[AttrChange, ...]) -> str:
    for attr in attrs:
        if attr.remove_all or attr.remove is not None:
            raise ValueError(f"an add operation cannot remove values (attribute {attr.name!r})")
    return "".join(
        [f'<add-attr attr-name="{_name(a.name)}">{_value(a.add)}</add-attr>' for a in attrs if a.add is not None]
    )


def _modify_body(attrs: tuple[AttrChange, ...]) -> str:
    return "".join(
        [
            f'<modify-attr attr-name="{_name(a.name)}">'
            f'{"<remove-all-values/>" if a.remove_all else ""}'
            f'{"" if a.remove is None else "<remove-value>" + _value(a.remove) + "</remove-value>"}'
            f'{"" if a.add is None else "<add-value>" + _value(a.add) + "</add-value>"}'
            "</modify-attr>"
            for a in attrs
            if not a.is_empty
        ]
    )


_REFUSED_ASCII = bytes(c for c in range(0x20) if chr(c) not in "\t\n\r")


def _xml_utf8(xml: str) -> bytes | None:
    """``xml`` as UTF-8, or None if it holds a character XML 1.0 cannot carry.

    The same test as ``xml_problem`` but several times cheaper on a whole operation: besides
    U+FFFE and U+FFFF, such characters are lone surrogates, which fail to encode, and C0
    controls, which ``translate`` drops.
    """
    if "\ufffe" in xml or "\uffff" in xml:
        return None
    try:
        data = xml.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if len(data.translate(None, _REFUSED_ASCII)) != len(data):
        return None
    return data


def _texts(op: Operation) -> Iterator[tuple[str, str | None]]:
    """Every text an operation carries, named, to say which one XML cannot carry."""
    yield "class name", op.class_name
    yield "association", op.association
    for attr in op.attrs:
        yield f"attribute name {attr.name!r}", attr.name
        for part, value in (("removed", attr.remove), ("added", attr.add)):
            if value is not None:
                yield f"{part} value of attribute {attr.name!r}", value.text


def _refusal(op: Operation, xml: str) -> ValueError:
    for what, text in _texts(op):
        problem = None if text is None else xml_problem(text)
        if problem is not None:
            return ValueError(f"operation {op.event_id}: {what} {problem}")
    return ValueError(f"operation {op.event_id}: serialisation {xml_problem(xml)}")


_TAG = {kind: kind.value for kind in OperationKind}


def build_operation(op: Operation) -> bytes:
    """One serialised operation element, without an XML declaration."""
    kind = _TAG[op.kind]
    if op.kind is OperationKind.ADD:
        body = _add_body(op.attrs)
    elif op.kind is OperationKind.MODIFY:
        body = _modify_body(op.attrs)
    elif op.attrs:
        raise ValueError("a delete operation carries no attributes")
    else:
        body = ""
    xml = (
        f'<{kind} class-name="{_name(op.class_name)}" event-id="{_attr(str(op.event_id))}">'
        f"{_element('association', op.association)}{body}</{kind}>"
    )
    data = _xml_utf8(xml)
    if data is None:
        raise _refusal(op, xml)
    return data


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
    """Everything up to and including ``<input>``; the version is the only part that varies."""
    version = _product_version()
    problem = xml_problem(version)
    if problem is not None:
        raise ValueError(f"product version {problem}")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<nds dtdversion="4.0"><source>'
        f'<product version="{_attr(version)}">{_text(PRODUCT_NAME)}</product>'
        f"{_element('contact', CONTACT)}</source><input>"
    ).encode("utf-8")


def build_document(operations: Iterable[bytes]) -> bytes:
    """An ``<nds>`` document whose ``<input>`` holds the given serialised operations, in order.

    Well-formed as long as each item came from ``build_operation``.
    """
    return b"".join((_document_head(), *operations, _INPUT_CLOSE))


_HEARTBEAT_STATUS = b'<status level="success" type="heartbeat"/>'


def build_heartbeat() -> bytes:
    """A document that says only that the publisher is alive."""
    return build_document((_HEARTBEAT_STATUS,))
