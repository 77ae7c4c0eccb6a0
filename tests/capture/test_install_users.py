"""`install` run by a superuser into the application's schema (PostgreSQL): the capture's
triggers run as the writing user and insert into an event log that is not the writers' own, so
every role that may write a captured table is granted INSERT on the event log, and only that.
Without the grant, every write of the table failed from the moment the capture was installed."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TestDatabase
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from publisher.capture.install import install_capture
from publisher.cli import main
from publisher.config.loading import load_config
from publisher.database import connect

PASSWORD = "Secret-9"


@pytest.fixture
def roles(postgresql_database: TestDatabase) -> Iterator[dict[str, str]]:
    """`app_*` owns the table, `writer_*` may insert, update and delete its rows, `reader_*` may
    only read them, `member_*` may insert as a member of `group_*`, `column_*` may update one
    column; `later_*` has no right on it yet. By role, its URL."""
    db, tag = postgresql_database, uuid.uuid4().hex[:8]
    names = {role: f"{role}_{tag}" for role in ("app", "writer", "reader", "group", "member", "column", "later")}
    db.execute(*(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'" for name in names.values()),
               f"GRANT USAGE ON SCHEMA {db.schema} TO {', '.join(names.values())}",
               f"CREATE TABLE {db.qualified('acct')} (id uuid, day date, note text, PRIMARY KEY (id, day))",
               f"ALTER TABLE {db.qualified('acct')} OWNER TO {names['app']}",
               f"GRANT INSERT, UPDATE, DELETE, SELECT ON {db.qualified('acct')} TO {names['writer']}",
               f"GRANT SELECT ON {db.qualified('acct')} TO {names['reader']}",
               f"GRANT INSERT, SELECT ON {db.qualified('acct')} TO {names['group']}",
               f"GRANT {names['group']} TO {names['member']}",
               f"GRANT UPDATE (note), SELECT ON {db.qualified('acct')} TO {names['column']}")
    try:
        yield {role: make_url(db.url).set(username=name, password=PASSWORD).render_as_string(hide_password=False)
               for role, name in names.items()}
    finally:
        listed = ", ".join(names.values())
        db.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN "
                   f"({', '.join(repr(n) for n in names.values())})", f"DROP OWNED BY {listed}",
                   *(f"DROP ROLE {name}" for name in names.values()))


def _as(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def installed_by_the_superuser(db: TestDatabase, tmp_path: Path) -> Path:
    """`acct`'s capture installed by the test database's superuser; the configuration's path."""
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "{db.url}"\nschema = "{db.schema}"\n'
                    f'[output]\ndirectory = "{tmp_path / "out"}"\n', encoding="utf-8")
    assert main(["install", "-c", str(path), "--table", "acct"]) == 0
    return path


def test_a_superusers_install_lets_every_writer_of_the_table_log_its_changes(postgresql_database, roles, tmp_path):
    db = postgresql_database
    installed_by_the_superuser(db, tmp_path)

    acct = db.qualified("acct")
    _as(roles["app"], f"INSERT INTO {acct} VALUES ('00000000-0000-0000-0000-000000000001', DATE '2026-01-01', 'a')",
        f"UPDATE {acct} SET note = 'b'")
    _as(roles["writer"], f"INSERT INTO {acct} VALUES ('00000000-0000-0000-0000-000000000002', DATE '2026-01-02', NULL)",
        f"UPDATE {acct} SET note = 'c'", f"DELETE FROM {acct} WHERE day = DATE '2026-01-01'")
    logged = db.rows(f"SELECT perpetrator, event_type FROM {db.qualified('event_log')} ORDER BY record_id")
    app, writer = (make_url(roles[r]).username for r in ("app", "writer"))
    assert {p for p, _ in logged} == {app, writer}
    assert (writer, 4) in logged  # the writer's delete

    log = db.qualified("event_log")
    granted = db.rows(f"SELECT grantee, privilege_type FROM information_schema.role_table_grants "
                      f"WHERE table_schema = '{db.schema}' AND table_name = 'event_log' AND grantee <> current_user")
    group, column = (make_url(roles[r]).username for r in ("group", "column"))
    # the reader gets nothing, the member what its group has
    assert sorted(granted) == sorted((name, "INSERT") for name in (app, writer, group, column))
    with pytest.raises(ProgrammingError, match="permission denied"):
        _as(roles["writer"], f"SELECT count(*) FROM {log}")
    _as(roles["member"], f"INSERT INTO {acct} VALUES ('00000000-0000-0000-0000-000000000003', DATE '2026-01-03', 'm')")
    _as(roles["column"], f"UPDATE {acct} SET note = 'by column'")
    assert len(db.rows(f"SELECT 1 FROM {log}")) == len(logged) + 1 + 2  # an insert; the update of two rows


def test_a_writer_the_installing_user_may_not_grant_to_installs_nothing(postgresql_database, roles, tmp_path):
    """The capture would make every write of that role fail: the install stops, with the roles named."""
    db = postgresql_database
    path = installed_by_the_superuser(db, tmp_path)
    acct, later = db.qualified("acct"), make_url(roles["later"]).username
    db.execute(f"GRANT DELETE ON {acct} TO {later}")
    config = load_config(path, environ={})
    engine = connect(config)
    try:
        grant = next(s for s in install_capture(config, engine, ["acct"], dry_run=True) if "GRANT INSERT ON" in s)
    finally:
        engine.dispose()
    with pytest.raises(ProgrammingError, match=rf"{later} may write .*acct.* and {make_url(roles['app']).username} "
                                               "may not grant INSERT on it"):
        _as(roles["app"], grant)  # the table's owner, who does not own the event log
    _as(db.url, grant)
    _as(roles["later"], f"DELETE FROM {acct}")
