"""The consumer mirror: replaying documents into a model of the consumer, and comparing it with
the published tables after real cycles on SQLite and PostgreSQL."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from harness import Harness
from sqlalchemy import text

from publisher.databases.mariadb.capture import mariadb_trigger_name
from publisher.databases.postgresql.names import postgresql_trigger_name
from publisher.databases.sqlite.capture import SQLITE_TRIGGER_SUFFIXES, sqlite_trigger_name
from publisher.errors import StageFailedError
from publisher.outputs.cycle_files import WINDOW_FILE, document_paths
from publisher.pipeline import planning
from publisher.service.mirror import (
    Difference,
    Mirror,
    compare,
    pending_events,
    replay,
    source_objects,
    verify,
)

# Triggers on PostgreSQL record session_user; the publisher must not take it for its own (loopback).
OTHER_USER = "publisher_app"
U1, U2, U3 = (f"idu={n},table=usr,schema=indirect" for n in (1, 2, 3))


def document(*operations: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<nds dtdversion="4.0"><source><product version="0.1.0">'
        "Event Log Publisher</product><contact>event-log-publisher</contact></source>"
        f"<input>{''.join(operations)}</input></nds>"
    )


def add(event_id: int, association: str, **attrs: str) -> str:
    values = "".join(
        f'<add-attr attr-name="{n}"><value type="string">{v}</value></add-attr>' for n, v in attrs.items()
    )
    return f'<add class-name="usr" event-id="{event_id}"><association>{association}</association>{values}</add>'


def modify(event_id: int, association: str, *attrs: str) -> str:
    head = f'<modify class-name="usr" event-id="{event_id}"><association>{association}</association>'
    return f'{head}{"".join(attrs)}</modify>'


def attr(name: str, remove_all: bool = False, remove: str | None = None, add: str | None = None) -> str:
    parts = "<remove-all-values/>" if remove_all else ""
    parts += f'<remove-value><value type="string">{remove}</value></remove-value>' if remove is not None else ""
    parts += f'<add-value><value type="string">{add}</value></add-value>' if add is not None else ""
    return f'<modify-attr attr-name="{name}">{parts}</modify-attr>'


def delete(event_id: int, association: str) -> str:
    return f'<delete class-name="usr" event-id="{event_id}"><association>{association}</association></delete>'


def written(directory: Path, *documents: str) -> list[Path]:
    """The documents as files named as the publisher names them, in publication order."""
    directory.mkdir(exist_ok=True)
    paths = []
    for index, xml in enumerate(documents):
        path = directory / f"{1:012d}-{index:07d}.xml"
        path.write_text(xml, encoding="utf-8")
        paths.append(path)
    return paths


# --- replay --------------------------------------------------------------------------------------


def test_add_modify_and_delete_build_the_consumer(tmp_path):
    paths = written(
        tmp_path,
        document(add(1, U1, fname="Jack", lname="Frost"), add(3, U2, fname="Jill"), add(4, U3)),
        document(
            modify(5, U1, attr("fname", remove="Jack", add="John"), attr("lname", remove_all=True),
                   attr("mail", add="j@x"), attr("mail", add="")),
            delete(7, U2),
            delete(8, "idu=9,table=usr,schema=indirect"),
        ),
        document('<status level="success" type="heartbeat"/>'),
    )
    mirror = replay(paths)
    assert mirror.objects == {U1: {"fname": {"John"}, "mail": {"j@x", ""}}, U3: {}}
    assert mirror.anomalies == [] and mirror.documents == 3


def test_an_operation_repeated_after_a_crash_is_applied_once(tmp_path):
    first = document(add(1, U1, fname="Ann"), modify(2, U1, attr("mail", add="a@x")))
    mirror = replay(written(
        tmp_path,
        first,
        document(modify(3, U1, attr("mail", remove="a@x"))),
        first,
    ))
    assert mirror.objects == {U1: {"fname": {"Ann"}}}
    assert mirror.anomalies == []


def test_a_second_add_is_refused_and_reported(tmp_path):
    mirror = replay(written(tmp_path, document(add(1, U1, fname="Ann")), document(add(4, U1, fname="Bob"))))
    assert mirror.objects == {U1: {"fname": {"Ann"}}}
    assert mirror.anomalies == [Difference(
        U1, None, "no <add> while it exists", "an <add> for an object that already exists (event-id 4) was refused"
    )]


def test_a_modify_of_an_unknown_object_creates_it_and_an_emptied_attribute_is_absent(tmp_path):
    mirror = replay(written(
        tmp_path,
        document(modify(1, f"\n  {U1}  ", attr("fname", remove_all=True, add="Ann"), attr("lname", remove_all=True))),
        document(modify(2, U2, attr("fname", add="Bob")), modify(3, U2, attr("fname", remove="Bob"))),
    ))
    assert mirror.objects == {U1: {"fname": {"Ann"}}, U2: {}}


def test_documents_replay_in_name_order_and_temporary_files_are_no_documents(tmp_path):
    later, earlier = tmp_path / "000000000002-0000000.xml", tmp_path / "000000000001-0000000.xml"
    later.write_text(document(delete(2, U1)), encoding="utf-8")
    earlier.write_text(document(add(1, U1, fname="Ann")), encoding="utf-8")
    (tmp_path / ".000000000003-0000000.xml").write_text(document(add(3, U1)), encoding="utf-8")
    (tmp_path / ".000000000003-0000001.xml.tmp").write_text("<nds", encoding="utf-8")
    assert document_paths(tmp_path) == [earlier, later]
    assert replay([later, earlier]).objects == {}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        document_paths(tmp_path / "nowhere")


# --- compare -------------------------------------------------------------------------------------


def test_compare_reports_each_difference_once():
    mirror = Mirror(objects={U1: {"fname": {"Jack"}, "mail": {"a", "b"}}, U3: {}})
    source = {U1: {"fname": {"John"}, "lname": {"Frost"}}, U2: {"fname": {"Jill"}}}
    problem = Difference(U1, "photo", "cannot be published: usr.photo: too big", "")
    assert compare(mirror, source, [problem]) == [
        Difference(U1, "fname", "['John']", "['Jack']"),
        Difference(U1, "lname", "['Frost']", "absent"),
        Difference(U1, "mail", "absent", "['a', 'b']"),
        Difference(U1, "photo", "cannot be published: usr.photo: too big", "absent"),
        Difference(U2, None, "present", "absent"),
        Difference(U3, None, "absent", "present"),
    ]
    assert compare(Mirror(objects={U1: {}}), {U1: {}}) == []


def test_a_difference_reads_as_one_line():
    line = str(Difference('name="a,table=b"+site=1,table=grp,schema=indirect', "descr", "['x']", "absent"))
    assert line == "grp  name=\"a,table=b\"+site=1,table=grp,schema=indirect  descr: expected ['x'], published absent"
    assert str(Difference(U2, None, "present", "absent")).endswith("object: expected present, published absent")
    long = "['" + "ab" * 2_000_000 + "']"
    line = str(Difference(U2, "photo", long, "['" + "x" * 196 + "']"))
    assert line.endswith(f"photo: expected {long[:100]}... (4,000,004 characters), published ['{'x' * 196}']")


# --- against real cycles -------------------------------------------------------------------------


def publishing(h: Harness) -> Harness:
    """The harness with capture triggers on usr, publishing as a user other than the tables' writer."""
    h.config = dataclasses.replace(h.config, database=dataclasses.replace(h.config.database, user=OTHER_USER))
    h.install("usr")
    return h


