from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hunting import budget
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lxml import etree
from xml_compare import assert_same_xml

import publisher
from publisher.model import xds
from publisher.model.operation import AttrChange, Operation, OperationKind, Value, association
from publisher.model.values import ValueType
from publisher.model.xds import build_document, build_heartbeat, build_operation

CASES = Path(__file__).parent / "cases"
ASSOCIATION = "idu=1,table=usr,schema=indirect"


def string(text: str) -> Value:
    return Value(ValueType.STRING, text)


def octet(text: str) -> Value:
    return Value(ValueType.OCTET, text)


def seed_operations() -> dict[str, Operation]:
    """The five examples of seed 004, tables 5-16 to 5-20."""
    query_back = (
        AttrChange("fname", remove_all=True, add=string("John")),
        AttrChange("lname", remove_all=True, add=string("Doe")),
        AttrChange("photo", remove_all=True, add=octet("u7s=")),
    )
    return {
        "seed_5_16": Operation(
            OperationKind.ADD,
            "usr",
            ASSOCIATION,
            1,
            (
                AttrChange("fname", add=string("Jack")),
                AttrChange("lname", add=string("Frost")),
                AttrChange("photo", add=octet("qqo=")),
            ),
        ),
        "seed_5_17": Operation(
            OperationKind.MODIFY,
            "usr",
            ASSOCIATION,
            4,
            (
                AttrChange("fname", remove=string("Jack"), add=string("John")),
                AttrChange("lname", remove=string("Frost"), add=string("Doe")),
                AttrChange("photo", remove=octet("qqo="), add=octet("u7s=")),
            ),
        ),
        "seed_5_18": Operation(OperationKind.MODIFY, "usr", ASSOCIATION, 7, query_back),
        "seed_5_19": Operation(OperationKind.DELETE, "usr", ASSOCIATION, 10),
        "seed_5_20": Operation(OperationKind.MODIFY, "usr", ASSOCIATION, 11, query_back),
    }


def parse(xml: bytes) -> etree._Element:
    return etree.fromstring(xml)


def test_association_format() -> None:
    assert association("idu=1", "usr", "indirect") == ASSOCIATION


@pytest.mark.parametrize("case", sorted(seed_operations()))
def test_seed_examples(case: str) -> None:
    op = seed_operations()[case]
    built = build_operation(op)
    assert_same_xml(built, (CASES / f"{case}.xml").read_bytes())
    assert parse(built).get("event-id") == str(op.event_id)


def test_operation_attribute_order_and_no_declaration() -> None:
    built = build_operation(seed_operations()["seed_5_19"])
    assert built.startswith(b'<delete class-name="usr" event-id="10">')


def test_null_new_value_in_add_omits_attribute() -> None:
    op = Operation(
        OperationKind.ADD,
        "usr",
        ASSOCIATION,
        5,
        (AttrChange("fname", add=string("Jack")), AttrChange("lname", add=None)),
    )
    expected = (
        b'<add class-name="usr"><association>idu=1,table=usr,schema=indirect</association>'
        b'<add-attr attr-name="fname"><value type="string">Jack</value></add-attr></add>'
    )
    assert_same_xml(build_operation(op), expected)


def test_add_with_only_null_values_keeps_association() -> None:
    op = Operation(OperationKind.ADD, "usr", ASSOCIATION, 5, (AttrChange("fname"),))
    assert_same_xml(
        build_operation(op),
        b'<add class-name="usr"><association>idu=1,table=usr,schema=indirect</association></add>',
    )


def test_modify_remove_all_without_add_is_remove_all_alone() -> None:
    op = Operation(
        OperationKind.MODIFY, "usr", ASSOCIATION, 8, (AttrChange("fname", remove_all=True),)
    )
    expected = (
        b'<modify class-name="usr"><association>idu=1,table=usr,schema=indirect</association>'
        b'<modify-attr attr-name="fname"><remove-all-values/></modify-attr></modify>'
    )
    assert_same_xml(build_operation(op), expected)


def test_modify_parts_in_order_and_empty_attr_omitted() -> None:
    op = Operation(
        OperationKind.MODIFY,
        "usr",
        ASSOCIATION,
        8,
        (
            AttrChange("empty"),
            AttrChange("fname", remove_all=True, remove=string("Jack"), add=string("John")),
        ),
    )
    root = parse(build_operation(op))
    assert [c.tag for c in root] == ["association", "modify-attr"]
    assert [c.tag for c in root[1]] == ["remove-all-values", "remove-value", "add-value"]


