"""Logical database classes: child tables published as multi-valued attributes of their parent,
references as association-refs, a parent deleted with its children as one `<delete>`.

Through the real triggers, on SQLite and PostgreSQL, in both capture styles and on both cycle
paths; after every step the consumer mirror equals the tables.
"""
from __future__ import annotations

import dataclasses

import pytest
from conftest import spark_on_one_database
from harness import Harness
from lxml import etree
from oracle.precedence import decide
from schemas import OTHER_USER
from sqlalchemy import text

from publisher.config import ClassConfig, ConfigError, Reader
from publisher.model.operation import AttrChange, Operation, OperationKind, Value
from publisher.model.values import ValueType
from publisher.model.xds import DANGLING_REFERENCE, build_operation
from publisher.rules.precedence import CurrentRow
from publisher.service.mirror import verify

CLASSES = {
    "usr": ClassConfig(multi_valued={"phone": "usr_phone.phone"}, references={"manager": "usr"}),
    "grp": ClassConfig(multi_valued={"member": "grp_member.idu"}, references={"member": "usr"}),
}


def _events(*events: tuple) -> list[dict]:
    """(type, attribute, old, new) of one object, in processing order."""
    return [{"record_id": i, "position_time": None, "class_name": "usr", "canonical_key": "idu=1",
             "event_type_code": t, "attr_name": a, "value_type": "string", "old_text": o, "new_text": n}
            for i, (t, a, o, n) in enumerate(events, 1)]


PARENT = CurrentRow({"fname": "A"}, multi={"phone": ("3",)})


@pytest.mark.parametrize(("events", "current", "outcomes", "carrier"), [
    # the children's removals right before the parent's delete go with it
    ([(2, "phone", "1", None), (2, "phone", "2", None), (4, None, None, None)], PARENT,
     ["redundant", "redundant", "survives"], None),
    # ... and those logged after it (a cascade that fires later), until the parent is back,
    # whose insert carries the current values: the values logged with it are redundant
    ([(4, None, None, None), (8, "phone", None, None), (1, "fname", None, "A"), (2, "phone", None, "3")], PARENT,
     ["survives", "redundant", "survives", "redundant"], 2),
    # a child written before its parent cannot make a change ahead of the parent's <add>
    ([(2, "phone", None, "3"), (8, "phone", None, None), (1, "fname", None, "A")], PARENT,
     ["redundant", "redundant", "survives"], 2),
    # an insert beaten by a field query-back of its column carries nothing: the values stand
    ([(1, "fname", None, "A"), (8, "fname", None, None), (2, "phone", None, "3")], PARENT,
     ["redundant", "wins", "survives"], None),
    # a removal followed by another change first stands: the delete comes later
    ([(2, "phone", "1", None), (2, "fname", "A", "B"), (4, None, None, None)], PARENT,
     ["survives", "survives", "survives"], None),
    # the object is gone: its values went with it (or come with its insert, if that is still to come)
    ([(2, "phone", "1", None), (2, "fname", "A", "B"), (2, "phone", None, "2")], None,
     ["redundant", "survives", "redundant"], None),
    # two child rows whose values publish the same text: removing one leaves the value held
    ([(2, "phone", "3", None), (2, "phone", "1", None)], PARENT, ["redundant", "survives"], None),
    # the parent's row query-back after its delete carries the values (and beats the delete)
    ([(4, None, None, None), (8, "phone", None, None), (5, None, None, None), (8, "phone", None, None)], PARENT,
     ["redundant", "redundant", "wins", "redundant"], None),
])
def test_a_parents_delete_and_insert_take_its_childrens_events_along(events, current, outcomes, carrier) -> None:
    decisions = decide(_events(*events), current, multi_valued=frozenset({"phone"}))
    assert [d.outcome for d in decisions] == outcomes
    assert {d.status.value for d in decisions} == {"S"}
    assert [i for i, d in enumerate(decisions) if d.carries] == ([] if carrier is None else [carrier])
    assert all(d.carries == ("phone",) for d in decisions if d.carries)


