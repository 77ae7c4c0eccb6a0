"""`publisher migrate` where DDL commits on its own: a statement MariaDB refuses for the lock it
ran under runs again with the tables taken anew."""
from __future__ import annotations

import pymysql
from harness import drain
from test_migrate import migrate, site

from publisher.cli import main
from publisher.database import HeldConnection
from publisher.service.mirror import verify


def test_a_delete_refused_for_its_lock_runs_again_with_the_tables_taken_anew(spark, mariadb_database, tmp_path,
                                                                           capsys, monkeypatch):
    """Now and then, with the application writing, MariaDB refuses the DELETE that stands for a
    TRUNCATE under LOCK TABLES (its trigger's INSERT: error 1442), and again under the same lock:
    it runs once more, the lock taken anew, and every deleted row is published."""
    h, path = site(spark, mariadb_database, tmp_path)
    person = h.table("person")
    h.db.execute(*(f"INSERT INTO {person} VALUES ('p{n}', '2026-01-01', 'Lee', '1990-01-01', {n}.5, 'x')"
                   for n in range(3)))
    drain(h)
    h.published()
    ran: list[str] = []
    run = HeldConnection.run

    def refuse_the_first_delete(self: HeldConnection, statement: str) -> None:
        ran.append(statement.split()[0].upper())
        if ran.count("DELETE") == 1 and ran[-1] == "DELETE":
            raise pymysql.err.OperationalError(1442, "Can't update table 'event_log' in stored function/trigger "
                                                     "because it is already used by statement which invoked it")
        run(self, statement)

    monkeypatch.setattr(HeldConnection, "run", refuse_the_first_delete)
    summary = migrate(path, f"TRUNCATE TABLE {person}", capsys=capsys)
    assert summary["truncated"] == ["person"] and summary["retaken"] == 1, summary
    assert ran == ["USE", "LOCK", "DELETE", "FLUSH", "DELETE", "UNLOCK"], ran  # USE: the configured schema first
    assert h.db.rows(f"SELECT COUNT(*) FROM {person}") == [(0,)]
    drain(h)
    assert [op.tag for op in h.published().operations] == ["delete"] * 3
    assert [str(d) for d in verify(h.config, h.engine)] == []


def test_a_retake_the_user_may_not_run_fails_the_migration_naming_both_refusals(spark, mariadb_database, tmp_path,
                                                                                capsys, monkeypatch):
    """FLUSH TABLES needs the RELOAD privilege: where the migration's user lacks it, migrate
    exits 2 naming the refused DELETE and the refused FLUSH, and nothing is deleted."""
    h, path = site(spark, mariadb_database, tmp_path)
    person = h.table("person")
    h.db.execute(f"INSERT INTO {person} VALUES ('p1', '2026-01-01', 'Lee', '1990-01-01', 1.5, 'x')")
    run = HeldConnection.run

    def refuse(self: HeldConnection, statement: str) -> None:
        if statement.startswith("DELETE"):
            raise pymysql.err.OperationalError(1442, "Can't update table 'event_log' in stored function/trigger")
        if statement.startswith("FLUSH"):
            raise pymysql.err.OperationalError(1227, "Access denied; you need (at least one of) the RELOAD "
                                                     "privilege(s) for this operation")
        run(self, statement)

    monkeypatch.setattr(HeldConnection, "run", refuse)
    assert main(["migrate", "-c", str(path), "-e", f"TRUNCATE TABLE {person}"]) == 2
    err = capsys.readouterr().err
    assert "refused DELETE under the migration's lock" in err and "1442" in err, err
    assert "taking the tables anew was refused too" in err and "RELOAD" in err, err
    assert "no statement of the migration had run" in err, err
    assert h.db.rows(f"SELECT COUNT(*) FROM {person}") == [(1,)]
