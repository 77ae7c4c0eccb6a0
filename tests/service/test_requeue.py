"""`publisher requeue`: E (or W) rows back to N, exactly the chosen ones, recorded with a reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import Harness

from publisher.cli import main
from publisher.service.requeue import RequeueError, Selection, requeue

EVENT_LOG_COLUMNS = "record_id, status, event_type, event_time, perpetrator, table_name, table_key, column_name, " \
    "old_value, new_value"


def make_harness(database, tmp_path: Path) -> Harness:
    h = Harness(None, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    return h


def backlog(h: Harness) -> dict[str, int]:
    """A mix of statuses and tables; returns each row's record_id by a name."""
    ids: dict[str, int] = {}

    def one(name: str, status: str, table: str, key: str = "idu=1") -> None:
        (ids[name],) = h.log((2, table, key, "fname", "old", name), status=status, perpetrator="someone")

    one("e1", "E", "usr")
    one("e2", "E", "grp", "name=a")
    one("w1", "W", "usr", "idu=2")
    one("e3", "E", "USR")
    one("s1", "S", "usr")
    one("n1", "N", "usr")
    one("x1", "X", "usr")
    one("e4", "E", "usr", "idu=3")
    one("e5", "E", "audit", "id=1")
    return ids


def rows(h: Harness) -> dict[int, tuple]:
    found = h.db.rows(f"SELECT {EVENT_LOG_COLUMNS} FROM {h.table('event_log')} ORDER BY record_id")
    return {int(r[0]): r for r in found}


def assert_only_requeued(before: dict[int, tuple], after: dict[int, tuple], chosen: set[int]) -> None:
    """The chosen rows went to N and kept every other column; every other row is untouched."""
    assert after.keys() == before.keys()
    for record_id, row in before.items():
        if record_id in chosen:
            assert row[1] != "N"
            assert after[record_id] == (row[0], "N", *row[2:])
        else:
            assert after[record_id] == row


def test_dry_run_counts_and_changes_nothing(database, tmp_path):
    h = make_harness(database, tmp_path)
    ids = backlog(h)
    before = rows(h)
    done = requeue(h.config, h.engine, Selection(), reason="looking", dry_run=True)
    assert done.total == 5
    assert done.by_status == {"E": 5}
    assert done.by_table == {"USR": 1, "audit": 1, "grp": 1, "usr": 2}
    assert rows(h) == before
    assert h.statuses()[ids["e1"]] == "E"
    assert not (h.output / "requeue.jsonl").exists()


FILTERS = {
    "default: E": (dict(), {"e1", "e2", "e3", "e4", "e5"}),
    "W": (dict(statuses=("W",)), {"w1"}),
    "E and W": (dict(statuses=("E", "W")), {"e1", "e2", "w1", "e3", "e4", "e5"}),
    "table, any case": (dict(table="usr"), {"e1", "e3", "e4"}),
    "table spelled otherwise": (dict(table="Grp"), {"e2"}),
    "from..to": (dict(first="e2", last="e3"), {"e2", "e3"}),
    "from alone": (dict(first="e3"), {"e3", "e4", "e5"}),
    "to alone": (dict(last="e2"), {"e1", "e2"}),
    "all together": (dict(statuses=("E", "W"), table="USR", first="w1", last="e4"), {"w1", "e3", "e4"}),
}


@pytest.mark.parametrize("case", FILTERS)
def test_each_filter_requeues_exactly_the_chosen_rows(database, tmp_path, case):
    from publisher.model.events import Status

    h = make_harness(database, tmp_path)
    ids = backlog(h)
    given, expected = FILTERS[case]
    selection = Selection(
        statuses=tuple(Status(s) for s in given.get("statuses", ("E",))),
        table=given.get("table"),
        first=ids[given["first"]] if "first" in given else None,
        last=ids[given["last"]] if "last" in given else None,
    )
    before = rows(h)
    done = requeue(h.config, h.engine, selection)
    chosen = {ids[name] for name in expected}
    assert_only_requeued(before, rows(h), chosen)
    assert done.total == len(expected)
    assert sum(done.by_table.values()) == len(expected)
    # nothing is left to do a second time
    assert requeue(h.config, h.engine, selection).total == 0


def test_requeued_rows_are_published_by_the_next_cycle(spark, database, tmp_path):
    h = Harness(spark, database, tmp_path)
    h.create_usr()
    h.create_event_log()
    h.insert_usr(5, fname="Five")
    (rejected,) = h.log((6, "usr", "idu=5"), status="E")
    requeue(h.config, h.engine, Selection())
    result = h.poll()
    assert result.events == 1
    assert h.statuses() == {rejected: "S"}
    assert [op[0] for op in h.published().describe()] == ["modify"]


def test_rows_of_a_cycle_kept_unacknowledged_are_left_alone(database, tmp_path):
    h = make_harness(database, tmp_path)
    ids = backlog(h)
    h.output.mkdir(parents=True)
    pin = {"table": "event_log", "schema": database.schema or None, "lo": ids["e3"], "hi": ids["e4"],
           "cutoff_record_id": None}
    (h.output / ".publisher-window").write_text(json.dumps(pin), encoding="utf-8")
    before = rows(h)
    done = requeue(h.config, h.engine, Selection())
    assert done.held_back == 2
    assert_only_requeued(before, rows(h), {ids["e1"], ids["e2"], ids["e5"]})


