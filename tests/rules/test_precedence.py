"""Precedence (docs/concepts/event-types.md) and merging (docs/concepts/xds.md) end to end, with the
status every event ends up with.

Each test runs one polling cycle over several objects (one scenario per idu); expected
XML is written by hand from the spec.
"""
from __future__ import annotations

from conftest import spark_on_one_database
from harness import Harness
from lxml import etree
from xml_compare import assert_same_xml


def assert_operations(harness: Harness, expected: list[tuple[int, str]]) -> None:
    """The newly published operations are exactly `expected`: (event-id, hand-written XML) in order."""
    ops = harness.published().operations
    assert [int(op.get("event-id")) for op in ops] == [event_id for event_id, _ in expected]
    for op, (_, snippet) in zip(ops, expected):
        assert_same_xml(op, etree.fromstring(snippet))


@spark_on_one_database("sqlite")
def test_field_query_back_beats_logged_events_on_its_field_only(harness):
    harness.insert_usr(1, fname="Cur1", lname="Lee")
    harness.insert_usr(2, fname="Cur2")
    harness.insert_usr(3, fname="Cur3")
    harness.insert_usr(4, lname="Cur4")
    a4, a1, a2, a3, a5 = harness.log(
        (2, "usr", "idu=1", "lname", "Frost", "Lee"),  # another field: stands
        # beaten by the type 8 on fname; the beaten type 1 does not split the modify in two
        (1, "usr", "idu=1", "fname", None, "Jack"),
        (2, "usr", "idu=1", "fname", "Jack", "John"),  # beaten
        (3, "usr", "idu=1", "fname", "John", "Jim"),  # beaten
        (8, "usr", "idu=1", "fname"),
    )
    b1, b2, b3 = harness.log(
        (1, "usr", "idu=2", "fname", None, "Old"),  # beaten by the type 7 on fname
        (1, "usr", "idu=2", "lname", None, "Keep"),  # stands: an add of its own
        (7, "usr", "idu=2", "fname"),
    )
    c1, c2, c3 = harness.log(
        (7, "usr", "idu=3", "fname"),  # several type 7 on one field: one modify-attr at the first
        (7, "usr", "idu=3", "fname"),
        (2, "usr", "idu=3", "fname", "x", "y"),  # beaten even though logged after the query-backs
    )
    d1, d2 = harness.log(
        (7, "usr", "idu=4", "lname"),  # a 7 and an 8 on one field: one modify-attr, type-8 semantics
        (8, "usr", "idu=4", "lname"),
    )
    result = harness.poll()
    assert result.operations == 5
    a = harness.association
    assert_operations(harness, [
        (a4, f"""<modify class-name="usr"><association>{a('idu=1')}</association>
            <modify-attr attr-name="lname">
              <remove-value><value type="string">Frost</value></remove-value>
              <add-value><value type="string">Lee</value></add-value></modify-attr>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">Cur1</value></add-value></modify-attr></modify>"""),
        (b2, f"""<add class-name="usr"><association>{a('idu=2')}</association>
            <add-attr attr-name="lname"><value type="string">Keep</value></add-attr></add>"""),
        (b3, f"""<modify class-name="usr"><association>{a('idu=2')}</association>
            <modify-attr attr-name="fname">
              <add-value><value type="string">Cur2</value></add-value></modify-attr></modify>"""),
        (c1, f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="fname">
              <add-value><value type="string">Cur3</value></add-value></modify-attr></modify>"""),
        (d1, f"""<modify class-name="usr"><association>{a('idu=4')}</association>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Cur4</value></add-value></modify-attr></modify>"""),
    ])
    assert harness.statuses() == {
        a1: "S", a2: "S", a3: "S", a4: "S", a5: "S",
        b1: "S", b2: "S", b3: "S",
        c1: "S", c2: "S", c3: "S",
        d1: "S", d2: "S",
    }


@spark_on_one_database("postgresql")
def test_row_query_back_beats_fields_field_query_backs_and_a_delete(harness):
    # idu=1 was deleted and inserted again within the cycle: what counts is the row as it is now.
    harness.insert_usr(1, fname="John", lname="Doe", age=41)
    harness.insert_usr(3, fname="Ann")
    e1, e2, f1, e3, e4, e5, e6, e7, e8 = harness.log(
        (1, "usr", "idu=1", "fname", None, "Jack"),
        (2, "usr", "idu=1", "lname", "Frost", "Doe"),
        (4, "usr", "idu=2"),  # another object's delete, before idu=1's row query-back
        (8, "usr", "idu=1", "age"),
        (4, "usr", "idu=1"),
        (6, "usr", "idu=1"),  # the first row query-back: the operation's place and event-id
        (7, "usr", "idu=1", "fname"),
        (3, "usr", "idu=1", "active", None, "false"),
        (5, "usr", "idu=1"),
    )
    g1, g2, g3 = harness.log(  # several row query-backs: one operation, at the first
        (5, "usr", "idu=3"),
        (6, "usr", "idu=3"),
        (5, "usr", "idu=3"),
    )
    result = harness.poll()
    assert result.operations == 3
    a = harness.association
    assert_operations(harness, [
        (f1, f"""<delete class-name="usr"><association>{a('idu=2')}</association></delete>"""),
        (e5, f"""<modify class-name="usr"><association>{a('idu=1')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">John</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Doe</value></add-value></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/>
              <add-value><value type="int">41</value></add-value></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
        (g1, f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">Ann</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
    ])
    assert harness.statuses() == {i: "S" for i in (e1, e2, f1, e3, e4, e5, e6, e7, e8, g1, g2, g3)}


@spark_on_one_database("mariadb")
def test_query_back_on_a_vanished_object_warns_and_the_other_events_stand(harness):
    harness.insert_usr(3, fname="Here")
    h1, h2, h3, h4 = harness.log(  # idu=1 does not exist (any more)
        (2, "usr", "idu=1", "fname", "Jack", "John"),  # stands although a type 8 on fname follows
        (8, "usr", "idu=1", "fname"),
        (6, "usr", "idu=1"),
        (4, "usr", "idu=1"),  # stands although a row query-back precedes
    )
    i1, i2 = harness.log(  # idu=2 does not exist: nothing at all is published for it
        (5, "usr", "idu=2"),
        (7, "usr", "idu=2", "lname"),
    )
    j1, j2 = harness.log(  # idu=3 exists: its row query-back beats its type 1 as usual
        (1, "usr", "idu=3", "fname", None, "Old"),
        (5, "usr", "idu=3"),
    )
    result = harness.poll()
    assert result.operations == 3
    a = harness.association
    assert_operations(harness, [
        (h1, f"""<modify class-name="usr"><association>{a('idu=1')}</association>
            <modify-attr attr-name="fname">
              <remove-value><value type="string">Jack</value></remove-value>
              <add-value><value type="string">John</value></add-value></modify-attr></modify>"""),
        (h4, f"""<delete class-name="usr"><association>{a('idu=1')}</association></delete>"""),
        (j2, f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">Here</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/></modify-attr>
            <modify-attr attr-name="photo"><remove-all-values/></modify-attr>
            <modify-attr attr-name="age"><remove-all-values/></modify-attr>
            <modify-attr attr-name="active"><remove-all-values/></modify-attr>
            <modify-attr attr-name="born"><remove-all-values/></modify-attr></modify>"""),
    ])
    assert harness.statuses() == {
        h1: "S", h2: "W", h3: "W", h4: "S",
        i1: "W", i2: "W",
        j1: "S", j2: "S",
    }
    assert harness.rejects() == []  # a warning is not an error


@spark_on_one_database("sqlite")
def test_merging_across_interleaved_objects_and_splitting_on_kind_changes(harness):
    harness.insert_usr(5, lname="Cur5")
    ids = harness.log(
        (1, "usr", "idu=1", "fname", None, "A1"),  # 0: idu=1's add ...
        (1, "usr", "idu=2", "fname", None, "A2"),  # 1: idu=2's add, in between
        (1, "usr", "idu=1", "lname", None, "B1"),  # 2: ... merges with idu=1's first event
        (1, "usr", "idu=3", "fname", None, "x"),  # 3: add
        (2, "usr", "idu=3", "fname", "x", "y"),  # 4: modify: a new operation
        (4, "usr", "idu=4"),  # 5: another object in between
        (1, "usr", "idu=3", "lname", None, "z"),  # 6: add again: a third operation
        (2, "usr", "idu=5", "fname", "a", "b"),  # 7: a type 2 and a type 8: one modify
        (8, "usr", "idu=5", "lname"),  # 8
        (4, "usr", "idu=6"),  # 9: two deletes of one object: one delete
        (4, "usr", "idu=6"),  # 10
    )
    result = harness.poll()
    assert result.operations == 8
    a = harness.association
    assert_operations(harness, [
        (ids[0], f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="fname"><value type="string">A1</value></add-attr>
            <add-attr attr-name="lname"><value type="string">B1</value></add-attr></add>"""),
        (ids[1], f"""<add class-name="usr"><association>{a('idu=2')}</association>
            <add-attr attr-name="fname"><value type="string">A2</value></add-attr></add>"""),
        (ids[3], f"""<add class-name="usr"><association>{a('idu=3')}</association>
            <add-attr attr-name="fname"><value type="string">x</value></add-attr></add>"""),
        (ids[4], f"""<modify class-name="usr"><association>{a('idu=3')}</association>
            <modify-attr attr-name="fname">
              <remove-value><value type="string">x</value></remove-value>
              <add-value><value type="string">y</value></add-value></modify-attr></modify>"""),
        (ids[5], f"""<delete class-name="usr"><association>{a('idu=4')}</association></delete>"""),
        (ids[6], f"""<add class-name="usr"><association>{a('idu=3')}</association>
            <add-attr attr-name="lname"><value type="string">z</value></add-attr></add>"""),
        (ids[7], f"""<modify class-name="usr"><association>{a('idu=5')}</association>
            <modify-attr attr-name="fname">
              <remove-value><value type="string">a</value></remove-value>
              <add-value><value type="string">b</value></add-value></modify-attr>
            <modify-attr attr-name="lname"><remove-all-values/>
              <add-value><value type="string">Cur5</value></add-value></modify-attr></modify>"""),
        (ids[9], f"""<delete class-name="usr"><association>{a('idu=6')}</association></delete>"""),
    ])
    assert harness.statuses() == {i: "S" for i in ids}


@spark_on_one_database("postgresql")
def test_differently_padded_keys_name_one_object(harness):
    harness.insert_usr(2, fname="Cur2")
    ids = harness.log(
        (1, "usr", "idu= 1", "fname", None, "F"),  # 0: published with the canonical key
        (1, "usr", "idu=1", "lname", None, "L"),  # 1: the same object: merges into one add
        (2, "usr", "idu=2", "fname", "a", "b"),  # 2: beaten by the query-back on the padded key
        (8, "usr", "idu= 2", "fname"),  # 3: reads row 2
        (6, "usr", "idu=3"),  # 4: row 3 does not exist ...
        (4, "usr", "idu= 3"),  # 5: ... so this delete, of the same object, stands
    )
    result = harness.poll()
    assert result.operations == 3
    a = harness.association
    assert_operations(harness, [
        (ids[0], f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="fname"><value type="string">F</value></add-attr>
            <add-attr attr-name="lname"><value type="string">L</value></add-attr></add>"""),
        (ids[3], f"""<modify class-name="usr"><association>{a('idu=2')}</association>
            <modify-attr attr-name="fname"><remove-all-values/>
              <add-value><value type="string">Cur2</value></add-value></modify-attr></modify>"""),
        (ids[5], f"""<delete class-name="usr"><association>{a('idu=3')}</association></delete>"""),
    ])
    assert harness.statuses() == {
        ids[0]: "S", ids[1]: "S", ids[2]: "S", ids[3]: "S", ids[4]: "W", ids[5]: "S",
    }


@spark_on_one_database("mariadb")
def test_a_second_cycle_publishes_only_new_events(harness):
    (t1,) = harness.log((1, "usr", "idu=1", "fname", None, "Jack"))
    (staged,) = harness.log((1, "usr", "idu=9", "fname", None, "Staged"), status="X")
    first = harness.poll()
    assert first.events == 1
    a = harness.association
    assert_operations(harness, [
        (t1, f"""<add class-name="usr"><association>{a('idu=1')}</association>
            <add-attr attr-name="fname"><value type="string">Jack</value></add-attr></add>"""),
    ])
    assert harness.statuses() == {t1: "S", staged: "X"}

    t2, t3 = harness.log((2, "usr", "idu=1", "fname", "Jack", "John"), (4, "usr", "idu=2"))
    second = harness.poll()
    assert second.events == 2  # the first cycle's row is not read again
    assert_operations(harness, [
        (t2, f"""<modify class-name="usr"><association>{a('idu=1')}</association>
            <modify-attr attr-name="fname">
              <remove-value><value type="string">Jack</value></remove-value>
              <add-value><value type="string">John</value></add-value></modify-attr></modify>"""),
        (t3, f"""<delete class-name="usr"><association>{a('idu=2')}</association></delete>"""),
    ])
    assert harness.statuses() == {t1: "S", staged: "X", t2: "S", t3: "S"}

    third = harness.poll()
    assert (third.events, third.operations, third.documents) == (0, 0, 0)
    assert harness.published().documents == []
    assert harness.statuses() == {t1: "S", staged: "X", t2: "S", t3: "S"}
