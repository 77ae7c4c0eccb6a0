"""Triggerless publication: no triggers, no event log; each cycle compares the published tables
with the state the previous one kept, and publishes what changed.

The oracles are the consumer mirror (`verify`: the documents replayed equal the tables) and each
cycle's operations, read from its documents, against the DML the test made between cycles."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hunting import HUNT, property_settings
from lxml import etree
from test_crash import MARKER_TIMEOUT, kill_session

from publisher.cli import main
from publisher.config import (
    Config,
    DatabaseConfig,
    OutputConfig,
    PublicationMode,
    PublisherSettings,
    StartupOption,
)
from publisher.config.loading import load_config
from publisher.database import association_schema
from publisher.service.mirror import verify
from publisher.service.repair import repairs
from publisher.triggerless import cycle as comparison
from publisher.triggerless import state as comparison_state
from publisher.triggerless.cycle import run_comparison_cycle
from publisher.triggerless.state import ForeignStateError

BINARY = {"sqlite": "BLOB", "postgresql": "BYTEA", "mariadb": "VARBINARY(64)"}
HEX = {"sqlite": "x'{}'", "postgresql": "'\\x{}'::bytea", "mariadb": "x'{}'"}


def create_tables(db) -> None:
    """`acct`, keyed by one integer, with text, a number, a date-time and binary; `slot`, keyed
    by text and a date (a compound key of two types), with one value column."""
    db.execute(
        f"CREATE TABLE {db.qualified('acct')} (id INTEGER PRIMARY KEY, name VARCHAR(40), age INTEGER, "
        f"seen TIMESTAMP NULL, photo {BINARY[db.dialect]})",
        f"CREATE TABLE {db.qualified('slot')} (code VARCHAR(20) NOT NULL, day DATE NOT NULL, note VARCHAR(40), "
        "PRIMARY KEY (code, day))",
    )


def binary(db, hex_digits: str) -> str:
    return HEX[db.dialect].format(hex_digits)


def config_of(db, tmp_path: Path, **settings) -> Config:
    settings = {"tables": ("acct", "slot"), "batch_size": 5, **settings}
    publisher = PublisherSettings(publication_mode=PublicationMode.TRIGGERLESS, **settings)
    return Config(database=DatabaseConfig(url=db.url, schema=db.schema), publisher=publisher,
                  output=OutputConfig(directory=str(tmp_path / "out")))


def documents(output: Path, after: set[str] | None = None) -> list[Path]:
    return [p for p in sorted(output.glob("*.xml")) if after is None or p.name not in after]


def operations(paths: list[Path]) -> list[tuple[str, str, str, dict[str, tuple[list[str], list[str]]]]]:
    """(kind, association, event-id, {attribute: (removed values, added values)}) of each operation."""
    found = []
    for path in paths:
        for op in etree.parse(str(path)).getroot().find("input"):
            attrs: dict[str, tuple[list[str], list[str]]] = {}
            for attr in op.iter("add-attr", "modify-attr"):
                removed = [v.text or "" for v in attr.iterfind("remove-value/value")]
                added = [v.text or "" for v in attr.iterfind("add-value/value")] + \
                    [v.text or "" for v in attr.iterfind("value")]
                attrs[attr.get("attr-name")] = (removed, added)
            found.append((op.tag, op.findtext("association").split(",table=")[0], op.get("event-id"), attrs))
    return found


@pytest.fixture(params=["driver", "spark"])
def on_spark(request, spark, monkeypatch):
    """Each test using it runs its cycles once in the driver and once with every bucket compared
    by a Spark task (every table counted large)."""
    if request.param == "driver":
        return None
    monkeypatch.setattr(comparison, "PARALLEL_ROWS", 0)
    monkeypatch.setattr(comparison, "DRIVER_MASTERS", ())
    monkeypatch.setattr(comparison_state, "BUCKET_ROWS", 3)
    return lambda: spark


def cycle(config: Config, db, spark=None) -> tuple[dict, list]:
    """One cycle; its summary and the operations of the documents it wrote."""
    output = Path(config.output.directory)
    before = {p.name for p in documents(output)} if output.exists() else set()
    result = run_comparison_cycle(spark, db.engine, config)
    return result.summary(), operations(documents(output, before))


def test_a_first_cycle_publishes_every_row_then_exactly_what_changed(database, tmp_path, on_spark):
    db = database
    create_tables(db)
    db.execute(
        f"INSERT INTO {db.qualified('acct')} VALUES (1, 'ann', 30, '2024-05-01 10:00:00', {binary(db, '00ff')})",
        f"INSERT INTO {db.qualified('acct')} VALUES (2, 'bob', NULL, NULL, NULL)",
        f"INSERT INTO {db.qualified('slot')} VALUES ('a b', '2024-01-31', 'first')",
    )
    config = config_of(db, tmp_path)
    summary, ops = cycle(config, db, on_spark)
    assert summary["tables"]["acct"] == {"rows": 2, "add": 2, "modify": 0, "delete": 0}
    assert [(kind, key) for kind, key, _, _ in ops] == [
        ("add", "id=1"), ("add", "id=2"), ("add", "code=a b+day=2024-01-31")]
    assert ops[0][3]["photo"] == ([], ["AP8="]) and ops[0][3]["name"] == ([], ["ann"])
    assert set(ops[1][3]) == {"name"}, "a NULL is no attribute"
    assert verify(config, db.engine) == []

    db.execute(
        f"UPDATE {db.qualified('acct')} SET name = 'anne', age = NULL WHERE id = 1",
        f"UPDATE {db.qualified('acct')} SET age = 41, photo = {binary(db, '01')} WHERE id = 2",
        f"DELETE FROM {db.qualified('slot')} WHERE code = 'a b'",
        f"INSERT INTO {db.qualified('slot')} VALUES ('a b', '2024-02-29', 'first')",
        f"INSERT INTO {db.qualified('acct')} (id, name) VALUES (3, 'cy')",
    )
    summary, ops = cycle(config, db, on_spark)
    by_key = {key: (kind, attrs) for kind, key, _, attrs in ops}
    assert by_key["id=1"] == ("modify", {"name": (["ann"], ["anne"]), "age": (["30"], [])})
    assert by_key["id=2"] == ("modify", {"age": ([], ["41"]), "photo": ([], ["AQ=="])})
    assert by_key["id=3"] == ("add", {"name": ([], ["cy"])})
    assert by_key["code=a b+day=2024-01-31"][0] == "delete", "a key changed: the old object deleted"
    assert by_key["code=a b+day=2024-02-29"] == ("add", {"note": ([], ["first"])})
    assert len(ops) == 5
    assert verify(config, db.engine) == []

    summary, ops = cycle(config, db, on_spark)
    assert ops == [] and summary["operations"] == 0, "nothing changed, nothing published"


def test_startup_option_future_records_the_tables_and_publishes_only_later_changes(database, tmp_path, on_spark):
    db = database
    create_tables(db)
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'n{i}')" for i in range(1, 6)))
    config = config_of(db, tmp_path, startup_option=StartupOption.FUTURE)
    summary, ops = cycle(config, db, on_spark)
    assert ops == [] and summary["recorded_only"] and summary["tables"]["acct"]["rows"] == 5
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'x' WHERE id = 4")
    summary, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "id=4", {"name": (["n4"], ["x"])})]


def test_event_ids_grow_from_cycle_to_cycle_and_never_repeat(sqlite_database, tmp_path):
    db = sqlite_database
    create_tables(db)
    config = config_of(db, tmp_path)
    seen: list[int] = []
    for round_ in range(4):
        db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({round_ * 10 + i}, 'n')"
                     for i in range(7)))
        _, ops = cycle(config, db)
        seen += [int(event_id) for _, _, event_id, _ in ops]
    assert seen == sorted(seen) and len(set(seen)) == len(seen) == 28


def test_a_state_kept_for_other_tables_or_another_key_is_refused(database, tmp_path):
    db = database
    create_tables(db)
    db.execute(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES (1, 'a')")
    config = config_of(db, tmp_path)
    cycle(config, db)
    other = config_of(db, tmp_path)
    other = Config(database=other.database, output=other.output,
                   publisher=PublisherSettings(publication_mode=PublicationMode.TRIGGERLESS, tables=("acct",)))
    with pytest.raises(ForeignStateError, match=r"kept for the tables \['acct', 'slot'\].*move .* away"):
        run_comparison_cycle(None, db.engine, other)
    db.execute(f"DROP TABLE {db.qualified('slot')}",
               f"CREATE TABLE {db.qualified('slot')} (code VARCHAR(20) NOT NULL, day DATE NOT NULL, note VARCHAR(40), "
               "PRIMARY KEY (code))")
    with pytest.raises(ForeignStateError, match=r"keys table slot by \['code', 'day'\], and its key is now \['code'\]"):
        run_comparison_cycle(None, db.engine, config)
    assert len(documents(Path(config.output.directory))) == 1, "nothing published by a refused cycle"


PRECISION = {
    "postgresql": ("ALTER TABLE {t} ALTER COLUMN d TYPE NUMERIC(10, 2)",
                   "ALTER TABLE {t} ALTER COLUMN at TYPE TIMESTAMP(0)"),
    "mariadb": ("ALTER TABLE {t} MODIFY d DECIMAL(10, 2)", "ALTER TABLE {t} MODIFY at DATETIME(0)"),
}


@pytest.mark.parametrize("dialect", ["postgresql", "mariadb"])
def test_a_key_whose_text_changes_with_its_column_type_is_the_same_object(dialect, request, tmp_path):
    """An ALTER that changes a key column's scale or precision changes the database's text of
    every key (1.5000 becomes 1.50) and no key's value: nothing is published, and the consumer
    keeps every object (compared by raw text, each was added and deleted in one document)."""
    db = request.getfixturevalue(f"{dialect}_database")
    t = db.qualified("m")
    moment = "DATETIME(6)" if dialect == "mariadb" else "TIMESTAMP(6)"
    db.execute(f"CREATE TABLE {t} (d DECIMAL(12, 4) NOT NULL, at {moment} NOT NULL, v INTEGER, PRIMARY KEY (d, at))",
               f"INSERT INTO {t} VALUES (1.5, '2026-01-02 03:04:05', 1), (-2, '2026-01-02 03:04:05', 2)")
    config = config_of(db, tmp_path, tables=("m",))
    summary, ops = cycle(config, db)
    assert sorted(key for _, key, _, _ in ops) == ["d=-2+at=2026-01-02 03:04:05", "d=1.5+at=2026-01-02 03:04:05"]
    db.execute(*(sql.format(t=t) for sql in PRECISION[dialect]))
    summary, ops = cycle(config, db)
    assert ops == [] and summary["tables"]["m"] == {"rows": 2, "add": 0, "modify": 0, "delete": 0}
    db.execute(f"UPDATE {t} SET v = 3 WHERE d = 1.5")
    _, ops = cycle(config, db)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("modify", "d=1.5+at=2026-01-02 03:04:05", {"v": (["1"], ["3"])})]
    assert verify(config, db.engine) == []


def test_a_state_kept_for_another_schema_or_by_an_earlier_version_is_refused(postgresql_database, tmp_path):
    """Two configurations that differ only in their schema must not share a state: the second
    would publish the first's objects as deleted under its own names. A state from before keys
    were kept canonically is refused too, rather than read as every object's key changed."""
    db = postgresql_database
    create_tables(db)
    config = config_of(db, tmp_path)
    cycle(config, db)
    elsewhere = f"{db.schema}_b"
    db.execute(f'CREATE SCHEMA "{elsewhere}"')
    try:
        create_tables(dataclasses.replace(db, schema=elsewhere))
        other = Config(database=DatabaseConfig(url=db.url, schema=elsewhere), publisher=config.publisher,
                       output=config.output)
        with pytest.raises(ForeignStateError, match=rf"kept for the tables of postgresql:{db.schema}, and this "
                                                    rf"configuration reads those of postgresql:{elsewhere}"):
            run_comparison_cycle(None, db.engine, other)
    finally:
        db.execute(f'DROP SCHEMA "{elsewhere}" CASCADE')
    state = comparison_state.ComparisonState(Path(config.output.directory))
    current = state.current()
    assert current is not None and current.canonical_keys
    manifest = current.directory / comparison_state.MANIFEST_FILE
    kept = json.loads(manifest.read_text())
    del kept["keys"]
    manifest.write_text(json.dumps(kept))
    with pytest.raises(ForeignStateError, match=r"kept by an earlier version, which spelled keys as the database"):
        run_comparison_cycle(None, db.engine, config)


