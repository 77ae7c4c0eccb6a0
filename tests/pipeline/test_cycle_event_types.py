"""Every event type end to end on a real database, against the XML the spec prescribes.

Expected XML is written by hand from the XDS rules (docs/concepts/xds.md) and the vendor examples (seed 004, tables
5-16 to 5-20); each scenario uses its own object so one polling cycle covers several.
"""
from __future__ import annotations

import base64
import calendar
import datetime as dt

from conftest import spark_on_one_database
from harness import Harness
from lxml import etree
from xml_compare import assert_same_xml

UTC = dt.timezone.utc






def xml(snippet: str) -> etree._Element:
    return etree.fromstring(snippet)


def epoch(*fields: int) -> str:
    """Seconds since the epoch of a UTC (year, month, day, hour, minute, second)."""
    return str(calendar.timegm((*fields, 0, 0, 0)))


def assert_operations(harness: Harness, expected: list[tuple[int, str]]) -> None:
    """The newly published operations are exactly `expected`: (event-id, hand-written XML) in order."""
    ops = harness.published().operations
    assert [int(op.get("event-id")) for op in ops] == [event_id for event_id, _ in expected]
    for op, (_, snippet) in zip(ops, expected):
        assert_same_xml(op, xml(snippet))


@spark_on_one_database("postgresql")
def test_each_event_type_alone_publishes_the_vendor_operation(harness):
    """Types 1-8, each on an object of its own, in one cycle: seed tables 5-16 to 5-20 plus 6, 7, 8."""
    # Tables 5-16..5-20 all use idu=1; here each type gets its own idu so they do not merge.
    # Type 1-4 carry their values (no row needed); 5-8 read the row as it is now.
    harness.insert_usr(5, fname="John", lname="Doe", photo=b"\xbb\xbb")  # the row after the update
    harness.insert_usr(6, fname="John", lname="Doe", photo=b"\xbb\xbb", age=41)
    harness.insert_usr(7, fname="Jane", lname="Roe")
    harness.insert_usr(8, fname="Jane", lname="Roe")
    ids = harness.log(
        (1, "usr", "idu=1", "fname", None, "Jack"),  # table 5-16
        (1, "usr", "idu=1", "lname", None, "Frost"),
        (1, "usr", "idu=1", "photo", None, "qqo="),
        (2, "usr", "idu=2", "fname", "Jack", "John"),  # table 5-17
        (2, "usr", "idu=2", "lname", "Frost", "Doe"),
        (2, "usr", "idu=2", "photo", "qqo=", "u7s="),
        (3, "usr", "idu=3", "fname", "Jack", "John"),  # table 5-18
        (3, "usr", "idu=3", "lname", "Frost", "Doe"),
        (3, "usr", "idu=3", "photo", "qqo=", "u7s="),
        (4, "usr", "idu=4"),  # table 5-19
        (5, "usr", "idu=5"),  # table 5-20
        (6, "usr", "idu=6"),
        (7, "usr", "idu=7", "fname"),
        (8, "usr", "idu=8", "lname"),
    )
    result = harness.poll()
    assert (result.events, result.operations, result.documents) == (14, 8, 1)
    a = harness.association
    assert_operations(harness, [
        (ids[0], f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="fname"><value type="string">Jack</value></add-attr>
            <add-attr attr-name="lname"><value type="string">Frost</value></add-attr>
            <add-attr attr-name="photo"><value type="octet">qqo=</value></add-attr></add>"""),
        (ids[3], f"""<modify class-name="usr"><association>{a('idu=2')}</association>
            <modify-attr attr-name="fname">
              <remove-value><value type="string">Jack</value></remove-value>
              <add-value><value type="string">John</value></add-value></modify-attr>
            <modify-attr attr-name="lname">
              <remove-value><value type="string">Frost</value></remove-value>
              <add-value><value type="string">Doe</value></add-value></modify-attr>
            <modify-attr attr-name="photo">
              <remove-value><value type="octet">qqo=</value></remove-value>
              <add-value><value type="octet">u7s=</value></add-value></modify-attr></modify>"""),
        (ids[6], f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">John</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Doe</value></add-value></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/>
              <add-value><value type="octet">u7s=</value></add-value></modify-attr></modify>"""),
        (ids[9], f"""<delete class-name="usr"><association>{a('idu=4')}</association></delete>"""),
        # Table 5-20, plus the columns the seed elides ("--..."), which are NULL here.
        (ids[10], f"""<modify class-name="usr"><association>{a('idu=5')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">John</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Doe</value></add-value></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/>
              <add-value><value type="octet">u7s=</value></add-value></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
        (ids[11], f"""<modify class-name="usr"><association>{a('idu=6')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">John</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Doe</value></add-value></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/>
              <add-value><value type="octet">u7s=</value></add-value></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/>
              <add-value><value type="int">41</value></add-value></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
        (ids[12], f"""<modify class-name="usr"><association>{a('idu=7')}</association>
            <modify-attr attr-name="fname">
              <add-value><value type="string">Jane</value></add-value></modify-attr></modify>"""),
        (ids[13], f"""<modify class-name="usr"><association>{a('idu=8')}</association>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Roe</value></add-value></modify-attr></modify>"""),
    ])
    assert harness.statuses() == {i: "S" for i in ids}


@spark_on_one_database("mariadb")
def test_null_values_publish_no_value(harness):
    harness.insert_usr(4, fname="Ann")  # lname NULL now
    harness.insert_usr(5)  # every non-key column NULL
    ids = harness.log(
        (1, "usr", "idu=1", "fname", None, None),  # NULL new value: no add-attr
        (1, "usr", "idu=1", "lname", None, "Frost"),
        (1, "usr", "idu=1", "age", None, None),
        (2, "usr", "idu=2", "fname", None, "John"),  # NULL old: add-value only
        (2, "usr", "idu=2", "lname", "Frost", None),  # NULL new: remove-value only
        (3, "usr", "idu=3", "fname", "Jack", None),  # remove-all-values alone
        (8, "usr", "idu=4", "lname"),  # NULL current: remove-all-values alone
        (6, "usr", "idu=5"),  # all NULL: remove-all-values alone per column
        (1, "usr", "idu=6", "fname", None, None),  # an add whose every value is NULL
    )
    harness.poll()
    a = harness.association
    assert_operations(harness, [
        (ids[0], f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="lname"><value type="string">Frost</value></add-attr></add>"""),
        (ids[3], f"""<modify class-name="usr"><association>{a('idu=2')}</association>
            <modify-attr attr-name="fname"><add-value><value type="string">John</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-value><value type="string">Frost</value></remove-value>
            </modify-attr></modify>"""),
        (ids[5], f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="fname"><remove-all-values/></modify-attr></modify>"""),
        (ids[6], f"""<modify class-name="usr"><association>{a('idu=4')}</association>
            <modify-attr attr-name="lname"><remove-all-values/></modify-attr></modify>"""),
        (ids[7], f"""<modify class-name="usr"><association>{a('idu=5')}</association>
            <modify-attr attr-name="fname"><remove-all-values/></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
        (ids[8], f"""<add class-name="usr"><association>{a('idu=6')}</association></add>"""),
    ])
    assert harness.statuses() == {i: "S" for i in ids}


def test_insert_row_operation_add_makes_type_5_an_add(spark, database, tmp_path):
    harness = Harness(spark, database, tmp_path, insert_row_operation="add")
    harness.create_usr()
    harness.create_event_log()
    harness.insert_usr(1, fname="John", photo=b"\xbb\xbb", age=0)  # lname, active, born NULL
    harness.insert_usr(2, fname="Ann")
    ids = harness.log((5, "usr", "idu=1"), (6, "usr", "idu=2"))
    harness.poll()
    a = harness.association
    assert_operations(harness, [
        (ids[0], f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="fname"><value type="string">John</value></add-attr>
            <add-attr attr-name="photo"><value type="octet">u7s=</value></add-attr>
            <add-attr attr-name="age"><value type="int">0</value></add-attr></add>"""),
        # The option is about inserts: a type 6 stays the vendor's modify.
        (ids[1], f"""<modify class-name="usr"><association>{a('idu=2')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">Ann</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
    ])
    assert harness.statuses() == {i: "S" for i in ids}


def test_every_value_type_logged_and_queried_back(harness):
    plus_two = dt.timezone(dt.timedelta(hours=2))
    harness.insert_usr(4, fname="Ann", lname="Lee", photo=b"\x00\xff\x10", age=30, active=True,
               born=dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC))
    harness.insert_usr(5, fname="Bob", photo=b"\xaa\xaa", age=0, active=False,
               born=dt.datetime(2010, 7, 8, 9, 10, 11, tzinfo=plus_two))
    harness.insert_usr(6, fname="Cy", photo=b"\xbb\xbb", age=-5, active=True,
               born=dt.datetime(1969, 12, 31, 23, 59, 0, tzinfo=UTC))
    ids = harness.log(
        # logged values (types 1-3): bool as 1/0/true/false, time as ISO text, UTC unless offset
        (1, "usr", "idu=1", "fname", None, "Jack"),
        (1, "usr", "idu=1", "photo", None, "qqo="),
        (1, "usr", "idu=1", "age", None, "42"),
        (1, "usr", "idu=1", "active", None, "1"),
        (1, "usr", "idu=1", "born", None, "2024-01-02 03:04:05"),
        (2, "usr", "idu=2", "photo", "qqo=", "u7s="),
        (2, "usr", "idu=2", "age", "41", "42"),
        (2, "usr", "idu=2", "active", "0", "true"),
        (2, "usr", "idu=2", "born", "2024-01-02 03:04:05+02", "2024-06-30 23:59:59"),
        (3, "usr", "idu=3", "age", "1", "-7"),
        (3, "usr", "idu=3", "active", "true", "false"),
        (3, "usr", "idu=3", "born", None, "1999-12-31 23:00:00-05"),
        # query-back values (types 5, 7, 8): read from the table, typed by the column
        (5, "usr", "idu=4"),
        (7, "usr", "idu=5", "photo"),
        (7, "usr", "idu=5", "age"),
        (7, "usr", "idu=5", "active"),
        (7, "usr", "idu=5", "born"),
        (8, "usr", "idu=6", "photo"),
        (8, "usr", "idu=6", "age"),
        (8, "usr", "idu=6", "active"),
        (8, "usr", "idu=6", "born"),
    )
    harness.poll()
    a = harness.association
    photo4 = base64.b64encode(b"\x00\xff\x10").decode()
    assert_operations(harness, [
        (ids[0], f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="fname"><value type="string">Jack</value></add-attr>
            <add-attr attr-name="photo"><value type="octet">qqo=</value></add-attr>
            <add-attr attr-name="age"><value type="int">42</value></add-attr>
            <add-attr attr-name="active"><value type="state">true</value></add-attr>
            <add-attr attr-name="born"><value type="time">{epoch(2024, 1, 2, 3, 4, 5)}</value></add-attr>
            </add>"""),
        (ids[5], f"""<modify class-name="usr"><association>{a('idu=2')}</association>
            <modify-attr attr-name="photo">
              <remove-value><value type="octet">qqo=</value></remove-value>
              <add-value><value type="octet">u7s=</value></add-value></modify-attr>
            <modify-attr attr-name="age">
              <remove-value><value type="int">41</value></remove-value>
              <add-value><value type="int">42</value></add-value></modify-attr>
            <modify-attr attr-name="active">
              <remove-value><value type="state">false</value></remove-value>
              <add-value><value type="state">true</value></add-value></modify-attr>
            <modify-attr attr-name="born">
              <remove-value><value type="time">{epoch(2024, 1, 2, 1, 4, 5)}</value></remove-value>
              <add-value><value type="time">{epoch(2024, 6, 30, 23, 59, 59)}</value></add-value></modify-attr>
            </modify>"""),
        (ids[9], f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="age"><remove-all-values/>
              <add-value><value type="int">-7</value></add-value></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/>
              <add-value><value type="state">false</value></add-value></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/>
              <add-value><value type="time">{epoch(2000, 1, 1, 4, 0, 0)}</value></add-value></modify-attr>
            </modify>"""),
        (ids[12], f"""<modify class-name="usr"><association>{a('idu=4')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">Ann</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Lee</value></add-value></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/>
              <add-value><value type="octet">{photo4}</value></add-value>
            </modify-attr>
            <modify-attr attr-name="age"><remove-all-values/>
              <add-value><value type="int">30</value></add-value></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/>
              <add-value><value type="state">true</value></add-value></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/>
              <add-value><value type="time">{epoch(2001, 2, 3, 4, 5, 6)}</value></add-value></modify-attr>
            </modify>"""),
        (ids[13], f"""<modify class-name="usr"><association>{a('idu=5')}</association>
            <modify-attr attr-name="photo"><add-value><value type="octet">qqo=</value></add-value></modify-attr>
            <modify-attr attr-name="age"><add-value><value type="int">0</value></add-value></modify-attr>
            <modify-attr attr-name="active"><add-value><value type="state">false</value></add-value></modify-attr>
            <modify-attr attr-name="born">
              <add-value><value type="time">{epoch(2010, 7, 8, 7, 10, 11)}</value></add-value></modify-attr>
            </modify>"""),
        (ids[17], f"""<modify class-name="usr"><association>{a('idu=6')}</association>
            <modify-attr attr-name="photo"><remove-all-values/>
              <add-value><value type="octet">u7s=</value></add-value></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/>
              <add-value><value type="int">-5</value></add-value></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/>
              <add-value><value type="state">true</value></add-value></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/>
              <add-value><value type="time">{epoch(1969, 12, 31, 23, 59, 0)}</value></add-value></modify-attr>
            </modify>"""),
    ])
    assert harness.statuses() == {i: "S" for i in ids}
