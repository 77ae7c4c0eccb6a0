"""A migration as the getting-started guides set a database up: the application's user owns the
tables and runs `migrate`, the publisher's own user holds only the guide's grants, and `run`
is publishing meanwhile. The publisher's user may not read a table under a share lock nor log
events, which a resync needs, so the owner's `migrate` publishes the rows again itself, and a
resync nobody could publish is said with the command that publishes it."""
from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TestDatabase
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from publisher.cli import main
from publisher.config.loading import load_config
from publisher.database import connect
from publisher.locking.lock import PublisherLock
from publisher.service.mirror import verify

PASSWORD = "Secret-9"
ACCT = {
    "postgresql": "CREATE TABLE {t} (id uuid, day date, note text, payload bytea, amount numeric(6,2), "
                  "PRIMARY KEY (id, day))",
    "mariadb": "CREATE TABLE {t} (id BINARY(16), day DATE, note TEXT, payload VARBINARY(64), amount DECIMAL(6,2), "
               "PRIMARY KEY (id, day))",
}
ROWS = {
    "postgresql": "INSERT INTO {t} SELECT md5(n::text)::uuid, DATE '2026-01-01' + n, "
                  "CASE WHEN n % 3 = 0 THEN NULL ELSE 'n' || n END, decode(md5(n::text), 'hex'), n + 0.25 "
                  "FROM generate_series(1, 12) AS n",
    "mariadb": "INSERT INTO {t} WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 12) "
               "SELECT UNHEX(MD5(n)), DATE '2026-01-01' + INTERVAL n DAY, IF(n % 3 = 0, NULL, CONCAT('n', n)), "
               "UNHEX(MD5(n)), n + 0.25 FROM s",
}
MIGRATION = {
    "postgresql": ["ALTER TABLE {t} ADD COLUMN tier varchar(10) DEFAULT 'gold'",
                   "ALTER TABLE {t} RENAME COLUMN note TO remark",
                   "ALTER TABLE {t} ALTER COLUMN amount TYPE numeric(8,3)"],
    "mariadb": ["ALTER TABLE {t} ADD COLUMN tier VARCHAR(10) DEFAULT 'gold'",
                "ALTER TABLE {t} RENAME COLUMN note TO remark",
                "ALTER TABLE {t} MODIFY amount DECIMAL(8,3)"],
}


@dataclass
class Site:
    """The guide's two users on the test's database: `owner_url` for what the guide runs as the
    application's user, the configuration file (`path`) naming the publisher's."""

    db: TestDatabase
    owner_url: str
    path: Path

    def as_owner(self, *args: str) -> list[str]:
        return ["-c", str(self.path), *args, "--set", f"database.url={self.owner_url}"]

    def owner(self, *statements: str) -> None:
        engine = create_engine(_sqlalchemy_url(self.owner_url))
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
        engine.dispose()


def _sqlalchemy_url(url: str) -> str:
    from publisher.config import DatabaseConfig

    return DatabaseConfig(url=url).sqlalchemy_url()


def _with_user(db: TestDatabase, user: str) -> str:
    """The test's database URL as `user` (MariaDB: of the test's own database)."""
    url = make_url(db.url).set(username=user, password=PASSWORD)
    if db.dialect == "mariadb":
        url = url.set(database=db.schema)
    return url.render_as_string(hide_password=False)


@pytest.fixture
def two_users(database: TestDatabase, tmp_path: Path) -> Iterator[Site]:
    """`app_*` owns `acct` and installs its capture; `pub_*` is the publisher's user, granted what
    docs/getting-started gives it once the capture is installed (`grant_publisher`)."""
    tag = uuid.uuid4().hex[:8]
    app, pub = f"app_{tag}", f"pub_{tag}"
    db = database
    if db.dialect == "postgresql":
        db.execute(f"CREATE ROLE {app} LOGIN PASSWORD '{PASSWORD}'", f"CREATE ROLE {pub} LOGIN PASSWORD '{PASSWORD}'",
                   f"GRANT USAGE, CREATE ON SCHEMA {db.schema} TO {app}", f"GRANT USAGE ON SCHEMA {db.schema} TO {pub}")
    else:
        db.execute(f"CREATE USER '{app}'@'%' IDENTIFIED BY '{PASSWORD}'",
                   f"CREATE USER '{pub}'@'%' IDENTIFIED BY '{PASSWORD}'",
                   f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, TRIGGER, LOCK TABLES "
                   f"ON {db.schema}.* TO '{app}'@'%'")
    owner_url = _with_user(db, app)
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "{_with_user(db, pub)}"\nschema = "{db.schema}"\nuser = "{pub}"\n'
                    f'[output]\ndirectory = "{tmp_path / "out"}"\n', encoding="utf-8")
    try:
        yield Site(db, owner_url, path)
    finally:
        if db.dialect == "postgresql":
            db.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN ('{app}', '{pub}')",
                       f"DROP OWNED BY {app}, {pub}", f"DROP ROLE {app}", f"DROP ROLE {pub}")
        else:
            db.execute(f"DROP USER '{app}'@'%', '{pub}'@'%'")