def test_a_column_added_or_dropped_is_published_as_its_values_changing(database, tmp_path, on_spark):
    db = database
    create_tables(db)
    db.execute(f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (1, 'a', 5)",
               f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (2, 'b', NULL)")
    config = config_of(db, tmp_path)
    cycle(config, db, on_spark)
    db.execute(f"ALTER TABLE {db.qualified('acct')} ADD COLUMN city VARCHAR(20)",
               f"UPDATE {db.qualified('acct')} SET city = 'Oslo' WHERE id = 1")
    _, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "id=1", {"city": ([], ["Oslo"])})]
    db.execute(f"ALTER TABLE {db.qualified('acct')} DROP COLUMN age")
    _, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "id=1", {"age": (["5"], [])})]
    assert verify(config, db.engine) == []


def test_a_table_that_outgrows_its_buckets_is_compared_all_the_same(sqlite_database, tmp_path, monkeypatch):
    db = sqlite_database
    monkeypatch.setattr(comparison_state, "BUCKET_ROWS", 4)
    create_tables(db)
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'n{i}')" for i in range(1, 4)))
    config = config_of(db, tmp_path)
    cycle(config, db)
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'n{i}')" for i in range(4, 40)),
               f"UPDATE {db.qualified('acct')} SET name = 'z' WHERE id = 2")
    _, ops = cycle(config, db)
    assert sorted(key for _, key, _, _ in ops) == sorted(f"id={i}" for i in (2, *range(4, 40)))
    db.execute(f"DELETE FROM {db.qualified('acct')} WHERE id > 3")
    _, ops = cycle(config, db)
    assert {kind for kind, _, _, _ in ops} == {"delete"} and len(ops) == 36
    assert verify(config, db.engine) == []


def test_a_value_that_cannot_be_published_is_rejected_and_the_rest_of_the_row_published(sqlite_database, tmp_path):
    db = sqlite_database
    create_tables(db)
    db.execute(f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (1, 'bell' || char(7), 3)")
    config = config_of(db, tmp_path)
    summary, ops = cycle(config, db)
    assert summary["rejected"] == 1
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("add", "id=1", {"age": ([], ["3"])})]
    (line,) = (Path(config.output.directory) / "rejects.jsonl").read_text().splitlines()
    reject = json.loads(line)
    assert (reject["table_name"], reject["table_key"], reject["column_name"]) == ("acct", "id=1", "name")
    assert "XML" in reject["reason"] or "character" in reject["reason"]
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'other' || char(8) WHERE id = 1")
    summary, ops = cycle(config, db)
    assert ops == [] and summary["operations"] == 0, "one value no document carries for another: nothing to say"
    assert len((Path(config.output.directory) / "rejects.jsonl").read_text().splitlines()) == 2