def test_the_reason_is_recorded_with_what_was_requeued(database, tmp_path):
    h = make_harness(database, tmp_path)
    backlog(h)
    done = requeue(h.config, h.engine, Selection(table="grp"), reason="grp.name widened to 64")
    assert done.record == h.output / "requeue.jsonl"
    requeue(h.config, h.engine, Selection(), reason=None)
    first, second = [json.loads(line) for line in done.record.read_text(encoding="utf-8").splitlines()]
    assert first["reason"] == "grp.name widened to 64"
    assert first["table"] == "grp" and first["statuses"] == ["E"]
    assert first["requeued"] == 1 and first["by_table"] == {"grp": 1}
    assert first["event_log"] == "event_log" and first["time"]
    assert second["reason"] is None and second["requeued"] == 4


def test_status_mode_off_is_refused(database, tmp_path):
    h = make_harness(database, tmp_path)
    backlog(h)
    before = rows(h)
    h.reconfigure(status_mode=False)
    with pytest.raises(RequeueError, match="status_mode = false"):
        requeue(h.config, h.engine, Selection())
    assert rows(h) == before


def write_config(database, tmp_path: Path) -> Path:
    schema = f'schema = "{database.schema}"\n' if database.schema else ""
    path = tmp_path / "publisher.toml"
    path.write_text(
        f'[database]\nurl = "{database.url}"\n{schema}[output]\ndirectory = "{tmp_path / "out"}"\n'
        '[publisher]\ntables = ["usr", "grp"]\n',
        encoding="utf-8",
    )
    return path


def test_cli_prints_the_counts_and_exits_0(database, tmp_path, capsys):
    h = make_harness(database, tmp_path)
    ids = backlog(h)
    config = str(write_config(database, tmp_path))
    before = rows(h)

    assert main(["requeue", "-c", config, "--status", "E,W", "--table", "usr", "--dry-run"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["requeued"] == 4 and summary["dry_run"] is True
    assert summary["by_status"] == {"E": 3, "W": 1}
    assert "nothing changed" in captured.err
    assert rows(h) == before

    assert main(["requeue", "-c", config, "--status", "E", "--status", "w", "--table", "usr",
                 "--reason", "usr.fname fixed"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["requeued"] == 4 and summary["dry_run"] is False
    assert summary["by_table"] == {"USR": 1, "usr": 3}
    assert "4 rows back to N" in captured.err and "usr.fname fixed" in captured.err
    assert_only_requeued(before, rows(h), {ids[n] for n in ("e1", "w1", "e3", "e4")})
    line = json.loads((tmp_path / "out" / "requeue.jsonl").read_text(encoding="utf-8"))
    assert line["reason"] == "usr.fname fixed" and line["statuses"] == ["E", "W"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--status", "N"], "status N: those rows are waiting to be published already"),
        (["--status", "E,S"], "status S: those rows were published"),
        (["--status", "F"], "F is reserved"),
        (["--status", "X"], "status 'X' is not one the publisher writes"),
        (["--status", ""], "expected E or W"),
        (["--from", "9", "--to", "3"], "--from 9 is after --to 3"),
        (["--from", "nine"], "invalid int value: 'nine'"),
    ],
)
def test_bad_arguments_exit_2_with_a_precise_message(sqlite_database, tmp_path, capsys, arguments, message):
    config = str(write_config(sqlite_database, tmp_path))
    try:
        code = main(["requeue", "-c", config, *arguments])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_requeue_whose_commit_fails_is_recorded_as_rolled_back(database, tmp_path, monkeypatch):
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import OperationalError

    h = make_harness(database, tmp_path)
    backlog(h)
    before = rows(h)

    def lost(self: Connection) -> None:
        raise OperationalError("COMMIT", {}, Exception("server closed the connection"))

    with monkeypatch.context() as patched:
        patched.setattr(Connection, "commit", lost)
        with pytest.raises(OperationalError, match="server closed the connection"):
            requeue(h.config, h.engine, Selection(), reason="first try")
    assert rows(h) == before
    attempt, rollback = [json.loads(line) for line in (h.output / "requeue.jsonl").read_text().splitlines()]
    assert attempt["reason"] == "first try" and attempt["requeued"] == 5 and "rolled_back" not in attempt
    assert rollback["id"] == attempt["id"] and rollback["rolled_back"] is True
    assert "server closed the connection" in rollback["error"]

    done = requeue(h.config, h.engine, Selection(), reason="second try")
    assert done.total == 5
    lines = [json.loads(line) for line in (h.output / "requeue.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and lines[2]["reason"] == "second try" and lines[2]["id"] != attempt["id"]
    assert not any(line.get("id") == lines[2]["id"] and line.get("rolled_back") for line in lines)


def test_a_requeue_that_cannot_be_recorded_changes_nothing(database, tmp_path):
    h = make_harness(database, tmp_path)
    backlog(h)
    before = rows(h)
    h.output.mkdir(parents=True)
    (h.output / "requeue.jsonl").mkdir()  # not a file it can append to
    with pytest.raises(OSError):
        requeue(h.config, h.engine, Selection(), reason="unrecordable")
    assert rows(h) == before


@pytest.mark.parametrize("status, reason", [("N", "waiting to be published already"), ("S", "were published"),
                                            ("F", "reserved")])
def test_the_status_rule_is_the_same_whichever_way_the_statuses_come(status, reason):
    from publisher.model.events import Status
    from publisher.service.requeue import parse_statuses

    with pytest.raises(RequeueError, match=f"status {status}: .*{reason}"):
        Selection(statuses=(Status(status),))
    with pytest.raises(RequeueError, match=f"status {status}: .*{reason}"):
        Selection(statuses=parse_statuses(f"e,{status.lower()}"))