def test_add_cannot_remove_and_delete_has_no_attrs() -> None:
    with pytest.raises(ValueError, match="fname"):
        build_operation(
            Operation(OperationKind.ADD, "usr", ASSOCIATION, 1, (AttrChange("fname", True),))
        )
    with pytest.raises(ValueError):
        build_operation(
            Operation(OperationKind.DELETE, "usr", ASSOCIATION, 1, (AttrChange("fname"),))
        )


def test_special_characters_are_escaped() -> None:
    nasty = "<&>\"' ]]> é\U0001f600"
    op = Operation(
        OperationKind.MODIFY,
        f"t{nasty}",
        association(f'k="{nasty}"', "t", "s"),
        3,
        (AttrChange(f"c{nasty}", remove=string(nasty), add=Value(ValueType.STRING, nasty)),),
    )
    built = build_operation(op)
    assert b"<&>" not in built
    root = parse(built)
    assert root.get("class-name") == f"t{nasty}"
    assert root.findtext("association") == f'k="{nasty}",table=t,schema=s'
    modify_attr = root.find("modify-attr")
    assert modify_attr is not None
    assert modify_attr.get("attr-name") == f"c{nasty}"
    assert modify_attr.findtext("remove-value/value") == nasty
    assert modify_attr.findtext("add-value/value") == nasty


def test_xml_invalid_character_is_refused() -> None:
    op = Operation(OperationKind.DELETE, "usr", "idu=\x01", 1)
    with pytest.raises(ValueError):
        build_operation(op)


def test_document_wraps_operations_in_order() -> None:
    ops = seed_operations()
    built = [build_operation(op) for op in ops.values()]
    document = build_document(built)
    assert document.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')
    root = etree.fromstring(document)
    assert root.tag == "nds"
    assert root.get("dtdversion") == "4.0"
    assert root.findtext("source/product") == "Event Log Publisher"
    assert root.xpath("string(source/product/@version)")
    assert root.findtext("source/contact") == "event-log-publisher"
    operations = root.find("input")
    assert operations is not None
    assert [op.get("event-id") for op in operations] == [str(op.event_id) for op in ops.values()]
    for element, name in zip(operations, ops):
        assert_same_xml(element, (CASES / f"{name}.xml").read_bytes())


def test_document_accepts_a_generator_and_an_empty_batch() -> None:
    ops = seed_operations().values()
    root = etree.fromstring(build_document(build_operation(op) for op in ops))
    assert len(root.findall("input/*")) == len(ops)
    assert etree.fromstring(build_document([])).findall("input/*") == []


def test_heartbeat() -> None:
    root = etree.fromstring(build_heartbeat())
    assert root.tag == "nds"
    status = root.find("input/status")
    assert status is not None
    assert status.items() == [("level", "success"), ("type", "heartbeat")]
    assert len(root.findall("input/*")) == 1


class TestComparer:
    EXPECTED = (CASES / "seed_5_17.xml").read_bytes()

    def built(self) -> bytes:
        return build_operation(seed_operations()["seed_5_17"])

    def test_equal_passes(self) -> None:
        assert_same_xml(self.built(), self.EXPECTED)

    def test_changed_text_fails_with_path(self) -> None:
        root = parse(self.built())
        root[2][1][0].text = "Do"
        with pytest.raises(AssertionError) as error:
            assert_same_xml(root, self.EXPECTED)
        assert str(error.value) == "/modify/modify-attr[2]/add-value/value: text 'Do' != 'Doe'"

    def test_missing_child_fails(self) -> None:
        root = parse(self.built())
        root.remove(root[3])
        with pytest.raises(AssertionError, match=r"^/modify/modify-attr\[3\]: missing"):
            assert_same_xml(root, self.EXPECTED)

    def test_extra_child_fails(self) -> None:
        root = parse(self.built())
        etree.SubElement(root[1], "remove-all-values")
        with pytest.raises(AssertionError, match=r"^/modify/modify-attr\[1\]/remove-all-values"):
            assert_same_xml(root, self.EXPECTED)

    def test_extra_attribute_fails(self) -> None:
        root = parse(self.built())
        root[1].set("extra", "1")
        with pytest.raises(AssertionError, match=r"^/modify/modify-attr\[1\]: attributes"):
            assert_same_xml(root, self.EXPECTED)

    def test_event_id_ignored_only_when_asked(self) -> None:
        with pytest.raises(AssertionError, match="event-id"):
            assert_same_xml(self.built(), self.EXPECTED, ignore_attrs=())

    def test_changed_tag_fails(self) -> None:
        with pytest.raises(AssertionError, match="^/modify: tag 'add' != 'modify'"):
            assert_same_xml(b"<add/>", self.EXPECTED)


