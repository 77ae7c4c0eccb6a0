"""Triggerless buckets whose values pass what one Arrow array of text holds (2 GiB): the state's
rows written out in batches bounded by bytes, a bucket's differences compared as `large_string`
and published in parts. What a cycle publishes does not depend on where the parts are cut."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest
from harness import read_change_tables
from test_triggerless import binary, class_config, create_class_tables, create_tables, cycle

from publisher.config import ChangeTablesConfig, Config, DatabaseConfig
from publisher.model.catalog import PublishedTables, reflect_catalog
from publisher.pipeline.queryback import QueryBackContext
from publisher.service.mirror import verify
from publisher.triggerless import buckets as comparison_buckets
from publisher.triggerless import differences as comparison_differences
from publisher.triggerless import state as comparison_state
from publisher.triggerless import table_scan
from publisher.triggerless.state import BucketWriter, TableLayout, read_bucket


def test_a_writer_writes_out_its_rows_once_they_pass_the_bytes_a_batch_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(comparison_state, "FLUSH_BYTES", 2500)
    layout = TableLayout("doc", (("id", "string"),), (("body", "string"),), buckets=1)
    writer = BucketWriter(tmp_path, 0, layout)
    for row in range(5):
        writer.write([pa.array([f"k{row}"])], [pa.array([str(row) * 1000])])
    writer.close()
    files = sorted((tmp_path / "t0").glob("b*.arrow"))
    assert len(files) == 1
    batches = pa.ipc.open_file(pa.memory_map(str(files[0]))).num_record_batches
    assert batches == 2, "1000 bytes a row: written out at the third row, then at the close"
    rows = read_bucket(tmp_path, 0, layout, 0, 1)
    assert rows.column("k0").to_pylist() == [f"k{row}" for row in range(5)]
    assert rows.column("v0").to_pylist() == [str(row) * 1000 for row in range(5)]


def test_differences_are_cut_into_parts_of_at_most_the_bytes_a_part_holds(monkeypatch):
    """Rows in order, each part's texts (NULLs none) at most PART_BYTES, a longer row a part of
    its own; texts compared as `large_string` are `string` again in each part."""
    monkeypatch.setattr(comparison_buckets, "PART_BYTES", 6)
    differences = pa.table({
        "k0": pa.array(["a", "b", "c", "d", "e", "f"], pa.large_string()),
        "o0": pa.chunked_array([pa.array(["xx", None, "0123456789"]), pa.array([None, "y", ""])]),
        "n0": pa.array([1, 2, 3, 4, 5, 6]),
    })  # bytes of text a row: 3, 1, 11, 1, 2, 1
    parts = list(comparison_buckets.parts_of(differences))
    assert [part.column("k0").to_pylist() for part in parts] == [["a", "b"], ["c"], ["d", "e", "f"]]
    assert {part.schema.field("k0").type for part in parts} == {pa.string()}
    assert [part.column("n0").to_pylist() for part in parts] == [[1, 2], [3], [4, 5, 6]]


def _cycle_in_parts(config: Config, db) -> tuple[dict, list]:
    """A cycle with every limit at its least: each gathered row written out, every text column
    compared as `large_string`, each difference published in a part of its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(comparison_state, "FLUSH_BYTES", 1)
        patch.setattr(comparison_differences, "LARGE_BYTES", 0)
        patch.setattr(comparison_buckets, "PART_BYTES", 1)
        return cycle(config, db)


def _without_time(summary: dict) -> dict:
    return {name: value for name, value in summary.items() if name != "seconds"}