def test_a_blob_sqlite_keeps_in_a_text_column_is_published_as_its_bytes(sqlite_database, tmp_path):
    """SQLite keeps any value in any column: a BLOB whose bytes are no UTF-8 in a VARCHAR column
    is published as base64 of its bytes (as a string attribute's binary value is), one that is
    UTF-8 as its text, and the read goes on; the mirror agrees."""
    db = sqlite_database
    create_tables(db)
    db.execute(f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (1, X'FF00', 3)",
               f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (2, X'616263', 4)",
               f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (3, 'plain', 5)")
    config = config_of(db, tmp_path)
    summary, ops = cycle(config, db)
    assert summary["rejected"] == 0
    assert {key: attrs["name"] for _, key, _, attrs in ops} == {
        "id=1": ([], ["/wA="]), "id=2": ([], ["abc"]), "id=3": ([], ["plain"])}
    db.execute(f"UPDATE {db.qualified('acct')} SET name = X'FE' WHERE id = 3")
    _, ops = cycle(config, db)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "id=3", {"name": (["plain"], ["/g=="])})]
    assert verify(config, db.engine) == []


def test_text_or_a_number_sqlite_keeps_in_a_blob_column_is_published_as_its_bytes(sqlite_database, tmp_path):
    """A BLOB column may hold text: its value is the text's UTF-8 bytes, never the text taken
    for base64 (`abcd` is valid base64 of other bytes; `hello world` is not, and was lost)."""
    db = sqlite_database
    create_tables(db)
    db.execute(f"INSERT INTO {db.qualified('acct')} (id, photo) VALUES (1, 'abcd'), (2, 'hello world'), (3, 12), "
               f"(4, X'00FF')")
    config = config_of(db, tmp_path)
    summary, ops = cycle(config, db)
    assert summary["rejected"] == 0
    assert {key: attrs["photo"] for _, key, _, attrs in ops} == {
        "id=1": ([], ["YWJjZA=="]), "id=2": ([], ["aGVsbG8gd29ybGQ="]), "id=3": ([], ["MTI="]), "id=4": ([], ["AP8="])}
    assert verify(config, db.engine) == []


def test_a_mariadb_bit_column_is_refused_as_install_refuses_it(mariadb_database, tmp_path):
    """A BIT value has no text: read as characters it published b'01000001' as 'A' and lost
    b'00000101' to the rejects. Refused at start, with what to do, and nothing published."""
    db = mariadb_database
    db.execute(f"CREATE TABLE {db.qualified('flags')} (k VARCHAR(20) PRIMARY KEY, b BIT(8))",
               f"INSERT INTO {db.qualified('flags')} VALUES ('B', b'01000001')")
    config = config_of(db, tmp_path, tables=("flags",))
    with pytest.raises(ForeignStateError, match=r"column 'b' is of BIT type, whose values have no text to publish; "
                                                r"publish it through a view or a generated column"):
        run_comparison_cycle(None, db.engine, config)
    assert not list(Path(config.output.directory).glob("*.xml"))