def lxml_operation(op: Operation) -> bytes:
    """The operation serialised through an lxml tree: the oracle the templates must match."""
    sub = etree.SubElement

    def value(parent: etree._Element, v: Value) -> None:
        attributes = {"type": v.type.value}
        if v.association_ref is not None:
            attributes["association-ref"] = v.association_ref
        sub(parent, "value", attributes).text = v.text

    def values(parent: etree._Element, attr: AttrChange) -> None:
        assert attr.add is not None
        for v in (attr.add, *attr.more):
            value(parent, v)

    root = etree.Element(op.kind.value, {"class-name": op.class_name, "event-id": str(op.event_id)})
    sub(root, "association").text = op.association
    if op.kind is OperationKind.ADD:
        for attr in op.attrs:
            if attr.remove_all or attr.remove is not None:
                raise ValueError(f"an add operation cannot remove values (attribute {attr.name!r})")
            if attr.add is not None:
                values(sub(root, "add-attr", {"attr-name": attr.name}), attr)
    elif op.kind is OperationKind.MODIFY:
        for attr in op.attrs:
            if attr.is_empty:
                continue
            modify_attr = sub(root, "modify-attr", {"attr-name": attr.name})
            if attr.remove_all:
                sub(modify_attr, "remove-all-values")
            if attr.remove is not None:
                value(sub(modify_attr, "remove-value"), attr.remove)
            if attr.add is not None:
                values(sub(modify_attr, "add-value"), attr)
    elif op.attrs:
        raise ValueError("a delete operation carries no attributes")
    return etree.tostring(root, encoding="UTF-8")


def lxml_document_head(version: str) -> bytes:
    nds = etree.Element("nds", {"dtdversion": "4.0"})
    source = etree.SubElement(nds, "source")
    etree.SubElement(source, "product", {"version": version}).text = xds.PRODUCT_NAME
    etree.SubElement(source, "contact").text = xds.CONTACT
    etree.SubElement(nds, "input")
    skeleton = etree.tostring(nds, encoding="UTF-8")
    assert skeleton.endswith(b"<input/></nds>")
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + skeleton[: -len(b"<input/></nds>")] + b"<input>"


def outcome(build: Callable[[Operation], bytes], op: Operation) -> bytes | ValueError:
    try:
        return build(op)
    except ValueError as error:
        return error


def xml_char(c: str) -> bool:
    """The XML 1.0 Char production."""
    cp = ord(c)
    return c in "\t\n\r" or 0x20 <= cp <= 0xD7FF or 0xE000 <= cp <= 0xFFFD or cp >= 0x10000


SPECIAL = st.sampled_from(list("&<>\"'\t\n\r ;#]") + ["]]>", "&amp;", "&#13;", "\r\n", "é", "\u20ac", "\U0001f600"])
XML_TEXT = st.one_of(
    st.text().map(lambda s: "".join(c for c in s if xml_char(c))),
    st.lists(SPECIAL | st.characters().filter(xml_char)).map("".join),
)
REFUSED_CHAR = st.one_of(
    st.characters(max_codepoint=0x1F, exclude_characters="\t\n\r"),
    st.characters(categories=["Cs"]),
    st.sampled_from("\ufffe\uffff"),
)
VALUE = st.builds(Value, st.sampled_from(ValueType), XML_TEXT | st.none(),
                  st.none() | st.text().map(lambda s: "".join(c for c in s if xml_char(c))))
MORE = st.lists(VALUE, max_size=3).map(tuple)
CHANGE = st.builds(AttrChange, XML_TEXT, st.booleans(), st.none() | VALUE, st.none() | VALUE, MORE)
ADD_CHANGE = st.builds(AttrChange, XML_TEXT, add=st.none() | VALUE, more=MORE)


def operations(
    kinds: list[OperationKind], changes: st.SearchStrategy[AttrChange] | None
) -> st.SearchStrategy[Operation]:
    attrs = st.just(()) if changes is None else st.lists(changes, max_size=6).map(tuple)
    return st.builds(Operation, st.sampled_from(kinds), XML_TEXT, XML_TEXT, st.integers(), attrs)