def test_a_bucket_published_in_parts_publishes_what_it_publishes_whole(database, tmp_path):
    """Adds, modifies of some columns, NULLs, binary values, deletes, a key changed, a class's
    child values and references, change tables: the same operations under the same event-ids,
    the same change rows, in either case."""
    db = database
    q = db.qualified
    create_tables(db)
    create_class_tables(db)
    base = class_config(db, tmp_path)
    base = dataclasses.replace(base, publisher=dataclasses.replace(
        base.publisher, tables=("acct", "slot", "person", "team")), output=dataclasses.replace(
        base.output, change_tables=ChangeTablesConfig(enabled=True)))
    whole = base
    parts = dataclasses.replace(base, output=dataclasses.replace(base.output, directory=str(tmp_path / "parts")))
    steps = [
        [f"INSERT INTO {q('acct')} VALUES (1, 'ann', 30, '2024-05-01 10:00:00', {binary(db, '00ff')})",
         f"INSERT INTO {q('acct')} VALUES (2, 'bob', NULL, NULL, NULL)",
         f"INSERT INTO {q('acct')} (id, name) VALUES (3, 'cy')",
         f"INSERT INTO {q('slot')} VALUES ('a b', '2024-01-31', 'first')",
         f"INSERT INTO {q('person')} VALUES (1, 'ann', NULL)", f"INSERT INTO {q('person')} VALUES (2, 'bob', 1)",
         f"INSERT INTO {q('person_phone')} VALUES (1, '555-1')", f"INSERT INTO {q('person_phone')} VALUES (1, '555-2')",
         f"INSERT INTO {q('team')} VALUES ('t1', 'ops')", f"INSERT INTO {q('team_member')} VALUES ('t1', 1)"],
        [f"UPDATE {q('acct')} SET name = 'anne', age = NULL WHERE id = 1",
         f"UPDATE {q('acct')} SET age = 41, photo = {binary(db, '01')} WHERE id = 2",
         f"DELETE FROM {q('acct')} WHERE id = 3",
         f"DELETE FROM {q('slot')} WHERE code = 'a b'",
         f"INSERT INTO {q('slot')} VALUES ('a b', '2024-02-29', 'first')",
         f"INSERT INTO {q('person_phone')} VALUES (2, '555-9')",
         f"DELETE FROM {q('person_phone')} WHERE phone = '555-1'",
         f"UPDATE {q('person')} SET name = 'bo', boss = NULL WHERE pid = 2",
         f"INSERT INTO {q('team_member')} VALUES ('t1', 2)"],
        [f"DELETE FROM {q('person')} WHERE pid = 1", f"UPDATE {q('acct')} SET seen = '2025-01-02 03:04:05'"],
    ]
    for statements in steps:
        db.execute(*statements)
        summary, operations = cycle(whole, db)
        summary_in_parts, operations_in_parts = _cycle_in_parts(parts, db)
        assert operations and operations_in_parts == operations
        assert _without_time(summary_in_parts) == _without_time(summary)
    assert _untimed(read_change_tables(Path(parts.output.directory))) == _untimed(
        read_change_tables(Path(whole.output.directory)))


def _untimed(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Change rows without when each cycle read (a change number begins with it)."""
    return {name: [{**row, "header__change_seq": row["header__change_seq"][-19:], "header__timestamp": None}
                   for row in rows] for name, rows in tables.items()}


def test_a_table_of_large_values_is_cut_into_buckets_by_bytes_as_well_as_rows(database, tmp_path, monkeypatch):
    """A first read counts the rows alone; the next cuts the table by the bytes the last one
    read too, and publishes across the new buckets what changed, as any bucket count does."""
    monkeypatch.setattr(comparison_state, "BUCKET_BYTES", 2000)
    db = database
    q = db.qualified
    create_tables(db)
    config = dataclasses.replace(class_config(db, tmp_path), classes={})
    config = dataclasses.replace(config, publisher=dataclasses.replace(config.publisher, tables=("acct",)))
    db.execute(*(f"INSERT INTO {q('acct')} (id, name) VALUES ({row}, '{row:03d}{'x' * 37}')" for row in range(100)))
    state = comparison_state.ComparisonState(Path(config.output.directory))
    summary, _ = cycle(config, db)
    assert summary["tables"]["acct"]["add"] == 100
    first = state.current().tables[0]
    assert first.buckets == 1 and 100 * 40 < first.bytes < 100 * 80
    db.execute(f"UPDATE {q('acct')} SET age = id WHERE id < 5", f"DELETE FROM {q('acct')} WHERE id = 7")
    summary, operations = cycle(config, db)
    assert state.current().tables[0].buckets == 4, "4 KB and more in buckets of 2 KB"
    assert summary["tables"]["acct"] == {"rows": 99, "add": 0, "modify": 5, "delete": 1}
    assert sorted(key for _, key, _, _ in operations) == [f"id={row}" for row in (0, 1, 2, 3, 4, 7)]
    assert verify(config, db.engine) == []


@pytest.mark.parametrize("dialect", ["sqlite", "mariadb"])
def test_a_cursor_fetches_rows_of_large_values_a_few_at_a_time(dialect, request, monkeypatch):
    """Where no COPY reads the table, the first fetch takes a few rows, and each next one as many
    as make about SCAN_BYTES at the size of the rows just read, every row read once, in order."""
    monkeypatch.setattr(table_scan, "FIRST_ROWS", 3)
    monkeypatch.setattr(table_scan, "SCAN_BYTES", 50_000)
    db = request.getfixturevalue(f"{dialect}_database")
    db.execute(f"CREATE TABLE {db.qualified('doc')} (id INTEGER PRIMARY KEY, body TEXT)",
               *(f"INSERT INTO {db.qualified('doc')} VALUES ({row}, '{'x' * (10_000 if row < 20 else 10)}')"
                 for row in range(40)))
    catalog = reflect_catalog(db.engine, db.schema, PublishedTables(("doc",), True))
    ctx = QueryBackContext(DatabaseConfig(url=db.url).sqlalchemy_url(), db.schema, catalog.tables)
    batches = list(table_scan.scan_table_columns(ctx, catalog.tables["doc"], 15))
    assert [len(batch) for batch in batches] == [3, 4, 4, 4, 4, 4, 15, 2]
    assert [key for batch in batches for key in batch.keys[0].to_pylist()] == [str(row) for row in range(40)]
