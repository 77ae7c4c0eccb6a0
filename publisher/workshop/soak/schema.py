"""The soak's tables and configuration.

`acct` has a compound key of three kinds (text that needs quoting in a table_key, a date, and a
boolean or a small integer, as the database has them), NULLable columns of several types and a
binary one: each database spells it (`Workbench.soak_acct_ddl`). `team` is a logical class: its
members live in the child table `team_member`.
Either table gets field style and the other row style, so both styles run on each database.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sqlalchemy import Engine, text

from publisher.capture.tables import Style
from publisher.databases.workbench import Workbench
from publisher.workshop.databases import named

PUBLISHER_USER = "soak_publisher"
"""The publisher's own user: no writer connects as it, so nothing the writers do is loopback."""
SUBSCRIBER = "mirror"

TEAM = "CREATE TABLE {t} (tid INTEGER NOT NULL PRIMARY KEY, title VARCHAR(200))"
MEMBER = ("CREATE TABLE {t} (tid INTEGER NOT NULL, member VARCHAR(100) NOT NULL, PRIMARY KEY (tid, member), "
          "FOREIGN KEY (tid) REFERENCES {team} (tid))")
TABLES = ("acct", "team")


@dataclass(frozen=True)
class Site:
    """Where one database's soak lives: its configuration file, outputs and trigger styles."""

    database: Workbench
    """The database's workshop (`Workbench`)."""
    url: str
    schema: str | None
    config: Path
    styles: dict[str, str]
    native: bool = False
    """The native capture on the tables (a class's child tables keep the trigger language's)."""

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    @property
    def subscribers(self) -> list[str]:
        """Where the database serves subscribers, one of both tables."""
        return [SUBSCRIBER] if self.database.serves_subscribers else []


def create_tables(engine: Engine, database: Workbench, schema: str | None) -> None:
    def name(table: str) -> str:
        return f"{schema}.{table}" if schema else table

    with engine.begin() as conn:
        for statement in database.soak_schema_sql(schema) if schema else []:
            conn.execute(text(statement))
        conn.execute(text(database.soak_acct_ddl.format(t=name("acct"))))
        conn.execute(text(TEAM.format(t=name("team"))))
        conn.execute(text(MEMBER.format(t=name("team_member"), team=name("team"))))


def write_config(site_dir: Path, database: Workbench, url: str, schema: str | None) -> Path:
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
    if database.serves_subscribers:
        lines += ["[subscriptions.all]", f"tables = {json.dumps(list(TABLES))}",
                  f"[subscribers.{SUBSCRIBER}]", 'subscription = "all"',
                  f"output = {json.dumps(str(site_dir / SUBSCRIBER))}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def styles_for(dialect: str, seed: int) -> dict[str, str]:
    """Field style on one table and row style on the other; which one by the seed, and some
    databases the other way round (`soak_styles_turned`), so that every run has both on acct."""
    if (seed + named(dialect).soak_styles_turned) % 2:
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
