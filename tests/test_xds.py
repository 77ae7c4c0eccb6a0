from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree
from xml_compare import assert_same_xml

from publisher.model.operation import AttrChange, Operation, OperationKind, Value, association
from publisher.model.values import ValueType
from publisher.outputs.xds import build_document, build_heartbeat, build_operation

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
