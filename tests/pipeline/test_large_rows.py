"""Rows of any size the database holds: published up to `publisher.max_row_bytes`, rejected
above it without being read whole, and never in the way of the rows after them."""
from __future__ import annotations

import dataclasses
import os

from conftest import spark_on_one_database
from harness import Harness
from sqlalchemy import text

from publisher.service.mirror import verify

PHOTO = os.urandom(2 << 20)
"""A 2 MiB photo: 2.8 MB of base64 in one event log row, more than one parse block."""


def publishing(h: Harness) -> Harness:
    """Triggers on usr, its photo as large as the database allows, and a publisher user other
    than the tables' writer."""
    if h.dialect == "mariadb":
        h.db.execute(f"ALTER TABLE {h.table('usr')} MODIFY photo LONGBLOB")
    h.config = dataclasses.replace(h.config, database=dataclasses.replace(h.config.database, user="publisher_app"))
    h.install("usr")
    return h


def set_photo(h: Harness, idu: int, photo: bytes) -> None:
    with h.engine.begin() as conn:
        conn.execute(text(f"UPDATE {h.table('usr')} SET photo = :photo WHERE idu = :idu"), {"photo": photo, "idu": idu})


@spark_on_one_database("sqlite")
def test_a_photo_of_two_megabytes_is_published_and_mirrored(harness):
    h = publishing(harness)
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Jack'), (2, 'Jill')")
    set_photo(h, 1, PHOTO)
    h.db.execute(f"UPDATE {h.table('usr')} SET lname = 'Hill' WHERE idu = 2")
    result = h.poll()
    assert result.statuses == {"S": result.events} and result.rejected == 0
    assert set(h.statuses().values()) == {"S"}
    assert verify(h.config, h.engine) == []


@spark_on_one_database("postgresql")
def test_a_row_over_the_limit_is_rejected_with_its_size_and_the_rows_after_it_publish(harness):
    h = harness
    h.reconfigure(max_row_bytes=100_000)
    big = "x" * 150_000
    ids = h.log(*((1, "usr", f"idu={n}", "fname", None, big if n == 2 else f"name {n}") for n in (1, 2, 3)))
    result = h.poll()
    assert h.statuses() == {ids[0]: "S", ids[1]: "E", ids[2]: "S"}
    assert result.rejected == 1
    (line,) = h.rejects()
    assert line["record_id"] == ids[1] and line["table_key"] == "idu=2" and line["column_name"] == "fname"
    size = len(big) + len("usr") + len("idu=2") + len("fname")
    assert line["reason"].startswith(f"row of {size} bytes is over publisher.max_row_bytes (100000)")
    assert line["new_value"] is None, "a value over the limit is not read"
    published = {association for _, association, _ in h.published().describe()}
    assert published == {h.association("idu=1"), h.association("idu=3")}


@spark_on_one_database("mariadb")
def test_a_row_at_the_limit_is_published(harness):
    h = harness
    value = "y" * 5_000
    (rid,) = h.log((1, "usr", "idu=1", "fname", None, value))
    h.reconfigure(max_row_bytes=len(value) + len("usr") + len("idu=1") + len("fname"))
    assert h.poll().statuses == {"S": 1}
    assert h.statuses() == {rid: "S"}


def test_a_subscriber_passes_a_row_over_the_limit_into_its_rejects(spark, sqlite_database, tmp_path):
    """SQLite keeps a VARCHAR(64) value of any length: the trigger logs the long name whole."""
    from test_subscriptions import ALL, Site

    site = Site(spark, sqlite_database, tmp_path, ALL, {"hr": "all"}, settings="max_row_bytes = 10000")
    site.change("INSERT INTO {usr} VALUES (1, 'a', NULL)")
    site.change("INSERT INTO {usr} VALUES (2, '" + "n" * 20_000 + "', NULL)")
    site.change("INSERT INTO {usr} VALUES (3, 'c', NULL)")
    summary = site.check_out("hr")
    assert summary["statuses"].get("E") == 1
    keys = {association.split(",")[0] for _, association, _ in site.operations("hr")}
    assert keys == {"idu=1", "idu=3"}
    (line,) = (tmp_path / "hr" / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    assert '"table_key": "idu=2"' in line and "over publisher.max_row_bytes (10000)" in line