def test_a_multi_valued_attribute_and_references_in_xds() -> None:
    ref = Value(ValueType.DN, "idu=1,table=usr,schema=s", "idu=1,table=usr,schema=s")
    dangling = Value(ValueType.DN, "idu=9,table=usr,schema=s")
    modify = Operation(OperationKind.MODIFY, "grp", "gid=7,table=grp,schema=s", 3, (
        AttrChange("member", remove_all=True, add=ref, more=(dangling,)),
        AttrChange("phone", remove_all=True),
    ))
    assert build_operation(modify).decode() == (
        '<modify class-name="grp" event-id="3"><association>gid=7,table=grp,schema=s</association>'
        '<modify-attr attr-name="member"><remove-all-values/><add-value>'
        '<value type="dn" association-ref="idu=1,table=usr,schema=s">idu=1,table=usr,schema=s</value>'
        '<value type="dn">idu=9,table=usr,schema=s</value></add-value></modify-attr>'
        '<modify-attr attr-name="phone"><remove-all-values/></modify-attr></modify>'
    )
    assert build_operation(modify).count(DANGLING_REFERENCE) == 1
    add = Operation(OperationKind.ADD, "usr", "idu=1,table=usr,schema=s", 4, (
        AttrChange("phone", add=Value(ValueType.STRING, "1"), more=(Value(ValueType.STRING, "2"),)),))
    assert build_operation(add).decode() == (
        '<add class-name="usr" event-id="4"><association>idu=1,table=usr,schema=s</association>'
        '<add-attr attr-name="phone"><value type="string">1</value><value type="string">2</value></add-attr></add>'
    )


def _ddl(dialect: str, schema: str | None) -> list[str]:
    q = (lambda name: f"{schema}.{name}") if schema else (lambda name: name)
    return [
        f"CREATE TABLE {q('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), manager INTEGER)",
        f"CREATE TABLE {q('usr_phone')} (idu INTEGER NOT NULL REFERENCES {q('usr')} ON DELETE CASCADE, "
        "phone VARCHAR(32) NOT NULL, kind VARCHAR(8), PRIMARY KEY (idu, phone))",
        f"CREATE TABLE {q('grp')} (gid INTEGER PRIMARY KEY, name VARCHAR(64))",
        f"CREATE TABLE {q('grp_member')} (gid INTEGER NOT NULL REFERENCES {q('grp')} ON DELETE CASCADE, "
        "idu INTEGER NOT NULL, PRIMARY KEY (gid, idu))",
    ]


@pytest.fixture(params=["field", "row"])
def logical(request, spark, cycle_path, database, tmp_path) -> Harness:
    """usr with phones (and a manager), grp with members, captured in the parameter's style."""
    h = Harness(spark, database, tmp_path, user=OTHER_USER, path=cycle_path, tables=())
    h.config = dataclasses.replace(h.config, classes=CLASSES)
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    h.install("usr", "grp", style=request.param)
    h.style = request.param  # type: ignore[attr-defined]
    return h


def _run(h: Harness, *statements: str) -> None:
    """The statements in one transaction (SQLite with its foreign keys enforced)."""
    with h.engine.begin() as conn:
        if h.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA foreign_keys = ON")
        for statement in statements:
            conn.execute(text(statement.format(**{n: h.table(n) for n in ("usr", "usr_phone", "grp", "grp_member")})))


def _cycle(h: Harness) -> list[etree._Element]:
    """Poll until drained; the operations published, and the mirror equal to the tables."""
    operations = []
    for _ in range(10):
        result = h.poll()
        operations += h.published().operations
        if result.idle:
            break
    assert "N" not in set(h.statuses().values())
    assert [str(d) for d in verify(h.config, h.engine)] == []
    return operations


def _values(op: etree._Element, attribute: str, part: str) -> list[str]:
    """The texts of an attribute's values under `part` (add-attr, add-value, remove-value)."""
    return [v.text for a in op if a.get("attr-name") == attribute for p in a.iter(part) for v in p.iter("value")]


def _shape(op: etree._Element, attribute: str) -> list[str]:
    """The child elements of an attribute's changes, in order."""
    return [p.tag for a in op if a.get("attr-name") == attribute for p in a]


@spark_on_one_database("sqlite")
def test_user_phones_added_changed_and_removed(logical: Harness) -> None:
    h = logical
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann')",
         "INSERT INTO {usr_phone} (idu, phone) VALUES (1, '555-1'), (1, '555-2')")
    (created,) = _cycle(h)
    assert created.findtext("association").strip() == h.association("idu=1")
    if h.style == "field":
        assert created.tag == "add"
        assert sorted(_values(created, "phone", "add-attr")) == ["555-1", "555-2"]
    else:
        assert created.tag == "modify"
        assert _shape(created, "phone") == ["remove-all-values", "add-value"]
        assert _values(created, "phone", "add-value") == ["555-1", "555-2"]

    _run(h, "UPDATE {usr_phone} SET phone = '555-3' WHERE phone = '555-2'")
    (changed,) = _cycle(h)
    assert changed.tag == "modify"
    if h.style == "field":
        assert _values(changed, "phone", "remove-value") == ["555-2"]
        assert _values(changed, "phone", "add-value") == ["555-3"]
    else:
        assert _shape(changed, "phone") == ["remove-all-values", "add-value"]
        assert _values(changed, "phone", "add-value") == ["555-1", "555-3"]

    _run(h, "DELETE FROM {usr_phone} WHERE phone = '555-1'",
         "UPDATE {usr_phone} SET kind = 'home'")
    (removed,) = _cycle(h)
    if h.style == "field":
        assert _shape(removed, "phone") == ["remove-value"]
        assert _values(removed, "phone", "remove-value") == ["555-1"]
    else:
        assert _values(removed, "phone", "add-value") == ["555-3"]

    _run(h, "DELETE FROM {usr_phone}")
    (emptied,) = _cycle(h)
    assert ("remove-value" if h.style == "field" else "remove-all-values") in _shape(emptied, "phone")