def _poll_process(config: Path, failpoint: str | None = None, markers: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    if failpoint is not None:
        env.update(PUBLISHER_FAILPOINT=failpoint, PUBLISHER_FAILPOINT_DIR=str(markers))
    return subprocess.Popen([sys.executable, "-m", "publisher.cli", "poll", "-c", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)


def write_config(db, tmp_path: Path, extra: str = "") -> Path:
    schema = f'schema = "{db.schema}"\n' if db.schema else ""
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "{db.url}"\n{schema}'
                    f'[publisher]\npublication_mode = "triggerless"\ntables = ["acct", "slot"]\nbatch_size = 5\n{extra}'
                    f'[output]\ndirectory = "{tmp_path / "out"}"\n', encoding="utf-8")
    return path


@pytest.mark.process
def test_killed_between_the_documents_and_the_state_the_cycle_is_published_again_alike(database, tmp_path, capsys):
    db = database
    create_tables(db)
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'n{i}')" for i in range(1, 13)))
    path = write_config(db, tmp_path)
    assert main(["poll", "-c", str(path)]) == 0
    output = tmp_path / "out"
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'x' WHERE id < 8", f"DELETE FROM {db.qualified('acct')} "
               "WHERE id = 12")
    markers = tmp_path / "markers"
    markers.mkdir()
    before = {p.name for p in documents(output)}
    process = _poll_process(path, "triggerless_state", markers)
    try:
        deadline = time.monotonic() + MARKER_TIMEOUT
        while not (markers / "triggerless_state.reached").exists():
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "triggerless_state not reached"
            time.sleep(0.1)
    finally:
        kill_session(process.pid)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    first = operations(documents(output, before))
    assert len(first) == 8
    capsys.readouterr()
    assert main(["verify", "-c", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "mirror equals source" in shown, "the documents were written before the kill"
    assert "was interrupted before keeping it; the next poll publishes that read again" in shown
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'later' WHERE id = 1")
    shown = {p.name for p in documents(output)}
    assert main(["poll", "-c", str(path)]) == 0
    again = operations(documents(output, shown))
    assert again == first, "the same comparison, under the same event-ids: a consumer drops the repeat"
    assert main(["poll", "-c", str(path)]) == 0
    assert verify(config_of(db, tmp_path), db.engine) == []
    capsys.readouterr()
    assert main(["verify", "-c", str(path)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_the_command_line_refuses_what_triggerless_cannot_do(sqlite_database, tmp_path, capsys):
    db = sqlite_database
    create_tables(db)
    path = write_config(db, tmp_path)
    for command in (["install"], ["snapshot"], ["purge"], ["verify", "--repair"]):
        assert main([*command, "-c", str(path)]) == 2, command
        assert "triggerless" in capsys.readouterr().err
    assert main(["poll", "-c", str(path), "--subscriber", "x"]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[database]\nurl = "{db.url}"\n[publisher]\npublication_mode = "triggerless"\n', encoding="utf-8")
    assert main(["poll", "-c", str(bad)]) == 2
    assert "publisher.tables" in capsys.readouterr().err
    loop = write_config(db, tmp_path, "allow_loopback = true\n")
    assert main(["poll", "-c", str(loop)]) == 2
    assert "perpetrator" in capsys.readouterr().err
    formats = write_config(db, tmp_path)
    formats.write_text(formats.read_text(encoding="utf-8") + "[output.change_tables]\nenabled = true\n"
                       '[classes.acct.multi_valued]\nphone = "acct_phone.phone"\n', encoding="utf-8")
    assert main(["poll", "-c", str(formats)]) == 2
    assert "multi-valued attributes" in capsys.readouterr().err
    missing = write_config(db, tmp_path, 'startup_option = "later"\n')
    assert main(["poll", "-c", str(missing)]) == 2
    assert "'resync', 'future'" in capsys.readouterr().err


def test_a_table_named_that_does_not_exist_is_a_configuration_error(sqlite_database, tmp_path, capsys):
    db = sqlite_database
    create_tables(db)
    db.execute(f"DROP TABLE {db.qualified('slot')}")
    assert main(["poll", "-c", str(write_config(db, tmp_path))]) == 2
    assert "slot" in capsys.readouterr().err


# --- the mirror property, in this mode ------------------------------------------------------------



def run_triggerless_scenario(scenario, root: Path) -> tuple[list, str]:
    """The scenario's tables, no capture; its DML with a triggerless cycle at each poll (its
    batch_size), one more at the end; the differences `verify` finds, and the case as text."""
    import dataclasses
    import shutil
    import tempfile

    from schemas import SCRATCH, Execution, Runner, case_text, fresh_database

    folder = Path(tempfile.mkdtemp(dir=SCRATCH if SCRATCH.is_dir() else root))
    try:
        with fresh_database(scenario.dialect, folder) as db:
            ddl = [t.ddl() for t in scenario.tables]
            runner = Runner(db)
            with runner.transaction() as conn:
                for statement in ddl:
                    runner.run(conn, statement)
            config = config_of(db, folder)
            config = dataclasses.replace(config, classes=scenario.classes(), publisher=dataclasses.replace(
                config.publisher, tables=tuple(scenario.published)))

            def poll(step) -> None:
                settings = dataclasses.replace(config.publisher, batch_size=step.batch_size)
                run_comparison_cycle(None, db.engine, dataclasses.replace(config, publisher=settings))

            execution = Execution(runner, scenario.tables, poll, scenario.children)
            for step in scenario.steps:
                execution.step(step)
            run_comparison_cycle(None, db.engine, config)
            case = case_text(scenario.dialect, "triggerless", "driver", ddl, execution.script)
            return [str(d) for d in verify(config, db.engine)], case
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mariadb"])
def test_consumer_mirror_equals_the_tables_in_triggerless_mode(dialect, tmp_path):
    """The generated schemas and DML of the mirror property (keys of every type, compound and
    key-only tables, NULLs, deletes and re-inserts), compared at random moments instead of
    captured: the consumer ends with the tables, bar the values no document can carry, which
    `verify` names as such."""
    from hypothesis import given, settings
    from schemas import scenarios

    from publisher.service.mirror import CANNOT_PUBLISH

    @settings(**property_settings(HUNT or 25))
    @given(scenarios(dialect))
    def check(scenario):
        differences, case = run_triggerless_scenario(scenario, tmp_path)
        assert [d for d in differences if CANNOT_PUBLISH not in d] == [], case

    check()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mariadb"])
def test_consumer_mirror_equals_logical_classes_in_triggerless_mode(dialect, tmp_path):
    """The same with the logical scenarios of the mirror property: parents with child tables
    (values added, removed, moved between parents, parents deleted and re-inserted with them)
    and references, compared at random moments."""
    from hypothesis import given, settings
    from schemas import allowed, logical_scenarios

    from publisher.service.mirror import CANNOT_PUBLISH

    @settings(**property_settings(HUNT or 20))
    @given(logical_scenarios(dialect, allowed(dialect, "row")))
    def check(scenario):
        differences, case = run_triggerless_scenario(scenario, tmp_path)
        assert [d for d in differences if CANNOT_PUBLISH not in d] == [], case

    check()


def in_cycle(ops) -> list:
    """Operations with their event-ids' place in the cycle (bucket and place) alone."""
    return [(kind, key, int(event_id) & 0xFFFFFFFF, attrs) for kind, key, event_id, attrs in ops]


def test_the_driver_and_spark_publish_the_same_operations_under_the_same_event_ids(
        postgresql_database, spark, tmp_path, monkeypatch):
    """Two publishers of the same tables, one comparing every bucket in the driver, the other
    each on a Spark task: after every change, the same operations in the same order, under the
    same event-ids but for their generation (each output numbers its own)."""
    assert not comparison.on_spark("local[*]", 10**9, 100) and comparison.on_spark("spark://h:7077", 10**7, 4)
    db = postgresql_database
    monkeypatch.setattr(comparison_state, "BUCKET_ROWS", 5)
    create_tables(db)
    driver = config_of(db, tmp_path / "driver")
    on_spark = config_of(db, tmp_path / "spark")
    steps = [
        [f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES ({i}, 'n{i}', {i % 4})" for i in range(40)],
        [f"UPDATE {db.qualified('acct')} SET age = NULL WHERE id % 3 = 0",
         f"DELETE FROM {db.qualified('acct')} WHERE id % 7 = 1",
         f"INSERT INTO {db.qualified('slot')} VALUES ('x', '2024-01-01', 'n')"],
        [f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'again') ON CONFLICT (id) DO UPDATE "
         "SET name = 'again'" for i in range(0, 60, 5)],
    ]
    for statements in steps:
        db.execute(*statements)
        _, by_driver = cycle(driver, db)
        monkeypatch.setattr(comparison, "DRIVER_MASTERS", ())
        monkeypatch.setattr(comparison, "PARALLEL_ROWS", 0)
        _, by_spark = cycle(on_spark, db, lambda: spark)
        monkeypatch.setattr(comparison, "DRIVER_MASTERS", ("local",))
        monkeypatch.setattr(comparison, "PARALLEL_ROWS", 1_000_000)
        assert in_cycle(by_spark) == in_cycle(by_driver) and by_driver
    assert verify(driver, db.engine) == [] and verify(on_spark, db.engine) == []


# --- what a trial on schemas of its own found ---------------------------------------------------


def event_ids(ops) -> list[int]:
    return [int(event_id) for _, _, event_id, _ in ops]


def test_a_key_no_document_can_carry_is_rejected_and_its_table_published_all_the_same(postgresql_database, tmp_path):
    db = postgresql_database
    db.execute(f"CREATE TABLE {db.qualified('ck')} (k TEXT PRIMARY KEY, v TEXT)",
               f"INSERT INTO {db.qualified('ck')} VALUES ('a' || chr(2), 'x'), ('b', 'ok')")
    config = config_of(db, tmp_path, tables=("ck",))
    summary, ops = cycle(config, db)
    assert [(kind, key) for kind, key, _, _ in ops] == [("add", "k=b")] and summary["rejected"] == 1
    assert "key cannot be published" in (tmp_path / "out" / "rejects.jsonl").read_text()
    db.execute(f"DELETE FROM {db.qualified('ck')} WHERE v = 'x'", f"UPDATE {db.qualified('ck')} SET v = 'new'")
    _, ops = cycle(config, db)
    assert [(kind, key) for kind, key, _, _ in ops] == [("modify", "k=b")], "a bucket whose rejected key went"


def test_columns_and_tables_whose_names_differ_only_in_case_stay_apart(postgresql_database, tmp_path):
    db = postgresql_database
    db.execute(f'CREATE TABLE {db.qualified("t")} (id INT PRIMARY KEY, "V" TEXT, v TEXT)',
               f"INSERT INTO {db.qualified('t')} VALUES (1, 'upper', 'lower')",
               f'CREATE TABLE {db.qualified(chr(34) + "T" + chr(34))} (id INT PRIMARY KEY)',
               f'INSERT INTO {db.qualified(chr(34) + "T" + chr(34))} VALUES (2)')
    config = config_of(db, tmp_path, tables=("T", "t"))
    summary, _ = cycle(config, db)
    assert (summary["tables"]["T"]["add"], summary["tables"]["t"]["add"]) == (1, 1)
    db.execute(f'ALTER TABLE {db.qualified("t")} DROP COLUMN "V"')
    _, ops = cycle(config, db)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "id=1", {"V": (["upper"], [])})]
    assert verify(config, db.engine) == []


def test_a_state_moved_away_starts_again_under_event_ids_never_used_in_its_output(sqlite_database, tmp_path):
    import shutil

    db = sqlite_database
    create_tables(db)
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'n')" for i in range(3)))
    config = config_of(db, tmp_path)
    used = []
    for _ in range(3):
        db.execute(f"UPDATE {db.qualified('acct')} SET name = name || 'x'")
        used += event_ids(cycle(config, db)[1])
    shutil.move(tmp_path / "out" / comparison_state.STATE_DIRECTORY, tmp_path / "moved")
    future = dataclasses.replace(config, publisher=dataclasses.replace(config.publisher,
                                                                       startup_option=StartupOption.FUTURE))
    cycle(future, db)
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'later' WHERE id = 1")
    again = event_ids(cycle(future, db)[1])
    assert again and min(again) > max(used)
    assert verify(config, db.engine) == []


def test_a_state_an_earlier_version_kept_in_parquet_is_compared_and_replaced(sqlite_database, tmp_path):
    """The state was Parquet before it was Arrow IPC: such a state is read as it is, the next
    cycle publishes exactly what changed since, and the state it keeps is IPC."""
    import pyarrow.parquet as pq

    db = sqlite_database
    create_tables(db)
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name, photo) VALUES ({i}, 'n{i}', {binary(db, '0a0b')})"
                 for i in range(40)))
    config = config_of(db, tmp_path)
    cycle(config, db)
    state = tmp_path / "out" / comparison_state.STATE_DIRECTORY
    kept = sorted(state.glob("g*/t*/b*.arrow"))
    assert kept
    for path in kept:
        pq.write_table(comparison_state.read_state_file(path), path.with_suffix(".parquet"))
        path.unlink()
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'changed' WHERE id = 7",
               f"DELETE FROM {db.qualified('acct')} WHERE id = 9")
    _, ops = cycle(config, db)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("modify", "id=7", {"name": (["n7"], ["changed"])}), ("delete", "id=9", {})]
    assert not list(state.glob("g*/t*/b*.parquet")) and list(state.glob("g*/t*/b*.arrow"))
    assert cycle(config, db)[1] == []
    assert verify(config, db.engine) == []