def sql(h: Harness, *statements: str) -> None:
    h.db.execute(*(s.format(usr=h.table("usr")) for s in statements))


def drop_triggers(h: Harness) -> None:
    if h.dialect == "sqlite":
        sql(h, *(f"DROP TRIGGER {sqlite_trigger_name('usr', s)}" for s in SQLITE_TRIGGER_SUFFIXES.values()))
    elif h.dialect == "mariadb":
        names = (mariadb_trigger_name("usr", s) for s in SQLITE_TRIGGER_SUFFIXES.values())
        sql(h, *(f"DROP TRIGGER {h.db.schema}.{name}" for name in names))
    else:
        sql(h, f"DROP TRIGGER {postgresql_trigger_name('usr')} ON {{usr}}")


def test_the_consumer_mirrors_the_tables_and_lost_changes_show(harness, tmp_path):
    h = publishing(harness)
    h.insert_usr(1, fname="Jack", lname="Frost", age=40, active=True)
    h.insert_usr(2, fname="Jill")
    sql(h, "INSERT INTO {usr} (idu) VALUES (3)", "UPDATE {usr} SET lname = 'Hill' WHERE idu = 2")
    assert pending_events(h.config, h.engine) > 0
    h.poll()
    sql(h, "UPDATE {usr} SET fname = 'John', lname = NULL, age = 41 WHERE idu = 1", "DELETE FROM {usr} WHERE idu = 3",
        "UPDATE {usr} SET idu = 4 WHERE idu = 2")
    with h.engine.begin() as conn:
        conn.execute(text(f"UPDATE {h.table('usr')} SET photo = :photo WHERE idu = 1"), {"photo": b"\xbb\xbb"})
    second = h.poll()
    assert pending_events(h.config, h.engine) == 0
    assert verify(h.config, h.engine) == []

    one, two, three, four = (h.association(f"idu={n}") for n in (1, 2, 3, 4))
    missed = tmp_path / "missed"
    missed.mkdir()
    for path in document_paths(h.output):
        if path.name not in second.files:
            shutil.copy(path, missed)
    assert verify(h.config, h.engine, missed) == [
        Difference(one, "age", "['41']", "['40']"),
        Difference(one, "fname", "['John']", "['Jack']"),
        Difference(one, "lname", "absent", "['Frost']"),
        Difference(one, "photo", "['u7s=']", "absent"),
        Difference(two, None, "absent", "present"),
        Difference(three, None, "absent", "present"),
        Difference(four, None, "present", "absent"),
    ]

    drop_triggers(h)
    sql(h, "UPDATE {usr} SET lname = 'Doe' WHERE idu = 1", "INSERT INTO {usr} (idu, fname) VALUES (5, 'Eve')")
    assert pending_events(h.config, h.engine) == 0
    assert verify(h.config, h.engine) == [
        Difference(one, "lname", "['Doe']", "absent"),
        Difference(h.association("idu=5"), None, "present", "absent"),
    ]


