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
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata

import pyarrow as pa
import pyarrow.compute as pc

from publisher.model.operation import AttrChange, Operation, OperationKind, Value
from publisher.model.values import XML_REFUSED_BYTES, ValueType, column_bytes, xml_problem

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


DANGLING_REFERENCE = b'<value type="dn">'
"""How a document spells a reference to an object that does not exist: without association-ref."""


def _value(value: Value) -> str:
    opened = _VALUE_OPEN[value.type]
    if value.association_ref is not None:
        opened += f' association-ref="{_attr(value.association_ref)}"'
    if value.text is None:
        return opened + "/>"
    return f"{opened}>{_text(value.text)}</value>"


def _values(change: AttrChange) -> str:
    assert change.add is not None
    return _value(change.add) + "".join([_value(v) for v in change.more])


def _add_body(attrs: tuple[AttrChange, ...]) -> str:
    for attr in attrs:
        if attr.remove_all or attr.remove is not None:
            raise ValueError(f"an add operation cannot remove values (attribute {attr.name!r})")
    return "".join(
        [f'<add-attr attr-name="{_name(a.name)}">{_values(a)}</add-attr>' for a in attrs if a.add is not None]
    )


def _modify_body(attrs: tuple[AttrChange, ...]) -> str:
    return "".join(
        [
            f'<modify-attr attr-name="{_name(a.name)}">'
            f'{"<remove-all-values/>" if a.remove_all else ""}'
            f'{"" if a.remove is None else "<remove-value>" + _value(a.remove) + "</remove-value>"}'
            f'{"" if a.add is None else "<add-value>" + _values(a) + "</add-value>"}'
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
        for part, value in (("removed", attr.remove), ("added", attr.add), *(("added", v) for v in attr.more)):
            if value is not None:
                yield f"{part} value of attribute {attr.name!r}", value.text


def _refusal(op: Operation, xml: str) -> ValueError:
    return refusal(op.event_id, _texts(op), xml)


def refusal(event_id: int, texts: Iterable[tuple[str, str | None]], xml: str) -> ValueError:
    """Why operation `event_id` cannot be serialised: the first of its named `texts` XML cannot
    carry, else the serialisation `xml` itself."""
    for what, text in texts:
        problem = None if text is None else xml_problem(text)
        if problem is not None:
            return ValueError(f"operation {event_id}: {what} {problem}")
    return ValueError(f"operation {event_id}: serialisation {xml_problem(xml)}")


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


def document_parts() -> tuple[bytes, bytes]:
    """What comes before a document's operations and what after them."""
    return _document_head(), _INPUT_CLOSE


def build_document(operations: Iterable[bytes]) -> bytes:
    """An ``<nds>`` document whose ``<input>`` holds the given serialised operations, in order.

    Well-formed as long as each item came from ``build_operation``.
    """
    return b"".join((_document_head(), *operations, _INPUT_CLOSE))


_OPERATION_OPENS = {kind.value: f'<{kind.value} class-name="'.encode() for kind in OperationKind}


def operation_kinds(document: bytes) -> dict[str, int]:
    """How many operations of each kind a document holds: its texts are escaped, so an
    operation's opening tag appears nowhere else."""
    return {kind: document.count(opening) for kind, opening in _OPERATION_OPENS.items()}


_HEARTBEAT_STATUS = b'<status level="success" type="heartbeat"/>'


def build_heartbeat() -> bytes:
    """A document that says only that the publisher is alive."""
    return build_document((_HEARTBEAT_STATUS,))


# The same shapes over Arrow columns, for many operations at once (`rules.columnar`); a property
# in the tests holds them equal to `build_operation`. Names (class, attribute, value type) come
# from the catalog and repeat, so they are escaped once per distinct name.


_ESCAPED_IN_TEXT = "[&<>\r]"
_ESCAPED_BYTES = b"&<>\r"
_NEITHER = bytes(sorted(set(range(256)) - set(_ESCAPED_BYTES) - set(XML_REFUSED_BYTES)))


def _special_bytes(texts: pa.Array) -> bytes | None:
    """The bytes of a string column's texts that may begin a character to escape or to refuse,
    kept from one pass over the column's data (None: a column of another type, to be searched).
    Most columns hold none, and this pass costs a quarter of one search of every text."""
    return column_bytes(texts, _NEITHER)


def _column_text(texts: pa.Array) -> pa.Array:
    """`_text` over a string column. Few texts hold a character to escape, and a replacement
    pass costs several times a search: only the rows that hold one are replaced, and a column
    whose bytes hold none is not searched."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    special = _special_bytes(texts)
    if special is not None and not special.translate(None, XML_REFUSED_BYTES):
        return texts
    needs = pc.fill_null(pc.match_substring_regex(texts, _ESCAPED_IN_TEXT), False)
    if not pc.any(needs).as_py():
        return texts
    escaped = pc.filter(texts, needs)
    for old, new in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("\r", "&#13;")):
        escaped = pc.replace_substring(escaped, old, new)
    return pc.replace_with_mask(texts, needs, escaped)


def _column_names(names: pa.Array | pa.ChunkedArray, escape: Callable[[str], str]) -> pa.Array:
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    encoded = names.dictionary_encode()
    escaped = pa.array([escape(name) for name in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(escaped, encoded.indices)


def column_values(value_types: pa.Array, texts: pa.Array, association_refs: pa.Array | None = None) -> pa.Array:
    """`_value` per row where `texts` is not null, else null; a row whose `association_refs`
    is not null as a reference's value, with its association-ref."""
    opens = _column_names(value_types, lambda t: _VALUE_OPEN[ValueType(t)])
    if association_refs is not None:
        refs = pc.binary_join_element_wise(' association-ref="', _column_names(association_refs, _attr), '"', "")
        opens = pc.binary_join_element_wise(opens, pc.fill_null(refs, ""), "")
    return pc.binary_join_element_wise(opens, ">", _column_text(texts), "</value>", "")


def column_attr_changes(
    kinds: pa.Array, names: pa.Array, value_types: pa.Array, remove_all: pa.Array, removes: pa.Array, adds: pa.Array
) -> pa.Array:
    """Each row's attribute change as its operation's body holds it: `add` rows as `_add_body`,
    others as `_modify_body` writes one AttrChange ("" for an empty one, or for an add with no
    value). `kinds` holds OperationKind values; `removes` and `adds` texts or null."""
    return column_value_changes(
        kinds, names, remove_all, column_values(value_types, removes), column_values(value_types, adds)
    )


_NO_TEXT = pa.scalar(None, pa.string())


def column_value_changes(
    kinds: pa.Array, names: pa.Array, remove_all: pa.Array, removes: pa.Array, adds: pa.Array
) -> pa.Array:
    """`column_attr_changes` of values already serialised (`column_values`): `removes` one
    `<value>` or null, `adds` one or several joined (`_values`: every value of a multi-valued
    attribute) or null."""
    name = _column_names(names, _attr)
    is_add = pc.equal(kinds, OperationKind.ADD.value)
    has_remove, has_add = pc.is_valid(removes), pc.is_valid(adds)
    add = pc.and_(is_add, has_add)
    modify = pc.and_(
        pc.and_(pc.invert(is_add), pc.not_equal(kinds, OperationKind.DELETE.value)),
        pc.or_(remove_all, pc.or_(has_remove, has_add)),
    )
    removing, adding = pc.and_(modify, has_remove), pc.and_(modify, has_add)
    # One join, each row's pieces chosen by its kind: an added value is copied once (an add's
    # removed value, which it does not write, is left out).
    joined = pc.binary_join_element_wise(
        pc.if_else(add, '<add-attr attr-name="', '<modify-attr attr-name="'), name, '">',
        pc.if_else(pc.and_(modify, remove_all), "<remove-all-values/>", ""),
        pc.if_else(removing, "<remove-value>", ""), pc.if_else(removing, removes, _NO_TEXT),
        pc.if_else(removing, "</remove-value>", ""),
        pc.if_else(adding, "<add-value>", ""), adds, pc.if_else(adding, "</add-value>", ""),
        pc.if_else(add, "</add-attr>", "</modify-attr>"), "",
        null_handling="replace", null_replacement="",
    )
    return pc.if_else(pc.or_(add, modify), joined, "")


def column_operations(
    kinds: pa.Array | str, class_names: pa.Array | str, event_ids: pa.Array, associations: pa.Array,
    *bodies: pa.Array | str,
) -> pa.Array:
    """`build_operation` per row, as a string column; its body is its operation's attribute
    changes, joined from the `bodies` in order (columns, or a text every row holds). `kinds`
    and `class_names` may be one for every row. Whether the result is text XML can carry is
    `column_refused`'s to say."""
    names = _name(class_names) if isinstance(class_names, str) else _column_names(class_names, _name)
    pieces: list[pa.Array | str] = []
    for piece in ("<", kinds, ' class-name="', names, '" event-id="', pc.cast(event_ids, pa.string()),
                  '"><association>', _column_text(associations), "</association>", *bodies, "</", kinds, ">"):
        if isinstance(piece, str) and pieces and isinstance(pieces[-1], str):
            pieces[-1] += piece  # texts every row holds side by side, joined once: the join costs each piece
        else:
            pieces.append(piece)
    return pc.binary_join_element_wise(*pieces, "")


def column_whole_values(
    kind: OperationKind, name: str, value_type: ValueType, texts: pa.Array,
) -> tuple[pa.Array | str, ...]:
    """Attribute `name` given exactly the one value in `texts` (null: NULL, no value), per row,
    as an operation of `kind` writes it when it replaces every value (`_modify_body`, every
    value removed first) or adds them (`_add_body`): the fragment the per-row shapes write is
    cut around the value's text, so the two cannot differ. Given as pieces of the operation's
    join (`column_operations`): where no text is null, the text before the value, the values
    and the text after, so that the values are copied once, into the operation; else one
    column of fragments."""
    mark = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in name)
    if kind is OperationKind.ADD:
        filled = _add_body((AttrChange(name, add=Value(value_type, mark)),))
        empty = _add_body((AttrChange(name),))
    else:
        filled = _modify_body((AttrChange(name, remove_all=True, add=Value(value_type, mark)),))
        empty = _modify_body((AttrChange(name, remove_all=True),))
    before, after = filled.split(mark)
    if texts.null_count == len(texts):
        return (empty,)
    escaped = _column_text(texts)
    if texts.null_count == 0:
        return before, escaped, after
    return (pc.fill_null(pc.binary_join_element_wise(before, escaped, after, ""), empty),)


_REFUSED = "[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]"


def column_refused(xml: pa.Array) -> pa.Array:
    """True where a column_operations text holds a character XML 1.0 cannot carry (a string
    column holds no lone surrogate), as `_xml_utf8` refuses it; null where it is null. A column
    whose bytes begin no such character is not searched."""
    if isinstance(xml, pa.ChunkedArray):
        xml = xml.combine_chunks()
    special = _special_bytes(xml)
    if special is not None and not special.translate(None, _ESCAPED_BYTES):
        return pc.if_else(pc.is_valid(xml), False, pa.scalar(None, pa.bool_()))
    return pc.match_substring_regex(xml, _REFUSED)