def test_a_row_longer_than_a_copy_block_is_read_whole(postgresql_database, tmp_path):
    db = postgresql_database
    db.execute(f"CREATE TABLE {db.qualified('big')} (k INT PRIMARY KEY, v TEXT)",
               f"INSERT INTO {db.qualified('big')} VALUES (1, repeat('x', 3000000)), (2, 'small')")
    config = config_of(db, tmp_path, tables=("big",))
    _, ops = cycle(config, db)
    assert sorted(key for _, key, _, _ in ops) == ["k=1", "k=2"]
    assert verify(config, db.engine) == []


def test_rows_that_share_a_key_are_rejected_and_the_others_published(sqlite_database, tmp_path):
    """SQLite's untyped key columns hold 1 and '1', which read alike: no object can be told apart
    by that key, so no row of it is published (each cycle says so), and nothing churns."""
    db = sqlite_database
    db.execute("CREATE TABLE dup (a, b, v, PRIMARY KEY (a, b))",
               "INSERT INTO dup VALUES (1, '1', 'x'), ('1', 1, 'y'), (2, 2, 'z'), (NULL, 3, 'n')")
    config = config_of(db, tmp_path, tables=("dup",))
    summary, ops = cycle(config, db)
    assert [(kind, key) for kind, key, _, _ in ops] == [("add", "a=2+b=2")]
    reasons = [json.loads(line)["reason"] for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert len(reasons) == 2
    assert any("2 rows share this key" in r for r in reasons) and any("NULL" in r for r in reasons)
    summary, ops = cycle(config, db)
    assert ops == [], "rows that share a key do not come and go from cycle to cycle"
    db.execute("DELETE FROM dup WHERE v = 'y'")
    _, ops = cycle(config, db)
    assert [(kind, key) for kind, key, _, _ in ops] == [("add", "a=1+b=1")], "once one row's, it is published"


def test_a_key_shared_for_a_while_is_compared_with_what_the_consumer_holds(database, tmp_path, on_spark):
    """A view's key that rows share for some cycles publishes nothing meanwhile; then, one row's
    again, what changed since the consumer last had it (a modify, not an add it would refuse),
    and, its rows all gone, a delete. A key shared from its first cycle is added once one row's,
    and a column the view gained while a key was shared is published as added."""
    db = database
    q = db.qualified
    db.execute(f"CREATE TABLE {q('emp')} (id INTEGER PRIMARY KEY, code VARCHAR(40) NOT NULL, name VARCHAR(40))",
               f"INSERT INTO {q('emp')} VALUES (1, 'employee-code-long-0001', 'a'), "
               "(2, 'employee-code-long-0002', 'b'), (3, 'employee-code-long-0003', 'c'), "
               "(4, 'employee-code-long-0004', 'd'), (5, 'employee-code-long-0004', 'e')",
               f"CREATE VIEW {q('staff')} AS SELECT code AS pk_code, name FROM {q('emp')}")
    config = config_of(db, tmp_path, tables=("staff",), startup_option=StartupOption.RESYNC)
    spark = on_spark
    _, ops = cycle(config, db, spark)
    assert sorted(key for _, key, _, _ in ops) == [f"pk_code=employee-code-long-000{i}" for i in (1, 2, 3)]
    db.execute(f"INSERT INTO {q('emp')} VALUES (6, 'employee-code-long-0001', 'x'), "
               "(7, 'employee-code-long-0002', 'y')")
    _, ops = cycle(config, db, spark)
    assert ops == [], "a key shared now is left as the consumer holds it"
    found = verify(config, db.engine)
    assert {(d.association.split(",table=")[0], d.attribute, d.expected, d.published) for d in found} == {
        (f"pk_code=employee-code-long-000{i}", None, "no one object: 2 rows of staff share this key",
         "absent" if i == 4 else "present") for i in (1, 2, 4)}, "verify says why it cannot compare them"
    assert repairs(found) == {}, "publishing a shared key's row again cannot make it one object"
    db.execute(f"UPDATE {q('emp')} SET name = 'a2' WHERE id = 1", f"DELETE FROM {q('emp')} WHERE id = 6",
               f"DELETE FROM {q('emp')} WHERE code = 'employee-code-long-0002'")
    _, ops = cycle(config, db, spark)
    assert sorted((kind, key, attrs) for kind, key, _, attrs in ops) == [
        ("delete", "pk_code=employee-code-long-0002", {}),
        ("modify", "pk_code=employee-code-long-0001", {"name": (["a"], ["a2"])}),
    ]
    db.execute(f"INSERT INTO {q('emp')} VALUES (8, 'employee-code-long-0003', 'z')")
    _, ops = cycle(config, db, spark)
    assert ops == []
    db.execute(f"DROP VIEW {q('staff')}",
               f"CREATE VIEW {q('staff')} AS SELECT code AS pk_code, name, id AS num FROM {q('emp')}",
               f"DELETE FROM {q('emp')} WHERE id IN (3, 5)")
    _, ops = cycle(config, db, spark)
    assert sorted((kind, key, attrs) for kind, key, _, attrs in ops) == [
        ("add", "pk_code=employee-code-long-0004", {"name": ([], ["d"]), "num": ([], ["4"])}),
        ("modify", "pk_code=employee-code-long-0001", {"num": ([], ["1"])}),
        ("modify", "pk_code=employee-code-long-0003", {"name": (["c"], ["z"]), "num": ([], ["8"])}),
    ]
    assert verify(config, db.engine) == []


def test_a_class_whose_key_was_shared_for_a_while_publishes_the_values_changed_meanwhile(database, tmp_path):
    """The child rows of a key shared for a while are compared, once it is one row's again, with
    the values the consumer holds, not with those read while it was shared."""
    from publisher.config import ClassConfig

    db = database
    q = db.qualified
    db.execute(f"CREATE TABLE {q('pbase')} (id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, name VARCHAR(40))",
               f"CREATE TABLE {q('pview_phone')} (pk_pid INTEGER NOT NULL, phone VARCHAR(20) NOT NULL, "
               "PRIMARY KEY (pk_pid, phone))",
               f"INSERT INTO {q('pbase')} VALUES (1, 1, 'a'), (2, 2, 'b')",
               f"INSERT INTO {q('pview_phone')} VALUES (1, '111'), (2, '222')",
               f"CREATE VIEW {q('pview')} AS SELECT pid AS pk_pid, name FROM {q('pbase')}")
    config = dataclasses.replace(
        config_of(db, tmp_path, tables=("pview",), startup_option=StartupOption.RESYNC),
        classes={"pview": ClassConfig(multi_valued={"phone": "pview_phone.phone"})})
    _, ops = cycle(config, db)
    assert sorted((kind, key) for kind, key, _, _ in ops) == [("add", "pk_pid=1"), ("add", "pk_pid=2")]
    db.execute(f"INSERT INTO {q('pbase')} VALUES (3, 1, 'x')",
               f"INSERT INTO {q('pview_phone')} VALUES (1, '112')",
               f"DELETE FROM {q('pview_phone')} WHERE phone = '111'")
    _, ops = cycle(config, db)
    assert ops == []
    db.execute(f"DELETE FROM {q('pbase')} WHERE id = 3")
    _, ops = cycle(config, db)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("modify", "pk_pid=1", {"phone": (["111"], ["112"])})]
    assert verify(config, db.engine) == []


# --- logical classes -----------------------------------------------------------------------------