VALID_OPERATION = st.one_of(
    operations([OperationKind.ADD], ADD_CHANGE),
    operations([OperationKind.MODIFY], CHANGE),
    operations([OperationKind.DELETE], None),
)
ANY_OPERATION = VALID_OPERATION | operations(list(OperationKind), CHANGE)


@given(ANY_OPERATION)
@example(Operation(OperationKind.MODIFY, "", "", 0, (AttrChange("", add=Value(ValueType.STRING, "")),)))
def test_templates_match_lxml_byte_for_byte(op: Operation) -> None:
    expected = outcome(lxml_operation, op)
    built = outcome(build_operation, op)
    if isinstance(expected, ValueError):
        assert isinstance(built, ValueError)
        assert str(built) == str(expected)
    else:
        assert built == expected


def serialised_texts(op: Operation) -> list[Callable[[str], Operation]]:
    """For each text lxml would serialise, a way to replace it in the operation."""
    def attr_at(i: int, **parts: object) -> Operation:
        attrs = list(op.attrs)
        attrs[i] = dataclasses.replace(attrs[i], **parts)
        return dataclasses.replace(op, attrs=tuple(attrs))

    setters: list[Callable[[str], Operation]] = [
        lambda t: dataclasses.replace(op, class_name=t),
        lambda t: dataclasses.replace(op, association=t),
    ]
    for i, attr in enumerate(op.attrs):
        if op.kind is OperationKind.ADD and attr.add is None or attr.is_empty:
            continue
        setters.append(lambda t, i=i: attr_at(i, name=t))
        for part in ("remove", "add"):
            value = getattr(attr, part)
            if value is not None:
                setters.append(lambda t, i=i, part=part, value=value: attr_at(i, **{part: Value(value.type, t)}))
    return setters


@given(VALID_OPERATION, st.data())
def test_text_lxml_refuses_is_refused(op: Operation, data: st.DataObject) -> None:
    setter = data.draw(st.sampled_from(serialised_texts(op)))
    text = data.draw(XML_TEXT)
    at = data.draw(st.integers(0, len(text)))
    hostile = setter(text[:at] + data.draw(REFUSED_CHAR) + text[at:])
    with pytest.raises(ValueError):
        lxml_operation(hostile)
    with pytest.raises(ValueError):
        build_operation(hostile)


@pytest.mark.parametrize("bad", ["\x00", "\x08", "\x0b", "\x1f", "\ud800", "\udfff", "\ufffe", "\uffff"])
def test_each_kind_of_refused_character_is_refused(bad: str) -> None:
    op = Operation(OperationKind.MODIFY, "usr", ASSOCIATION, 2, (AttrChange("a", add=string(f"x{bad}y")),))
    with pytest.raises(ValueError, match="added value of attribute 'a'"):
        build_operation(op)


def test_escapes_are_the_ones_lxml_writes() -> None:
    nasty = "&<>\"' \t\n\r]]>é\U0001f600\x7f\x85\u2028"
    op = Operation(OperationKind.MODIFY, nasty, nasty, -1, (AttrChange(nasty, add=string(nasty)),))
    built = build_operation(op)
    assert built == lxml_operation(op)
    text = "&amp;&lt;&gt;\"' \t\n&#13;]]&gt;é\U0001f600\x7f\x85\u2028".encode()
    attr = "&amp;&lt;&gt;&quot;' &#9;&#10;&#13;]]&gt;é\U0001f600\x7f\x85\u2028".encode()
    assert built.startswith(b'<modify class-name="' + attr + b'" event-id="-1"><association>' + text)
    assert b'<add-value><value type="string">' + text + b"</value></add-value>" in built


def test_empty_text_and_no_text_differ_as_in_lxml() -> None:
    for text, element in (("", b'<value type="int"></value>'), (None, b'<value type="int"/>')):
        op = Operation(OperationKind.ADD, "", "", 1, (AttrChange("", add=Value(ValueType.INT, text)),))  # type: ignore[arg-type]
        assert element in build_operation(op)
        assert build_operation(op) == lxml_operation(op)