@spark_on_one_database("postgresql")
def test_group_members_are_association_refs(logical: Harness) -> None:
    h = logical
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann'), (2, 'Bob')")
    _cycle(h)
    _run(h, "INSERT INTO {grp} (gid, name) VALUES (7, 'staff')",
         "INSERT INTO {grp_member} (gid, idu) VALUES (7, 1), (7, 2), (7, 99)")
    result = h.poll()
    (group,) = [op for op in h.published().operations if "table=grp" in op.findtext("association")]
    assert result.dangling_references == 1
    assert result.summary()["dangling_references"] == 1
    values = {v.text: v for v in group.iter("value") if v.get("type") == "dn"}
    assert sorted(values) == sorted(h.association(f"idu={i}") for i in (1, 2, 99))
    for known in (1, 2):
        assert values[h.association(f"idu={known}")].get("association-ref") == h.association(f"idu={known}")
    assert values[h.association("idu=99")].get("association-ref") is None
    _cycle(h)

    _run(h, "DELETE FROM {grp_member} WHERE idu IN (2, 99)", "INSERT INTO {grp_member} (gid, idu) VALUES (7, 3)",
         "INSERT INTO {usr} (idu, fname) VALUES (3, 'Cy')")
    operations = [op for op in _cycle(h) if "table=grp" in op.findtext("association")]
    refs = {v.text: v.get("association-ref") for op in operations for v in op.iter("value")}
    assert refs[h.association("idu=3")] == h.association("idu=3")
    if h.style == "field":
        removed = [v for op in operations for v in _values(op, "member", "remove-value")]
        assert sorted(removed) == sorted([h.association("idu=2"), h.association("idu=99")])


@spark_on_one_database("mariadb")
def test_a_manager_column_is_a_reference(logical: Harness) -> None:
    h = logical
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann')",
         "INSERT INTO {usr} (idu, fname, manager) VALUES (2, 'Bob', 1)")
    operations = _cycle(h)
    managers = [v for op in operations for a in op if a.get("attr-name") == "manager" for v in a.iter("value")]
    assert [(v.get("type"), v.text, v.get("association-ref")) for v in managers] == [
        ("dn", h.association("idu=1"), h.association("idu=1"))]


@spark_on_one_database("postgresql")
def test_a_parent_deleted_with_its_children_is_one_delete(logical: Harness) -> None:
    h = logical
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann'), (2, 'Bob')",
         "INSERT INTO {usr_phone} (idu, phone) VALUES (1, '555-1'), (1, '555-2'), (2, '555-9')",
         "INSERT INTO {grp} (gid, name) VALUES (7, 'staff')",
         "INSERT INTO {grp_member} (gid, idu) VALUES (7, 1)")
    _cycle(h)
    before = set(h.statuses())
    _run(h, "DELETE FROM {usr_phone} WHERE idu = 2", "DELETE FROM {usr} WHERE idu = 2",
         "DELETE FROM {usr} WHERE idu = 1", "DELETE FROM {grp} WHERE gid = 7")
    operations = _cycle(h)
    assert sorted((op.tag, op.findtext("association").strip()) for op in operations) == sorted([
        ("delete", h.association("idu=1")), ("delete", h.association("idu=2")),
        ("delete", h.association("gid=7", "grp"))])
    statuses = {rid: s for rid, s in h.statuses().items() if rid not in before}
    assert set(statuses.values()) == {"S"}
    assert len(statuses) > 3, "the children's events were logged, and are redundant"