def grant_publisher(site: Site) -> None:
    """docs/getting-started, step 6: what the publisher's user may do."""
    db, pub = site.db, make_url(load_config(site.path, environ={}).database.url).username
    if db.dialect == "postgresql":
        s = db.schema
        site.owner(f"GRANT SELECT ON {s}.acct TO {pub}",
                   f"GRANT SELECT, UPDATE, DELETE ON {s}.event_log TO {pub}",
                   f"GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.event_log_capture, {s}.event_log_shapes, "
                   f"{s}.event_log_resyncs, {s}.event_log_snapshot TO {pub}")
        return
    grants = [("acct", "SELECT, TRIGGER"), ("event_log", "SELECT, INSERT, UPDATE, DELETE"),
              ("event_log_snapshot_range", "SELECT")]
    grants += [(f"event_log_{name}", "SELECT, INSERT, UPDATE, DELETE") for name in ("capture", "shapes", "resyncs",
                                                                                     "snapshot")]
    grants.append(("event_log_lock_owner", "SELECT, INSERT, UPDATE, DELETE, CREATE"))
    db.execute(*(f"GRANT {privileges} ON {db.schema}.{table} TO '{pub}'@'%'" for table, privileges in grants))


def installed(site: Site, capsys) -> None:  # type: ignore[no-untyped-def]
    """The guide's steps 2 to 6: the table with rows, its capture and snapshot as the owner, the
    grants, and the publisher's first cycles."""
    acct = site.db.qualified("acct")
    site.owner(ACCT[site.db.dialect].format(t=acct), ROWS[site.db.dialect].format(t=acct))
    assert main(["install", *site.as_owner("--table", "acct")]) == 0
    assert main(["snapshot", *site.as_owner()]) == 0
    grant_publisher(site)
    capsys.readouterr()
    drained(site, capsys)
    assert differences(site) == []


def drained(site: Site, capsys) -> None:  # type: ignore[no-untyped-def]
    """Cycles of the publisher's user, with what it does after each, until one reads nothing."""
    for _ in range(10):
        assert main(["poll", "-c", str(site.path)]) == 0
        if json.loads(capsys.readouterr().out.strip().splitlines()[-1])["events"] == 0:
            return
    raise AssertionError("the event log did not drain")


def differences(site: Site) -> list[str]:
    config = load_config(site.path, environ={})
    engine = connect(config)
    try:
        return [str(d) for d in verify(config, engine)]
    finally:
        engine.dispose()


