"""Building one operation from a merged group of events, without Spark."""
from __future__ import annotations

from lxml import etree
from oracle.operations import build_operation_xml, operation_kind

from publisher.model.catalog import ColumnInfo, TableInfo
from publisher.model.operation import OperationKind
from publisher.model.values import ValueType
from publisher.rules.operations import OperationContext

USR = TableInfo(
    "usr",
    (
        ColumnInfo("idu", ValueType.INT, True),
        ColumnInfo("fname", ValueType.STRING, False),
        ColumnInfo("photo", ValueType.OCTET, False),
    ),
)
CTX = OperationContext({"usr": USR}, "indirect")


def unit(event_type, attr=None, value_type=None, old=None, new=None, record_id=1):
    return {"position": {"time": None, "record_id": record_id}, "effective_type": event_type, "attr_name": attr,
            "value_type": value_type, "old_text": old, "new_text": new}


def group(kind, *units, row=None):
    return {"class_name": "usr", "canonical_key": "idu=1", "kind": kind, "position": units[0]["position"],
            "units": list(units), "row": row}


def test_kinds():
    assert operation_kind(1) is OperationKind.ADD
    assert operation_kind(4) is OperationKind.DELETE
    assert [operation_kind(t) for t in (2, 3, 5, 6, 7, 8)] == [OperationKind.MODIFY] * 6
    assert operation_kind(5, "add") is OperationKind.ADD
    assert operation_kind(6, "add") is OperationKind.MODIFY


def test_field_query_back_of_a_null_value_publishes_no_operation():
    assert build_operation_xml(group("modify", unit(7, "fname", "string"), row=[("fname", None)]), CTX) is None
    assert build_operation_xml(group("add", unit(1, "fname", "string")), CTX) is not None


def test_type_8_of_a_null_value_still_removes_all_values():
    xml = build_operation_xml(group("modify", unit(8, "fname", "string"), row=[("fname", None)]), CTX)
    element = etree.fromstring(xml)
    assert element.find("modify-attr/remove-all-values") is not None
    assert element.find("modify-attr/add-value") is None


def test_row_query_back_reads_value_columns_in_table_order():
    xml = build_operation_xml(group("modify", unit(6), row=[("photo", "qqo="), ("fname", "Ann")]), CTX)
    element = etree.fromstring(xml)
    assert [m.get("attr-name") for m in element.findall("modify-attr")] == ["fname", "photo"]
    assert element.find("modify-attr[@attr-name='photo']/add-value/value").get("type") == "octet"
    assert element.get("event-id") == "1"
    assert element.findtext("association") == "idu=1,table=usr,schema=indirect"


def test_merged_group_keeps_event_order_and_first_event_id():
    xml = build_operation_xml(
        group(
            "modify",
            unit(2, "fname", "string", "a", "b", record_id=4),
            unit(3, "fname", "string", "b", "c", record_id=9),
        ),
        CTX,
    )
    element = etree.fromstring(xml)
    assert element.get("event-id") == "4"
    attrs = element.findall("modify-attr")
    assert [a.findtext("add-value/value") for a in attrs] == ["b", "c"]
    assert attrs[0].findtext("remove-value/value") == "a"
    assert attrs[1].find("remove-all-values") is not None
