"""`verify --repair`: after changes the triggers never saw, exactly the objects that differ are
published again (an add, a whole-state modify or a delete), and `verify` is then clean."""
from __future__ import annotations

import pytest
from harness import Harness, drain
from sqlalchemy import text

from publisher.service.mirror import check
from publisher.service.repair import publish_now, repair, repair_consumer, repairs

PUBLISHER_USER = "publisher_app"


def harness_for(spark, database, tmp_path, style: str) -> Harness:
    h = Harness(spark, database, tmp_path, user=PUBLISHER_USER, tables=())
    h.db.execute(f"CREATE TABLE {h.table('usr')} (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64))")
    h.install("usr", style=style)
    return h


def behind_the_triggers(h: Harness, *statements: str, style: str) -> None:
    """Changes the capture does not see: PostgreSQL's replica role skips the triggers; elsewhere
    they are dropped around the statements and installed again."""
    if h.dialect == "postgresql":
        with h.engine.begin() as conn:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            for statement in statements:
                conn.execute(text(statement))
        return
    names = [name for (name,) in h.db.rows(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'usr'" if h.dialect == "sqlite" else
        f"SELECT trigger_name FROM information_schema.triggers WHERE event_object_schema = '{h.db.schema}' "
        "AND event_object_table = 'usr'")]
    assert names, "the table carries the publisher's triggers"
    h.db.execute(*(f"DROP TRIGGER {h.table(name)}" for name in names), *statements)
    h.install("usr", style=style)


@pytest.mark.parametrize("style", ["field", "row"])
def test_repair_publishes_only_the_differing_objects_and_verify_is_then_clean(spark, database, tmp_path, style):
    h = harness_for(spark, database, tmp_path, style)
    usr = h.table("usr")
    h.db.execute(*(f"INSERT INTO {usr} VALUES ({i}, 'f{i}', 'l{i}')" for i in range(1, 9)))
    drain(h)
    h.published()
    behind_the_triggers(
        h,
        f"UPDATE {usr} SET fname = 'changed' WHERE idu = 2",
        f"UPDATE {usr} SET lname = NULL WHERE idu = 3",
        f"DELETE FROM {usr} WHERE idu = 4",
        f"INSERT INTO {usr} VALUES (20, 'new', NULL)",
        style=style,
    )
    found = check(h.config, h.engine).differences
    assert {d.association for d in found} == {h.association(f"idu={i}") for i in (2, 3, 4, 20)}

    done = repair(h.config, h.engine, found)
    assert done.events == {"usr": {"replace": 2, "delete": 1, "add": 1}}
    assert publish_now(h.config, h.engine)
    published = h.published().describe()
    assert sorted((tag, association) for tag, association, _ in published) == sorted([
        ("modify", h.association("idu=2")), ("modify", h.association("idu=3")),
        ("delete", h.association("idu=4")), ("modify", h.association("idu=20")),
    ])
    after = check(h.config, h.engine)
    assert (after.differences, after.pending) == ([], 0)
    # Changes through the triggers go on as before.
    h.db.execute(f"UPDATE {usr} SET fname = 'again' WHERE idu = 20", f"DELETE FROM {usr} WHERE idu = 2")
    drain(h)
    assert check(h.config, h.engine).differences == []


def test_repair_leaves_out_what_publishing_again_cannot_change(spark, sqlite_database, tmp_path):
    """An <add> the consumer refused stays in the documents' history, and a value that cannot be
    published stays so: a repair logs nothing for them, only for the objects whose state differs."""
    h = harness_for(spark, sqlite_database, tmp_path, "row")
    h.reconfigure(insert_row_operation="add")
    usr = h.table("usr")
    h.db.execute(f"INSERT INTO {usr} VALUES (1, 'a', 'b')", f"INSERT INTO {usr} VALUES (2, 'c', 'd')")
    drain(h)
    h.log((5, "usr", "idu=1"))  # a second add of the same object, in a cycle of its own
    drain(h)
    h.db.execute(f"UPDATE {usr} SET fname = 'bad' || char(1) WHERE idu = 2")  # no XML can carry it
    drain(h)
    found = check(h.config, h.engine).differences
    assert sorted(d.expected.split(":")[0] for d in found) == ["cannot be published", "no <add> while it exists"]
    assert repairs(found) == {}


def test_repair_publishes_the_waiting_events_first_and_repairs_only_what_they_never_bring(spark, postgresql_database,
                                                                                          tmp_path):
    h = harness_for(spark, postgresql_database, tmp_path, "field")
    usr = h.table("usr")
    h.db.execute(*(f"INSERT INTO {usr} VALUES ({i}, 'f{i}', 'l{i}')" for i in range(1, 6)))
    drain(h)
    behind_the_triggers(h, f"UPDATE {usr} SET fname = 'hidden' WHERE idu = 1", style="field")
    h.db.execute(f"UPDATE {usr} SET lname = 'seen' WHERE idu = 2")  # logged, not yet published
    reports = []
    outcome = repair_consumer(h.config, h.engine, h.output, report=reports.append)
    assert [(len(r.differences), r.pending) for r in reports] == [(2, 1), (1, 0)]
    assert outcome.logged is not None and outcome.logged.events == {"usr": {"replace": 1}}
    assert outcome.published and outcome.final.differences == []
