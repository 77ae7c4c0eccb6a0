"""The soak's tables and configuration.

`acct` has a compound key of three kinds (text that needs quoting in a table_key, a date, and a
boolean on PostgreSQL or a small integer elsewhere), NULLable columns of several types and a
binary one. `team` is a logical class: its members live in the child table `team_member`.
Either table gets field style and the other row style, so both styles run on each database.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sqlalchemy import Engine, text

from publisher.capture.tables import Style

PUBLISHER_USER = "soak_publisher"
"""The publisher's own user: no writer connects as it, so nothing the writers do is loopback."""
SUBSCRIBER = "mirror"

ACCT = {
    "postgresql": "CREATE TABLE {t} (code VARCHAR(120) NOT NULL, day DATE NOT NULL, part BOOLEAN NOT NULL, "
    "name VARCHAR(200), score NUMERIC(12,3), seen TIMESTAMP(3), photo BYTEA, note TEXT, "
    "PRIMARY KEY (code, day, part))",
    "mariadb": "CREATE TABLE {t} (code VARCHAR(120) NOT NULL, day DATE NOT NULL, part SMALLINT NOT NULL, "
    "name VARCHAR(200), score DECIMAL(12,3), seen DATETIME(3), photo LONGBLOB, note LONGTEXT, "
    "PRIMARY KEY (code, day, part))",
    "sqlite": "CREATE TABLE {t} (code TEXT NOT NULL, day DATE NOT NULL, part INTEGER NOT NULL, "
    "name TEXT, score NUMERIC, seen TEXT, photo BLOB, note TEXT, PRIMARY KEY (code, day, part))",
}
TEAM = "CREATE TABLE {t} (tid INTEGER NOT NULL PRIMARY KEY, title VARCHAR(200))"
MEMBER = ("CREATE TABLE {t} (tid INTEGER NOT NULL, member VARCHAR(100) NOT NULL, PRIMARY KEY (tid, member), "
          "FOREIGN KEY (tid) REFERENCES {team} (tid))")
TABLES = ("acct", "team")


@dataclass(frozen=True)
class Site:
    """Where one database's soak lives: its configuration file, outputs and trigger styles."""

    dialect: str
    url: str
    schema: str | None
    config: Path
    styles: dict[str, str]
    native: bool = False
    """PostgreSQL: the native capture on the tables (a class's child tables keep PL/pgSQL)."""

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    @property
    def subscribers(self) -> list[str]:
        """MariaDB refuses subscribers (docs: guides/mariadb.md)."""
        return [] if self.dialect == "mariadb" else [SUBSCRIBER]


def create_tables(engine: Engine, dialect: str, schema: str | None) -> None:
    def name(table: str) -> str:
        return f"{schema}.{table}" if schema else table

    with engine.begin() as conn:
        if dialect == "postgresql" and schema:
            conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {schema}"))
        conn.execute(text(ACCT[dialect].format(t=name("acct"))))
        conn.execute(text(TEAM.format(t=name("team"))))
        conn.execute(text(MEMBER.format(t=name("team_member"), team=name("team"))))


def write_config(site_dir: Path, dialect: str, url: str, schema: str | None) -> Path:
    """The publisher's configuration: status mode, and a subscriber of both tables where the
    database serves subscribers. Small cycles run in the driver; `run` may be told otherwise."""
    path = site_dir / "publisher.toml"
    lines = [
        "[database]", f"url = {json.dumps(url)}", f'user = "{PUBLISHER_USER}"',
        *([f'schema = "{schema}"'] if schema else []),
        "[publisher]", "polling_interval = 0.5",
        "[output]", f"directory = {json.dumps(str(site_dir / 'out'))}",
        "[spark]", 'master = "local[1]"', 'conf = { "spark.sql.shuffle.partitions" = "1" }',
        "[classes.team.multi_valued]", 'member = "team_member.member"',
    ]
    if dialect != "mariadb":
        lines += ["[subscriptions.all]", f"tables = {json.dumps(list(TABLES))}",
                  f"[subscribers.{SUBSCRIBER}]", 'subscription = "all"',
                  f"output = {json.dumps(str(site_dir / SUBSCRIBER))}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def styles_for(dialect: str, seed: int) -> dict[str, str]:
    """Field style on one table and row style on the other; which one by the seed, and SQLite the
    other way round from the servers, so that every run has both on acct."""
    if (seed + (dialect == "sqlite")) % 2:
        return {"acct": "field", "team": "row"}
    return {"acct": "row", "team": "field"}


def install(site: Site) -> None:
    """What `publisher install --table T --style S` does, per table with its style; a failure
    stops the soak of this database."""
    from publisher.capture.install import install_capture
    from publisher.config.loading import load_config
    from publisher.database import connect

    config = load_config(site.config)
    engine = connect(config)
    try:
        for table in TABLES:
            install_capture(config, engine, [table], cast(Style, site.styles[table]), False, site.native)
    finally:
        engine.dispose()
