"""Rows of any size the database holds: published up to `publisher.max_row_bytes`, rejected
above it without being read whole, and never in the way of the rows after them."""
from __future__ import annotations

import dataclasses
import os

from harness import Harness
from sqlalchemy import text

from publisher.service.mirror import verify

PHOTO = os.urandom(2 << 20)
"""A 2 MiB photo: 2.8 MB of base64 in one event log row, more than one parse block."""


def publishing(h: Harness) -> Harness:
    """Triggers on usr, and a publisher user other than the tables' writer."""
    h.config = dataclasses.replace(h.config, database=dataclasses.replace(h.config.database, user="publisher_app"))
    h.install("usr")
    return h


def set_photo(h: Harness, idu: int, photo: bytes) -> None:
    with h.engine.begin() as conn:
        conn.execute(text(f"UPDATE {h.table('usr')} SET photo = :photo WHERE idu = :idu"), {"photo": photo, "idu": idu})


def test_a_photo_of_two_megabytes_is_published_and_mirrored(harness):
    h = publishing(harness)
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Jack'), (2, 'Jill')")
    set_photo(h, 1, PHOTO)
    h.db.execute(f"UPDATE {h.table('usr')} SET lname = 'Hill' WHERE idu = 2")
    result = h.poll()
    assert result.statuses == {"S": result.events} and result.rejected == 0
    assert set(h.statuses().values()) == {"S"}
    assert verify(h.config, h.engine) == []


def test_a_row_over_the_limit_is_rejected_with_its_size_and_the_rows_after_it_publish(harness):
    h = publishing(harness)
    h.reconfigure(max_row_bytes=100_000)
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (1, 'Jack')")
    set_photo(h, 1, PHOTO)
    h.db.execute(f"INSERT INTO {h.table('usr')} (idu, fname) VALUES (2, 'Jill')")
    result = h.poll()
    statuses = h.statuses()
    rejected = [rid for rid, status in statuses.items() if status == "E"]
    assert len(rejected) == 1 and result.rejected == 1
    assert [rid for rid, status in statuses.items() if status != "S"] == rejected
    (line,) = h.rejects()
    assert line["record_id"] == rejected[0] and line["column_name"] == "photo"
    assert "over publisher.max_row_bytes (100000)" in line["reason"]
    size = int(line["reason"].split()[2])
    assert size > len(PHOTO) * 4 // 3
    assert line["new_value"] is None and line["table_key"] == "idu=1"
    assert max(statuses) > rejected[0]
    assert h.association("idu=2") in {association for _, association, _ in h.published().describe()}