def migrated(site: Site, capsys) -> dict:  # type: ignore[no-untyped-def]
    """The migration as the guides would write it: its table unqualified, found in the
    configured schema whatever the owner's own search path."""
    args = [a for statement in MIGRATION[site.db.dialect] for a in ("-e", statement.format(t="acct"))]
    assert main(["migrate", *site.as_owner(*args)]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_migrate_beside_a_running_publisher_settles_the_consumer_with_the_guides_grants(spark, two_users, capsys):
    """`run` holds the status mode's lock as the publisher's user while the owner migrates: the
    migration publishes the rows again itself, and the publisher's next cycles bring the
    consumer to the added, renamed and retyped columns."""
    installed(two_users, capsys)
    config = load_config(two_users.path, environ={})
    with PublisherLock(config) as lock:
        assert lock.held
        summary = migrated(two_users, capsys)
    assert summary["resync"] == ["acct"] and summary["resynced"] == {"acct": 12}
    drained(two_users, capsys)
    assert differences(two_users) == []
    rows = two_users.db.rows(f"SELECT count(*) FROM {two_users.db.qualified('event_log_resyncs')}")
    assert rows == [(0,)]


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_a_resync_the_publishers_user_may_not_take_is_said_with_the_command_that_takes_it(
        spark, two_users, capsys, caplog, monkeypatch):
    """A migration whose own resync never ran (its process killed after the commit): the
    publisher's cycles cannot take it with the guide's grants, and say so once, with the way
    out; `migrate --resync-owed` as the owner publishes the rows, and the consumer settles."""
    import publisher.service.migrate as migrate_module

    installed(two_users, capsys)
    with monkeypatch.context() as patched:
        patched.setattr(migrate_module, "resync", lambda config: {})  # the process dies here
        summary = migrated(two_users, capsys)
    assert summary["resync"] == ["acct"] and summary["resynced"] == {}
    caplog.set_level(logging.ERROR, logger="publisher")
    drained(two_users, capsys)
    drained(two_users, capsys)
    said = [r.getMessage() for r in caplog.records if "publisher migrate --resync-owed" in r.getMessage()]
    assert len(said) == 1 and "acct" in said[0] and "the status mode" in said[0], (caplog.text, differences(two_users))
    assert differences(two_users) != []

    assert main(["migrate", *two_users.as_owner("--resync-owed")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["resynced"] == {"acct": 12}
    drained(two_users, capsys)
    assert differences(two_users) == []


@pytest.mark.parametrize("database", ["mariadb"], indirect=True)
def test_on_mariadb_the_guides_publisher_takes_a_resync_left_owed_itself(spark, two_users, capsys, monkeypatch):
    """MariaDB's share lock needs only SELECT, and the guide grants the publisher's user INSERT
    on the event log (the triggers it makes anew run as it): a resync left owed is published by
    the cycles themselves."""
    import publisher.service.migrate as migrate_module

    installed(two_users, capsys)
    with monkeypatch.context() as patched:
        patched.setattr(migrate_module, "resync", lambda config: {})  # the process dies here
        assert migrated(two_users, capsys)["resynced"] == {}
    drained(two_users, capsys)
    drained(two_users, capsys)
    assert differences(two_users) == []


PLAIN_RENAME = "ALTER TABLE {t} RENAME COLUMN note TO remark"


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_a_plain_migration_the_publishers_user_cannot_follow_is_said_and_install_settles_it(
        spark, two_users, capsys, caplog):
    """The owner's own tool renames a column (no event trigger: the owner is no superuser). The
    publisher's user may not make the capture anew: the cycles go on and say so once, naming the
    table and the command; `install --table` as the owner makes it anew and publishes the rows
    again, and the consumer settles."""
    installed(two_users, capsys)
    acct = two_users.db.qualified("acct")
    two_users.owner(PLAIN_RENAME.format(t=acct))
    caplog.set_level(logging.ERROR, logger="publisher")
    drained(two_users, capsys)
    drained(two_users, capsys)
    said = [r.getMessage() for r in caplog.records if "may not make its capture anew" in r.getMessage()]
    assert len(said) == 1 and "publisher install --table acct" in said[0], caplog.text

    assert main(["install", *two_users.as_owner("--table", "acct")]) == 0
    assert "'acct' changed shape since its capture was installed: its 12 row(s)" in capsys.readouterr().err
    two_users.owner(f"UPDATE {acct} SET remark = 'after' WHERE remark IS NULL")
    drained(two_users, capsys)
    assert differences(two_users) == []


@pytest.mark.parametrize("database", ["mariadb"], indirect=True)
def test_on_mariadb_the_guides_publisher_follows_a_plain_migration_and_writes_go_on(spark, two_users, capsys):
    """The owner's own tool renames a column: the publisher's cycle makes the triggers anew, as
    their definer, which the guide lets insert into the event log; the application's writes
    succeed afterwards and the consumer settles."""
    installed(two_users, capsys)
    acct = two_users.db.qualified("acct")
    two_users.owner(PLAIN_RENAME.format(t=acct))
    drained(two_users, capsys)
    two_users.owner(f"UPDATE {acct} SET remark = 'after' WHERE remark IS NULL",
                    f"INSERT INTO {acct} (id, day, remark) VALUES (UNHEX(MD5('x')), DATE '2027-01-01', 'new')")
    drained(two_users, capsys)
    drained(two_users, capsys)
    assert differences(two_users) == []


@pytest.mark.parametrize("database", ["mariadb"], indirect=True)
def test_on_mariadb_a_publisher_that_may_not_log_leaves_the_triggers_that_can(spark, two_users, capsys, caplog):
    """Without INSERT on the event log, triggers the publisher's user made anew would run as it
    and fail every write of the table: the cycle leaves the capture as it is, says why once, and
    the application's writes go on being logged."""
    installed(two_users, capsys)
    db, acct = two_users.db, two_users.db.qualified("acct")
    pub = make_url(load_config(two_users.path, environ={}).database.url).username
    db.execute(f"REVOKE INSERT ON {db.schema}.event_log FROM '{pub}'@'%'")
    two_users.owner(f"ALTER TABLE {acct} ADD COLUMN tier VARCHAR(10) DEFAULT 'gold'")
    caplog.set_level(logging.ERROR, logger="publisher")
    drained(two_users, capsys)
    said = [r.getMessage() for r in caplog.records if "its capture is not made anew" in r.getMessage()]
    assert len(said) == 1 and "INSERT command denied" in said[0] and "Grant it INSERT" in said[0], caplog.text
    two_users.owner(f"UPDATE {acct} SET note = 'still logged'")
    assert db.rows(f"SELECT count(*) FROM {db.qualified('event_log')} WHERE status = 'N'") != [(0,)]


def test_migrate_resync_owed_alone_is_refused_beside_sql(sqlite_database, tmp_path, capsys):
    path = tmp_path / "publisher.toml"
    path.write_text(f'[database]\nurl = "{sqlite_database.url}"\n[output]\ndirectory = "{tmp_path}"\n',
                    encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["migrate", "-c", str(path), "--resync-owed", "-e", "SELECT 1"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err