def create_class_tables(db) -> None:
    """`person` with a manager (a reference to another person) and phones (a child table with a
    foreign key); `team` whose members (a child table without one) are persons."""
    q = db.qualified
    db.execute(
        f"CREATE TABLE {q('person')} (pid INTEGER PRIMARY KEY, name VARCHAR(40), boss INTEGER)",
        f"CREATE TABLE {q('person_phone')} (pid INTEGER NOT NULL REFERENCES {q('person')} (pid) ON DELETE CASCADE, "
        "phone VARCHAR(20) NOT NULL, PRIMARY KEY (pid, phone))",
        f"CREATE TABLE {q('team')} (tid VARCHAR(10) PRIMARY KEY, title VARCHAR(40))",
        f"CREATE TABLE {q('team_member')} (tid VARCHAR(10) NOT NULL, pid INTEGER NOT NULL, PRIMARY KEY (tid, pid))",
    )


def class_config(db, tmp_path: Path) -> Config:
    from publisher.config import ClassConfig

    config = config_of(db, tmp_path, tables=("person", "team"))
    return dataclasses.replace(config, classes={
        "person": ClassConfig(multi_valued={"phone": "person_phone.phone"}, references={"boss": "person"}),
        "team": ClassConfig(multi_valued={"member": "team_member.pid"}, references={"member": "person"}),
    })


def test_a_logical_class_publishes_its_child_rows_as_values_added_and_removed(database, tmp_path, on_spark):
    """A new object's <add> carries its values; a child row inserted or deleted is a value added
    or removed of its parent's <modify>, alone or beside a column's change; a parent deleted
    with its children one <delete>; references the associations of the objects they name."""
    db = database
    q = db.qualified
    create_class_tables(db)
    config = class_config(db, tmp_path)
    label = association_schema(config, db.engine)
    db.execute(f"INSERT INTO {q('person')} VALUES (1, 'ann', NULL)", f"INSERT INTO {q('person')} VALUES (2, 'bob', 1)",
               f"INSERT INTO {q('person_phone')} VALUES (1, '555-1')",
               f"INSERT INTO {q('person_phone')} VALUES (1, '555-2')",
               f"INSERT INTO {q('team')} VALUES ('t1', 'ops')", f"INSERT INTO {q('team_member')} VALUES ('t1', 1)",
               f"INSERT INTO {q('team_member')} VALUES ('t1', 9)")
    summary, ops = cycle(config, db, on_spark)
    assert summary["dangling_references"] == 1, "team t1's member 9 names no person"
    by_key = {key: (kind, attrs) for kind, key, _, attrs in ops}
    assert by_key["pid=1"] == ("add", {"name": ([], ["ann"]), "phone": ([], ["555-1", "555-2"])})
    assert by_key["pid=2"][1]["boss"] == ([], [f"pid=1,table=person,schema={label}"])
    assert by_key["tid=t1"][1]["member"] == ([], [f"pid=1,table=person,schema={label}",
                                                  f"pid=9,table=person,schema={label}"])
    refs = [(v.get("type"), v.get("association-ref")) for p in documents(Path(config.output.directory))
            for v in etree.parse(str(p)).getroot().iter("value") if v.text and v.text.startswith("pid=")]
    assert sorted(refs, key=str) == sorted([("dn", f"pid=1,table=person,schema={label}")] * 2 + [("dn", None)],
                                           key=str)

    db.execute(f"INSERT INTO {q('person_phone')} VALUES (2, '555-9')",
               f"DELETE FROM {q('person_phone')} WHERE phone = '555-1'",
               f"UPDATE {q('person')} SET name = 'bo' WHERE pid = 2", f"DELETE FROM {q('team_member')} WHERE pid = 9")
    summary, ops = cycle(config, db, on_spark)
    assert summary["dangling_references"] == 1, "the member removed is published as the value it was"
    assert sorted((kind, key, attrs) for kind, key, _, attrs in ops) == [
        ("modify", "pid=1", {"phone": (["555-1"], [])}),
        ("modify", "pid=2", {"name": (["bob"], ["bo"]), "phone": ([], ["555-9"])}),
        ("modify", "tid=t1", {"member": ([f"pid=9,table=person,schema={label}"], [])}),
    ]
    db.execute(f"DELETE FROM {q('person_phone')} WHERE pid = 2", f"DELETE FROM {q('person')} WHERE pid = 2")
    _, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("delete", "pid=2", {})]
    _, ops = cycle(config, db, on_spark)
    assert ops == []
    assert verify(config, db.engine) == []


SAME_SECOND = {"sqlite": "TIMESTAMP", "postgresql": "TIMESTAMP", "mariadb": "DATETIME(6)"}


def test_two_child_rows_that_publish_one_value_keep_it_while_either_is_left(database, tmp_path, on_spark):
    """Two timestamps of one second are two child rows and one published value (XDS times are
    whole seconds): removing one row must not take the value from the consumer while the other
    holds it, nor may a new object's <add> carry it twice. The hunt's case (PostgreSQL, a key of
    an integer and an interval), on every database."""
    from publisher.config import ClassConfig

    db = database
    q = db.qualified
    db.execute(f"CREATE TABLE {q('usr')} (id INTEGER PRIMARY KEY, name VARCHAR(10))",
               f"CREATE TABLE {q('usr_seen')} (id INTEGER NOT NULL, seen {SAME_SECOND[db.dialect]} NOT NULL, "
               "PRIMARY KEY (id, seen))")
    config = config_of(db, tmp_path, tables=("usr",))
    config = dataclasses.replace(config, classes={"usr": ClassConfig(multi_valued={"seen": "usr_seen.seen"})})
    one, other, later = "'2000-01-01 00:00:00.000001'", "'2000-01-01 00:00:00.000002'", "'2000-01-01 00:00:01'"
    db.execute(f"INSERT INTO {q('usr')} VALUES (1, 'a')", f"INSERT INTO {q('usr_seen')} VALUES (1, {one})",
               f"INSERT INTO {q('usr_seen')} VALUES (1, {other})")
    _, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("add", "id=1", {"name": ([], ["a"]), "seen": ([], ["946684800"])})]
    db.execute(f"DELETE FROM {q('usr_seen')} WHERE seen = {one}")
    _, ops = cycle(config, db, on_spark)
    assert ops == [], "the value is still held by the other row"
    assert verify(config, db.engine) == []
    db.execute(f"UPDATE {q('usr_seen')} SET seen = {one} WHERE seen = {other}",
               f"INSERT INTO {q('usr_seen')} VALUES (1, {later})")
    _, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "id=1", {"seen": ([], ["946684801"])})]
    db.execute(f"DELETE FROM {q('usr_seen')} WHERE seen = {one}", f"UPDATE {q('usr')} SET name = 'b'")
    _, ops = cycle(config, db, on_spark)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("modify", "id=1", {"name": (["a"], ["b"]), "seen": (["946684800"], [])})]
    assert verify(config, db.engine) == []


# --- stats and metrics ---------------------------------------------------------------------------