@spark_on_one_database("mariadb")
def test_a_parent_deleted_and_inserted_again_keeps_only_its_new_values(logical: Harness) -> None:
    h = logical
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann')",
         "INSERT INTO {usr_phone} (idu, phone) VALUES (1, '555-1')")
    _cycle(h)
    _run(h, "DELETE FROM {usr} WHERE idu = 1",
         "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann')",
         "INSERT INTO {usr_phone} (idu, phone) VALUES (1, '555-2')")
    operations = _cycle(h)
    if h.style == "field":
        assert [op.tag for op in operations] == ["delete", "add"]
        assert _values(operations[1], "phone", "add-attr") == ["555-2"]
    else:  # the row query-back after the delete beats it: every value replaced
        (replaced,) = operations
        assert _shape(replaced, "phone") == ["remove-all-values", "add-value"]
        assert _values(replaced, "phone", "add-value") == ["555-2"]


@pytest.mark.parametrize(("classes", "message"), [
    ({"nope": ClassConfig()}, "classes.nope: no published table 'nope'"),
    ({"usr": ClassConfig(references={"manager": "gone"})}, "classes.usr.references.manager: 'gone' is not a published"),
    ({"usr": ClassConfig(references={"boss": "usr"})}, "classes.usr.references.boss: 'usr' has no attribute 'boss'"),
    ({"grp": ClassConfig(references={"name": "pair"})},
     "classes.grp.references.name: 'pair' has a key of 2 columns; a reference's value is the key of a class keyed"),
    ({"usr": ClassConfig(multi_valued={"fname": "usr_phone.phone"})},
     "classes.usr.multi_valued.fname: 'usr' has a column 'fname' already"),
    ({"usr": ClassConfig(multi_valued={"phone": "usr_phone.kind"})},
     "classes.usr.multi_valued.phone: the primary key of 'usr_phone' is (idu, phone); it must be the columns"),
    ({"usr": ClassConfig(multi_valued={"phone": "usr_phones.phone"})},
     "classes.usr.multi_valued.phone: child table 'usr_phones' does not exist"),
])
def test_a_class_the_tables_cannot_carry_is_refused_before_any_event_is_read(
        spark, database, tmp_path, classes, message) -> None:
    h = Harness(spark, database, tmp_path, user=OTHER_USER, tables=("usr", "grp", "pair"))
    h.db.execute(*_ddl(h.dialect, h.db.schema),
                 f"CREATE TABLE {h.table('pair')} (a INTEGER, b INTEGER, PRIMARY KEY (a, b))")
    h.install("usr", "grp", "pair")
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann')")
    h.config = dataclasses.replace(h.config, classes=classes)
    with pytest.raises(ConfigError) as refused:
        h.poll()
    assert message in str(refused.value)
    assert set(h.statuses().values()) == {"N"}


def test_the_command_line_refuses_a_bad_class_with_exit_2(sqlite_database, tmp_path, capsys) -> None:
    from publisher.cli import main

    config = tmp_path / "publisher.toml"
    config.write_text(f'[database]\nurl = "{sqlite_database.url}"\n[output]\ndirectory = "{tmp_path / "out"}"\n'
                      '[classes.usr.multi_valued]\nphone = "usr_phone.number"\n', encoding="utf-8")
    sqlite_database.execute(*_ddl("sqlite", None))
    assert main(["install", "-c", str(config), "--table", "usr"]) == 2
    assert "classes.usr.multi_valued.phone: table 'usr_phone' has no column 'number'" in capsys.readouterr().err
    config.write_text(config.read_text(encoding="utf-8").replace('"usr_phone.number"', '"usr_phone.phone"'),
                      encoding="utf-8")
    assert main(["install", "-c", str(config), "--table", "usr"]) == 0
    assert "; child tables: usr_phone (values of usr.phone)" in capsys.readouterr().err


@pytest.mark.parametrize("style", ["field", "row"])
def test_subscribers_get_the_attributes_they_track_and_resolve_references_they_do_not(
        spark, subscriber_database, tmp_path, style) -> None:
    from publisher.config import SubscriberConfig, SubscriptionConfig
    from publisher.service.checkouts import check_out

    h = Harness(spark, subscriber_database, tmp_path, user=OTHER_USER, tables=())
    h.config = dataclasses.replace(
        h.config, classes=CLASSES,
        subscriptions={"groups": SubscriptionConfig(tables=("grp",)),
                       "names": SubscriptionConfig(tables=("usr",), columns={"usr": ("fname", "phone")})},
        subscribers={"g": SubscriberConfig("groups", str(tmp_path / "g")),
                     "n": SubscriberConfig("names", str(tmp_path / "n"))},
    )
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    h.install("usr", "grp", style=style)
    _run(h, "INSERT INTO {usr} (idu, fname, manager) VALUES (1, 'Ann', NULL), (2, 'Bob', 1)",
         "INSERT INTO {usr_phone} (idu, phone) VALUES (1, '555-1')",
         "INSERT INTO {grp} (gid, name) VALUES (7, 'staff')",
         "INSERT INTO {grp_member} (gid, idu) VALUES (7, 1), (7, 99)")
    for name in ("g", "n"):
        assert check_out(spark, h.engine, h.config, name).events > 0
        assert [str(d) for d in verify(h.config, h.engine, reader=Reader(name))] == []
    documents = {name: [etree.parse(str(p)).getroot() for p in sorted((tmp_path / name).glob("*.xml"))]
                 for name in ("g", "n")}
    members = {v.text: v.get("association-ref") for d in documents["g"] for v in d.iter("value")
               if v.get("type") == "dn"}
    assert members == {h.association("idu=1"): h.association("idu=1"), h.association("idu=99"): None}
    names = {a.get("attr-name") for d in documents["n"] for a in d.iter("add-attr", "modify-attr")}
    assert names == {"fname", "phone"}


