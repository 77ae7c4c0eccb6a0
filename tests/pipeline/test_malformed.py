"""Malformed event log rows (docs/concepts/keys-and-values.md): each gets status E, is not published, and
has a line in rejects.jsonl with its record_id and a reason naming the problem; none of them
stops the cycle, and the valid rows read with them still publish.

All of it happens in one cycle, because cycles are what cost time.
"""
from __future__ import annotations

from harness import Harness
from lxml import etree
from xml_compare import assert_same_xml

# (event row, fragments the reason must contain)
MALFORMED = [
    ((0, "usr", "idu=1"), ["event_type"]),
    ((9, "usr", "idu=1"), ["event_type"]),
    ((4, "usr", "idu="), ["position 4", "value"]),
    ((4, "usr", 'idu="abc'), ["position", "unterminated"]),
    ((4, "usr", "uid=1"), ["'uid'", "key column"]),
    ((4, "usr", "idu=abc"), ["'idu'", "integer"]),
    ((4, "nosuch", "idu=1"), ["'nosuch'", "does not exist"]),
    ((1, "usr", "idu=1", "nocol", None, "v"), ["'nocol'", "column"]),
    ((2, "usr", "idu=1", None, "a", "b"), ["column_name"]),
    ((7, "usr", "idu=1"), ["column_name"]),
    ((1, "usr", "idu=4", "photo", None, "qq?="), ["photo", "base64"]),
    ((1, "usr", "idu=4", "age", None, "old"), ["age", "integer"]),
    ((2, "usr", "idu=4", "age", "30", "thirty-one"), ["new_value", "age", "integer"]),
    ((1, "usr", "idu=4", "active", None, "maybe"), ["active", "boolean"]),
    ((1, "usr", "idu=4", "born", None, "yesterday"), ["born", "date-time"]),
]
SQLITE_ONLY = [((("x", "usr", "idu=1")), ["event_type", "'x'"])]


def test_malformed_rows_are_rejected_and_valid_rows_still_publish(spark, cycle_path, database, tmp_path):
    h = Harness(spark, database, tmp_path, path=cycle_path)
    h.create_usr()
    h.create_event_log()
    malformed = MALFORMED + (SQLITE_ONLY if h.dialect == "sqlite" else [])

    (first,) = h.log((1, "usr", "idu=1", "fname", None, "Ann"))
    bad_ids = h.log(*[row for row, _ in malformed[:8]])
    (deleted,) = h.log((4, "usr", "idu= 2"))
    bad_ids += h.log(*[row for row, _ in malformed[8:]])
    (idu4,) = h.log((1, "usr", "idu=4", "fname", None, "Dee"))
    expected_reason = dict(zip(bad_ids, (fragments for _, fragments in malformed)))

    result = h.poll()

    assert result.events == len(malformed) + 3
    assert result.statuses == {"S": 3, "E": len(malformed)}
    assert result.rejected == len(malformed)
    assert h.statuses() == {first: "S", deleted: "S", idu4: "S", **{i: "E" for i in bad_ids}}

    published = h.published()
    assert published.describe() == [
        ("add", h.association("idu=1"), first),
        ("delete", h.association("idu=2"), deleted),
        ("add", h.association("idu=4"), idu4),
    ]
    # the rejected rows of idu=4 take nothing into its add
    assert_same_xml(published.operations[2], etree.fromstring(
        f'<add class-name="usr"><association>{h.association("idu=4")}</association>'
        '<add-attr attr-name="fname"><value type="string">Dee</value></add-attr></add>'
    ))

    rejects = h.rejects()
    assert sorted(r["record_id"] for r in rejects) == sorted(bad_ids)
    for reject in rejects:
        reason = reject["reason"]
        for fragment in expected_reason[reject["record_id"]]:
            assert fragment in reason, (reject["record_id"], fragment, reason)

    assert h.poll().idle  # E rows are not read again
    assert len(h.rejects()) == len(malformed)


def test_an_empty_event_type_in_a_sites_own_event_log_says_so(spark, postgresql_database, tmp_path):
    """`install` makes event_type NOT NULL; a site's own event log may not."""
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_usr()
    h.create_event_log()
    h.db.execute(f"ALTER TABLE {h.table('event_log')} ALTER COLUMN event_type DROP NOT NULL")
    (empty,) = h.log((None, "usr", "idu=1"))
    (valid,) = h.log((1, "usr", "idu=2", "fname", None, "Bo"))
    h.poll()
    assert h.statuses() == {empty: "E", valid: "S"}
    assert [r["reason"] for r in h.rejects()] == ["event_type is empty (NULL); it must be one of 1..8"]