def test_a_value_that_cannot_be_published_is_a_difference(spark, sqlite_database, tmp_path):
    h = Harness(spark, sqlite_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    publishing(h)
    h.insert_usr(1, fname="Ann\x01", lname="Lee")
    h.poll()
    objects, problems = source_objects(h.config, h.engine)
    assert objects == {h.association("idu=1"): {"lname": {"Lee"}}}
    (difference,) = verify(h.config, h.engine)
    assert (difference.association, difference.attribute, difference.published) == (
        h.association("idu=1"), "fname", "absent"
    )
    assert difference.expected.startswith("cannot be published: ") and "fname" in difference.expected
    assert [dataclasses.replace(p, expected="") for p in problems] == [
        Difference(h.association("idu=1"), "fname", "", "")
    ]


# --- changes a consumer must not lose (each was lost before its fix) ----------------------------


def sqlite_publisher(spark, sqlite_database, tmp_path, **settings) -> Harness:
    h = Harness(spark, sqlite_database, tmp_path, **settings)
    h.create_usr()
    h.create_event_log()
    return h


def test_an_insert_with_a_binary_column_before_others_publishes_every_column(spark, sqlite_database, tmp_path):
    h = sqlite_publisher(spark, sqlite_database, tmp_path)
    h.install("usr")
    h.insert_usr(1, fname="Jack", photo=b"\xbb\xbb", age=40)
    h.poll()
    assert verify(h.config, h.engine) == []


def test_a_row_deleted_and_inserted_again_in_one_cycle_keeps_its_binary_value(spark, sqlite_database, tmp_path):
    h = sqlite_publisher(spark, sqlite_database, tmp_path)
    h.install("usr")
    h.insert_usr(1, fname="Ann", photo=b"\x01")
    sql(h, "DELETE FROM {usr} WHERE idu = 1")
    h.insert_usr(1, fname="Bob", photo=b"\x02")
    h.poll()
    assert verify(h.config, h.engine) == []


def test_a_row_deleted_and_inserted_again_is_republished_with_row_adds(spark, sqlite_database, tmp_path):
    h = sqlite_publisher(spark, sqlite_database, tmp_path, insert_row_operation="add")
    h.install("usr", style="row")
    h.insert_usr(1, fname="Ann")
    h.poll()
    sql(h, "DELETE FROM {usr} WHERE idu = 1")
    h.insert_usr(1, fname="Bob")
    h.poll()
    assert verify(h.config, h.engine) == []


def test_a_cycle_retried_after_a_lost_acknowledgement_loses_no_newer_change(
    spark, sqlite_database, tmp_path, monkeypatch
):
    """The retried cycle takes exactly the rows it took before: a change logged in between
    joined them under an event-id the consumer had applied, and was dropped with them."""
    h = sqlite_publisher(spark, sqlite_database, tmp_path)
    h.install("usr")
    h.insert_usr(1, fname="Ann")
    h.poll()
    h.published()
    sql(h, "UPDATE {usr} SET fname = 'Bob' WHERE idu = 1")
    with monkeypatch.context() as lost:
        lost.setattr(planning, "acknowledge_runs", lose_acknowledgement)
        with pytest.raises(StageFailedError, match="acknowledge"):
            h.poll()
    assert [kind for kind, *_ in h.published().describe()] == ["modify"]
    sql(h, "UPDATE {usr} SET lname = 'Lee' WHERE idu = 1")
    assert h.poll().events == 1
    assert h.poll().events == 1
    assert h.poll().idle
    assert verify(h.config, h.engine) == []
    assert not (h.output / WINDOW_FILE).exists()


def lose_acknowledgement(*args, **kwargs):
    raise ConnectionError("the database went away before the statuses were committed")
