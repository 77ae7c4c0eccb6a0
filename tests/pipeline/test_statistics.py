"""The refresh of the event log's statistics after a large acknowledgement: on PostgreSQL of the
columns a cycle's plans need (status and record_id) and the table's row count; elsewhere of the
table, as the database does it."""
from __future__ import annotations

import logging
import uuid

from harness import Harness
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from publisher.pipeline import acknowledge
from publisher.pipeline.acknowledge import refresh_statistics
from publisher.pipeline.event_log import event_log_source


def test_a_refresh_is_taken_by_every_database(spark, database, tmp_path, caplog) -> None:
    h = Harness(spark, database, tmp_path)
    h.create_event_log()
    h.log(*[(4, "usr", f"idu={n}") for n in range(30)])
    with caplog.at_level(logging.WARNING, logger="publisher"):
        refresh_statistics(h.engine, event_log_source(h.config, h.engine))
    assert not [r for r in caplog.records if "statistics" in r.getMessage()]


def test_on_postgresql_the_status_and_record_id_are_analysed_and_the_rows_counted(
        spark, postgresql_database, tmp_path) -> None:
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_event_log()
    h.log(*[(4, "usr", f"idu={n}", "cn", "old", "new") for n in range(30)], status="S")
    h.log(*[(4, "usr", f"idu={n}") for n in range(10)])
    log = event_log_source(h.config, h.engine)

    refresh_statistics(h.engine, log)

    with h.engine.connect() as conn:
        analysed = dict(conn.execute(text(
            "SELECT attname, most_common_vals::text FROM pg_stats WHERE schemaname = :schema AND tablename = :table"),
            {"schema": log.schema, "table": log.name}).all())
        rows = conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = CAST(:table AS regclass)"),
                            {"table": f"{log.schema}.{log.name}"}).scalar_one()
    names = log.columns
    assert set(analysed) == {names.status, names.record_id}, "the texts of old and new values are not sampled"
    assert analysed[names.status] == "{S,N}"
    assert rows == 40


def test_on_postgresql_a_user_that_may_not_analyse_is_told_once(
        spark, postgresql_database, tmp_path, caplog, monkeypatch) -> None:
    """PostgreSQL skips a table its user does not own with a WARNING, not an error: the refresh
    did nothing and said nothing (the publisher's own user, as the getting-started guide makes
    it, owns no event log). A user that asks for errors only is told as well."""
    db, role = postgresql_database, f"reader_{uuid.uuid4().hex[:8]}"
    h = Harness(spark, db, tmp_path)
    h.create_event_log()
    log = event_log_source(h.config, h.engine)
    db.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'Secret-9'", f"GRANT USAGE ON SCHEMA {db.schema} TO {role}",
               f"GRANT SELECT, UPDATE ON {db.qualified(log.name)} TO {role}",
               f"ALTER ROLE {role} SET client_min_messages = error")
    engine = create_engine(make_url(db.url).set(username=role, password="Secret-9"))
    monkeypatch.setattr(acknowledge, "_ANALYZE_REFUSED", set())
    try:
        with caplog.at_level(logging.WARNING, logger="publisher"):
            refresh_statistics(engine, log)
            refresh_statistics(engine, log)
    finally:
        engine.dispose()
        db.execute(f"DROP OWNED BY {role}", f"DROP ROLE {role}")
    told = [r.getMessage() for r in caplog.records if "statistics" in r.getMessage()]
    assert len(told) == 1, told
    assert "only table or database owner can analyze it" in told[0] or "permission denied" in told[0]
    assert "MAINTAIN on it" in told[0]


def test_on_postgresql_other_warnings_of_a_refresh_are_no_refusal(
        spark, postgresql_database, tmp_path, caplog, monkeypatch) -> None:
    """A statistics object on columns the refresh does not sample makes ANALYZE warn that it
    could not compute it; the refresh itself ran."""
    h = Harness(spark, postgresql_database, tmp_path)
    h.create_event_log()
    log = event_log_source(h.config, h.engine)
    names = log.columns
    postgresql_database.execute(
        f"CREATE STATISTICS {log.schema}.log_keys ON {names.table_name}, {names.table_key} "
        f"FROM {postgresql_database.qualified(log.name)}")
    h.log(*[(4, "usr", f"idu={n}") for n in range(10)])
    monkeypatch.setattr(acknowledge, "_ANALYZE_REFUSED", set())
    with caplog.at_level(logging.WARNING, logger="publisher"):
        refresh_statistics(h.engine, log)
    assert not [r for r in caplog.records if "statistics" in r.getMessage()]
    with h.engine.connect() as conn:
        analysed = conn.execute(text(
            "SELECT count(*) FROM pg_stats WHERE schemaname = :schema AND tablename = :table"),
            {"schema": log.schema, "table": log.name}).scalar_one()
    assert analysed == 2