def test_a_subscription_column_no_attribute_is_named_lists_the_multi_valued_ones_too(
        spark, subscriber_database, tmp_path) -> None:
    from publisher.config import SubscriberConfig, SubscriptionConfig
    from publisher.service.checkouts import check_out

    h = Harness(spark, subscriber_database, tmp_path, user=OTHER_USER, tables=())
    h.config = dataclasses.replace(
        h.config, classes=CLASSES,
        subscriptions={"names": SubscriptionConfig(tables=("usr",), columns={"usr": ("fname", "phones")})},
        subscribers={"n": SubscriberConfig("names", str(tmp_path / "n"))},
    )
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    h.install("usr", "grp")
    _run(h, "INSERT INTO {usr} (idu, fname, manager) VALUES (1, 'Ann', NULL)")
    with pytest.raises(Exception, match=r"has no column 'phones' \(it has idu, .*, phone \(multi-valued\)\)"):
        check_out(spark, h.engine, h.config, "n")


def test_a_row_naming_a_child_table_says_it_is_one(spark, sqlite_database, tmp_path) -> None:
    """The child table carries the class's triggers, which log its rows against the parent: a row
    naming the child itself is rejected for that reason, not for a want of triggers."""
    from publisher.service.stats import Unpublished, unpublished_tables

    h = Harness(spark, sqlite_database, tmp_path, user=OTHER_USER, tables=())
    h.config = dataclasses.replace(h.config, classes=CLASSES)
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    h.install("usr", "grp")
    (child,) = h.log((4, "usr_phone", "idu=1,phone=5"))
    assert unpublished_tables(h.config, h.engine) == {"usr_phone": Unpublished.CHILD_TABLE}
    h.poll()
    assert h.statuses() == {child: "E"}
    (reason,) = [r["reason"] for r in h.rejects()]
    assert "child table of logical class 'usr'" in reason and "usr.phone" in reason, reason


@pytest.mark.parametrize("style", ["field", "row"])
def test_postgresql_a_child_tables_migration_is_followed_and_truncate_removes_its_values(
    style, spark, postgresql_database, tmp_path,
) -> None:
    """The column-blind capture of a child table logs its parents' attribute read-backs, its
    links found by attnum, which the rename of a link column keeps."""
    h = Harness(spark, postgresql_database, tmp_path, user=OTHER_USER, tables=())
    h.config = dataclasses.replace(h.config, classes=CLASSES)
    h.db.execute(*_ddl(h.dialect, h.db.schema))
    h.install("usr", "grp", style=style)
    _run(h, "INSERT INTO {usr} (idu, fname) VALUES (1, 'Ann'), (2, 'Bo')",
         "INSERT INTO {usr_phone} (idu, phone) VALUES (1, '555-1'), (2, '555-2')")
    _cycle(h)
    _run(h, "ALTER TABLE {usr_phone} RENAME COLUMN kind TO label",
         "ALTER TABLE {usr_phone} RENAME COLUMN idu TO owner",
         "ALTER TABLE {usr_phone} ADD COLUMN note text",
         "INSERT INTO {usr_phone} (owner, phone, label) VALUES (1, '555-3', 'home')",
         "UPDATE {usr_phone} SET phone = '555-4' WHERE phone = '555-2'",
         "DELETE FROM {usr_phone} WHERE phone = '555-1'")
    changed = _cycle(h)
    assert sorted(op.findtext("association").strip() for op in changed) == sorted(
        h.association(f"idu={n}") for n in (1, 2))
    _run(h, "TRUNCATE {usr_phone}")
    emptied = _cycle(h)
    assert sorted(op.findtext("association").strip() for op in emptied) == sorted(
        h.association(f"idu={n}") for n in (1, 2))