def test_stats_shows_the_state_the_consumer_holds_and_what_the_last_cycle_published(database, tmp_path, capsys):
    db = database
    create_tables(db)
    path = write_config(db, tmp_path)
    assert main(["stats", "-c", str(path)]) == 0
    assert "none kept yet" in capsys.readouterr().out
    db.execute(*(f"INSERT INTO {db.qualified('acct')} (id, name) VALUES ({i}, 'n{i}')" for i in range(1, 8)))
    assert main(["poll", "-c", str(path)]) == 0
    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'x' WHERE id < 3", f"DELETE FROM {db.qualified('acct')} "
               "WHERE id = 7")
    assert main(["poll", "-c", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    generation = summary["generation"]
    (cycle,) = summary["file_cycles"]  # the numbers its documents' names begin with, said beside the generation
    written = sorted(p.name for p in (tmp_path / "out").glob("*.xml"))
    assert [name for name in written if name.startswith(f"{cycle:012d}-")] == written[-summary["documents"]:]
    assert summary["documents"] > 0 and cycle > generation
    assert main(["stats", "-c", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["generation"] == generation and report["interrupted_read"] is None
    assert report["tables"]["acct"]["rows"] == 6 and report["tables"]["slot"]["rows"] == 0
    assert 0 <= report["kept_age_seconds"] < 600
    assert report["last_cycle"]["tables"]["acct"] == {"rows": 6, "add": 0, "modify": 2, "delete": 1}
    assert main(["stats", "-c", str(path)]) == 0
    shown = capsys.readouterr().out
    assert f"generation {generation}" in shown and "3 operations (0 add, 2 modify, 1 delete)" in shown
    assert main(["stats", "-c", str(path), "--prometheus"]) == 0
    from test_metrics import samples, value

    found = samples(capsys.readouterr().out)
    assert value(found, "publisher_triggerless_generation", subscriber="") == generation
    assert value(found, "publisher_triggerless_rows", subscriber="", table="acct", attribute="") == 6


@pytest.mark.process
def test_run_serves_the_cycles_and_the_state_as_metrics(sqlite_database, tmp_path):
    from harness import publisher_run
    from test_metrics import free_port, scrape, value

    db = sqlite_database
    create_class_tables(db)
    port = free_port()
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "{db.url}"\n[publisher]\npublication_mode = "triggerless"\n'
                    'tables = ["person"]\npolling_interval = 0.3\n'
                    '[classes.person.multi_valued]\nphone = "person_phone.phone"\n'
                    f'[output]\ndirectory = "{tmp_path / "out"}"\n[metrics]\nport = {port}\n'
                    '[subscriptions.all]\ntables = ["person"]\noperations = ["delete"]\n'
                    f'[subscribers.audit]\nsubscription = "all"\noutput = "{tmp_path / "audit"}"\n', encoding="utf-8")
    db.execute(*(f"INSERT INTO person VALUES ({i}, 'p{i}', NULL)" for i in range(1, 5)),
               "INSERT INTO person_phone VALUES (1, '1'), (1, '2'), (2, '3')")
    log_path = tmp_path / "run.log"
    found = None
    with publisher_run(path, log_path) as run:
        deadline = time.monotonic() + 90
        changed = False
        while time.monotonic() < deadline:
            assert run.poll() is None, log_path.read_text()
            found = scrape(port)
            if found and value(found, "publisher_operations_total", subscriber="", kind="add") == 4 and not changed:
                db.execute("DELETE FROM person_phone WHERE phone = '2'", "DELETE FROM person WHERE pid = 4")
                changed = True
            if found and value(found, "publisher_operations_total", subscriber="", kind="delete") == 1:
                break
            time.sleep(0.2)
    assert found is not None, log_path.read_text()
    assert value(found, "publisher_operations_total", subscriber="", kind="modify") == 1, log_path.read_text()
    assert value(found, "publisher_triggerless_rows", subscriber="", table="person", attribute="") == 3
    assert value(found, "publisher_triggerless_rows", subscriber="", table="person", attribute="phone") == 2
    assert (value(found, "publisher_triggerless_generation", subscriber="") or 0) >= 2
    assert value(found, "publisher_lock_held", subscriber="") == 1
    assert value(found, "publisher_lock_held", subscriber="audit") == 1
    assert (value(found, "publisher_triggerless_generation", subscriber="audit") or 0) >= 1
    assert [(kind, key) for kind, key, _, _ in operations(documents(tmp_path / "audit"))] in ([], [("delete", "pid=4")])
    assert (value(found, "publisher_cycle_stage_duration_seconds_count", subscriber="", stage="compare") or 0) >= 2
    assert run.returncode == 0, log_path.read_text()


# --- subscribers ---------------------------------------------------------------------------------


def subscriber_config(db, tmp_path: Path) -> Path:
    """The status mode publishes acct and slot; subscriber `hr` tracks acct's name only, inserts and
    deletes only; subscriber `teams` tracks team, whose members reference persons it does not track."""
    path = write_config(db, tmp_path)
    text = path.read_text(encoding="utf-8").replace('tables = ["acct", "slot"]',
                                                    'tables = ["acct", "slot", "person", "team"]')
    text += (f'[subscriptions.people]\ntables = ["acct"]\ncolumns = {{ acct = ["name"] }}\n'
             f'operations = ["insert", "delete"]\n'
             f'[subscriptions.teams]\ntables = ["team"]\n'
             f'[subscribers.hr]\nsubscription = "people"\noutput = "{tmp_path / "hr"}"\n'
             f'[subscribers.ops]\nsubscription = "teams"\noutput = "{tmp_path / "ops"}"\n'
             '[classes.person.multi_valued]\nphone = "person_phone.phone"\n'
             '[classes.team.multi_valued]\nmember = "team_member.pid"\n[classes.team.references]\nmember = "person"\n')
    path.write_text(text, encoding="utf-8")
    return path


def test_each_subscriber_compares_what_its_subscription_tracks_against_a_state_of_its_own(database, tmp_path, capsys):
    db = database
    q = db.qualified
    create_tables(db)
    create_class_tables(db)
    path = subscriber_config(db, tmp_path)
    db.execute(*(f"INSERT INTO {q('acct')} (id, name, age) VALUES ({i}, 'n{i}', {i})" for i in range(1, 5)),
               f"INSERT INTO {q('person')} VALUES (1, 'ann', NULL)", f"INSERT INTO {q('team')} VALUES ('t1', 'ops')",
               f"INSERT INTO {q('team_member')} VALUES ('t1', 1)", f"INSERT INTO {q('team_member')} VALUES ('t1', 2)")
    for reader in ([], ["--subscriber", "hr"], ["--subscriber", "ops"]):
        assert main(["poll", "-c", str(path), *reader]) == 0
    hr = operations(documents(tmp_path / "hr"))
    assert sorted((kind, key, attrs) for kind, key, _, attrs in hr) == [
        ("add", f"id={i}", {"name": ([], [f"n{i}"])}) for i in range(1, 5)]
    ops = operations(documents(tmp_path / "ops"))
    label = association_schema(load_config(path, environ={}), db.engine)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("add", "tid=t1", {"title": ([], ["ops"]), "member": ([], [f"pid=1,table=person,schema={label}",
                                                                  f"pid=2,table=person,schema={label}"])})]
    refs = [v.get("association-ref") for p in documents(tmp_path / "ops")
            for v in etree.parse(str(p)).getroot().iter("value") if v.text and v.text.startswith("pid=")]
    assert refs == [f"pid=1,table=person,schema={label}", None]  # person 2 does not exist

    db.execute(f"UPDATE {q('acct')} SET name = 'x', age = 0 WHERE id = 1", f"DELETE FROM {q('acct')} WHERE id = 2",
               f"INSERT INTO {q('acct')} (id, name) VALUES (9, 'n9')", f"UPDATE {q('acct')} SET age = 7 WHERE id = 3")
    before = {p.name for p in documents(tmp_path / "hr")}
    assert main(["poll", "-c", str(path), "--subscriber", "hr"]) == 0
    assert sorted((kind, key, attrs) for kind, key, _, attrs in operations(documents(tmp_path / "hr", before))) == [
        ("add", "id=9", {"name": ([], ["n9"])}), ("delete", "id=2", {})]  # the update is not tracked
    before = {p.name for p in documents(tmp_path / "hr")}
    assert main(["poll", "-c", str(path), "--subscriber", "hr"]) == 0
    assert documents(tmp_path / "hr", before) == []  # the untracked update advanced the state all the same
    assert main(["poll", "-c", str(path)]) == 0
    assert main(["verify", "-c", str(path)]) == 0
    assert main(["verify", "-c", str(path), "--subscriber", "ops"]) == 0
    capsys.readouterr()
    assert main(["stats", "-c", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tables"]["acct"]["rows"] == 4 and set(report["tables"]) == {"acct", "slot", "person", "team"}
    assert set(report["subscribers"]["hr"]["tables"]) == {"acct"}
    assert report["subscribers"]["ops"]["tables"]["team"]["attributes"]["member"]["rows"] == 2
    assert main(["checkin", "-c", str(path), "--subscriber", "hr", "-e", "SELECT 1"]) == 2
    assert "triggerless" in capsys.readouterr().err


# --- change tables and messages ------------------------------------------------------------------


def test_change_tables_and_messages_carry_what_the_comparison_found(database, tmp_path, on_spark):
    """An <add> an INSERT of every column, a <modify> an UPDATE of the columns that changed with
    their old values before it, a <delete> a DELETE of the key; numbered by their event-ids, in
    the documents' order; a cycle repeated after a crash writes the same files again."""
    from harness import read_change_tables, read_messages

    from publisher.config import ChangeTablesConfig, MessagesConfig

    db = database
    create_tables(db)
    config = config_of(db, tmp_path)
    config = dataclasses.replace(config, output=dataclasses.replace(
        config.output, change_tables=ChangeTablesConfig(enabled=True),
        messages=MessagesConfig(enabled=True)))
    output = Path(config.output.directory)
    db.execute(f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (1, 'ann', 30)",
               f"INSERT INTO {db.qualified('acct')} (id, name, age) VALUES (2, 'bob', 40)")
    summary, _ = cycle(config, db, on_spark)
    assert (summary["change_rows"], summary["messages"]) == (2, 2)
    db.execute(f"UPDATE {db.qualified('acct')} SET age = 31 WHERE id = 1",
               f"DELETE FROM {db.qualified('acct')} WHERE id = 2")
    summary, ops = cycle(config, db, on_spark)
    assert (summary["change_rows"], summary["messages"]) == (3, 2)  # the update's before-image is a row
    rows = read_change_tables(output)["acct"]
    prefix = "header__"
    assert [(r[prefix + "change_oper"], r["id"], r["name"], r["age"]) for r in rows] == [
        ("I", 1, "ann", 30), ("I", 2, "bob", 40), ("B", 1, None, 30), ("U", 1, None, 31), ("D", 2, None, None)]
    data = [m for m in read_messages(output) if "headers" in m]
    assert [(m["headers"]["operation"], m["data"]["id"]) for m in data] == [
        ("INSERT", 1), ("INSERT", 2), ("UPDATE", 1), ("DELETE", 2)]
    sequence = [m["headers"]["changeSequence"] for m in data]
    assert sequence == sorted(sequence) and len(set(sequence)) == 4
    assert [int(s[16:]) for s in sequence[2:]] == [int(event_id) for _, _, event_id, _ in ops]


    class Killed(Exception):
        pass

    def kill_at(name: str) -> None:
        if name == "triggerless_state":
            raise Killed

    db.execute(f"UPDATE {db.qualified('acct')} SET name = 'anne' WHERE id = 1")
    with pytest.MonkeyPatch.context() as patch:  # killed once the documents and the changes are durable
        patch.setattr(comparison.failpoints, "reached", kill_at)
        with pytest.raises(Killed):
            cycle(config, db, on_spark)
    written = read_change_tables(output)["acct"]
    summary, _ = cycle(config, db, on_spark)
    assert summary["repeated"] and summary["change_rows"] == 2
    assert read_change_tables(output)["acct"] == written  # the same files, written again
    assert [(r[prefix + "change_oper"], r["name"]) for r in written[5:]] == [("B", "ann"), ("U", "anne")]


def test_child_rows_link_to_their_parent_as_the_database_compares_them(mariadb_database, tmp_path):
    """Under MariaDB's case-insensitive, space-padded collation, child rows whose link differs from
    the parent's key only in case or trailing spaces belong to the parent (its foreign key says
    so): their values are published under the parent's key as the parent holds it."""
    db = mariadb_database
    q = db.qualified
    db.execute(f"CREATE TABLE {q('code')} (code VARCHAR(10) PRIMARY KEY, d VARCHAR(10))",
               f"CREATE TABLE {q('code_v')} (c VARCHAR(10), v VARCHAR(10), PRIMARY KEY (c, v), "
               f"FOREIGN KEY (c) REFERENCES {q('code')} (code) ON DELETE CASCADE)",
               f"INSERT INTO {q('code')} VALUES ('ab', 'x'), ('Straße', 'y')",
               f"INSERT INTO {q('code_v')} VALUES ('ab ', 'space'), ('AB', 'upper'), ('ab', 'plain'), "
               "('straße', 'lower')")
    from publisher.config import ClassConfig

    config = dataclasses.replace(config_of(db, tmp_path, tables=("code",)),
                                 classes={"code": ClassConfig(multi_valued={"v": "code_v.v"})})
    _, ops = cycle(config, db)
    assert {key: attrs["v"] for _, key, _, attrs in ops} == {
        "code=ab": ([], ["plain", "space", "upper"]), "code=Straße": ([], ["lower"])}
    db.execute(f"DELETE FROM {q('code_v')} WHERE v = 'upper'")
    _, ops = cycle(config, db)
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [("modify", "code=ab", {"v": (["upper"], [])})]
    assert verify(config, db.engine) == []


def test_numbers_of_another_scale_link_and_reference_the_objects_they_equal(postgresql_database, tmp_path):
    """A link column NUMERIC(12,3) to a NUMERIC(10,2) key, and a reference whose text is 1.500 to
    a key read as 1.50: the value belongs to the parent, and the reference names an object that
    exists (association-ref), as the database compares the numbers."""
    from publisher.config import ClassConfig

    db = postgresql_database
    q = db.qualified
    db.execute(f"CREATE TABLE {q('pc')} (code CHAR(4), amt NUMERIC(10,2), PRIMARY KEY (code, amt))",
               f"CREATE TABLE {q('pc_n')} (code CHAR(4), amt NUMERIC(12,3), v TEXT, PRIMARY KEY (code, amt, v), "
               f"FOREIGN KEY (code, amt) REFERENCES {q('pc')})",
               f"CREATE TABLE {q('grp')} (gid NUMERIC(10,2) PRIMARY KEY)",
               f"CREATE TABLE {q('tkt')} (tid INTEGER PRIMARY KEY, grp_ref NUMERIC(12,3))",
               f"INSERT INTO {q('pc')} VALUES ('AB', 1.5)", f"INSERT INTO {q('pc_n')} VALUES ('AB', 1.5, 'n1')",
               f"INSERT INTO {q('grp')} VALUES (1.5), (10)",
               f"INSERT INTO {q('tkt')} VALUES (1, 1.500), (2, 10), (3, 7)")
    config = dataclasses.replace(config_of(db, tmp_path, tables=("pc", "grp", "tkt")), classes={
        "pc": ClassConfig(multi_valued={"n": "pc_n.v"}), "tkt": ClassConfig(references={"grp_ref": "grp"})})
    _, ops = cycle(config, db)
    assert {key: attrs for kind, key, _, attrs in ops if key.startswith("code=")} == {
        "code=AB+amt=1.5": {"n": ([], ["n1"])}}
    refs = {v.text.split(",")[0]: (v.get("type"), v.get("association-ref") is not None)
            for p in documents(Path(config.output.directory))
            for v in etree.parse(str(p)).getroot().iter("value") if v.text and v.text.startswith("gid=")}
    assert refs == {"gid=1.5": ("dn", True), "gid=10": ("dn", True), "gid=7": ("dn", False)}
    assert verify(config, db.engine) == []


def test_a_child_table_named_among_the_tables_is_published_as_its_parents_values(sqlite_database, tmp_path):
    db = sqlite_database
    create_class_tables(db)
    db.execute("INSERT INTO person VALUES (1, 'ann', NULL)", "INSERT INTO person_phone VALUES (1, '555')")
    config = class_config(db, tmp_path)
    config = dataclasses.replace(config, publisher=dataclasses.replace(
        config.publisher, tables=("person", "person_phone", "team")))
    summary, ops = cycle(config, db)
    assert set(summary["tables"]) == {"person", "team"}
    assert [(kind, key, attrs) for kind, key, _, attrs in ops] == [
        ("add", "pid=1", {"name": ([], ["ann"]), "phone": ([], ["555"])})]