@pytest.mark.parametrize("version", ["1.2.3", "0+unknown", "&<>\"'\t\n\ré\U0001f600"])
def test_document_head_and_heartbeat_match_lxml(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publisher, "__version__", version, raising=False)
    xds._document_head.cache_clear()
    try:
        head = lxml_document_head(version)
        assert build_document([]) == head + b"</input></nds>"
        status = etree.tostring(etree.Element("status", {"level": "success", "type": "heartbeat"}), encoding="UTF-8")
        assert build_heartbeat() == head + status + b"</input></nds>"
    finally:
        xds._document_head.cache_clear()


@settings(max_examples=budget(80))
@given(st.lists(VALID_OPERATION, max_size=30), st.integers(1, 7), st.integers(0, 3))
def test_documents_cut_from_a_column_are_those_built_from_the_operations(
    tmp_path_factory: pytest.TempPathFactory, ops: list[Operation], batch_size: int, before: int,
) -> None:
    """The documents written from a binary column (its data sliced, the kinds read from each
    operation's first letter, the dangling references counted in the column) are, byte for
    byte and in what they report, those written from the operations one by one; the column
    may begin inside its buffer (`before` operations sliced off)."""
    import pyarrow as pa

    from publisher.outputs.documents import write_documents

    built = []
    for op in ops:
        try:
            built.append(build_operation(op))
        except ValueError:
            continue
    listed, columned = tmp_path_factory.mktemp("listed"), tmp_path_factory.mktemp("columned")
    one_by_one = write_documents(built, listed, 3, batch_size, first_index=2)
    column = pa.array([b"<add/>"] * before + built, pa.binary()).slice(before)
    from_column = write_documents(column, columned, 3, batch_size, first_index=2)
    assert from_column == one_by_one
    assert sorted(p.name for p in columned.iterdir()) == sorted(p.name for p in listed.iterdir())
    for path in listed.iterdir():
        assert (columned / path.name).read_bytes() == path.read_bytes()


_SPECIAL_TEXT = st.text(st.sampled_from(["a", "é", "&", "<", ">", "\r", "\n", "\t", "\x00", "\x01", "\x1f", "\x0b",
                                         "\ufffe", "\uffff", "\uff01", "\ufeff", "中", "😀"]), max_size=6)


@given(st.lists(st.none() | _SPECIAL_TEXT, max_size=12), st.sampled_from(["string", "large_string"]), st.data())
@example([None, ""], "string", None)
def test_a_column_is_escaped_and_refused_as_each_of_its_texts_is_searched(texts, kind, data) -> None:
    """`_column_text` and `column_refused` skip the search of a column whose bytes hold no byte
    that may begin a special character: they equal the search of every text, on any slice of a
    column (oracle: the regular expressions over each text, no shortcut)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pa.array(texts, getattr(pa, kind)())
    if data is not None and texts:
        start = data.draw(st.integers(0, len(texts)))
        column = column.slice(start, data.draw(st.integers(0, len(texts) - start)))
    expected_text = [None if t is None else t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                     .replace("\r", "&#13;") for t in column.to_pylist()]
    assert xds._column_text(column).to_pylist() == expected_text
    assert xds.column_refused(column).to_pylist() == pc.match_substring_regex(column, xds._REFUSED).to_pylist()


def test_each_attribute_change_of_a_column_is_the_one_its_operation_writes() -> None:
    """`column_attr_changes` over every kind, remove-all, removed and added value (NULL, empty,
    a text to escape) equals the body the per-row shapes write for that one AttrChange; an
    add's removed value is not written (an add removes nothing)."""
    import itertools

    import pyarrow as pa

    texts = [None, "", "a&<b>\r"]
    rows = list(itertools.product(list(OperationKind), [False, True], texts, texts))
    expected = []
    for kind, remove_all, remove, add in rows:
        change = AttrChange("n&me", remove_all=remove_all, remove=None if remove is None else string(remove),
                            add=None if add is None else string(add))
        if kind is OperationKind.ADD:
            expected.append(xds._add_body((dataclasses.replace(change, remove_all=False, remove=None),)))
        elif kind is OperationKind.MODIFY:
            expected.append(xds._modify_body((change,)))
        else:
            expected.append("")
    column = xds.column_attr_changes(
        pa.array([kind.value for kind, *_ in rows]), pa.array(["n&me"] * len(rows)),
        pa.array([ValueType.STRING.value] * len(rows)), pa.array([remove_all for _, remove_all, *_ in rows]),
        pa.array([remove for *_, remove, _ in rows], pa.string()), pa.array([add for *_, add in rows], pa.string()),
    )
    assert column.to_pylist() == expected
