"""Migrations of a published table during a soak, among the other faults: MariaDB and SQLite
through `publisher migrate`, PostgreSQL as the application's own tool runs them (plain DDL from
another session; its event trigger follows, and `run`'s cycle publishes the rows again).

The writers write `acct`'s columns by name, so the migrations leave those names alone: a column
added with a default (in every row), one added empty, renamed and dropped, and `score` retyped
to a decimal that spells every value anew where the database can (not SQLite).
"""
from __future__ import annotations

from sqlalchemy import Engine, text

from publisher.workshop.soak.schema import Site

RETYPE = {
    "postgresql": "ALTER TABLE {t} ALTER COLUMN score TYPE NUMERIC(14,4)",
    "mariadb": "ALTER TABLE {t} MODIFY score DECIMAL(14,4)",
}
STEPS = (
    "ALTER TABLE {t} ADD COLUMN label VARCHAR(40) DEFAULT 'new'",
    "ALTER TABLE {t} ADD COLUMN spare VARCHAR(40)",
    "ALTER TABLE {t} RENAME COLUMN spare TO extra",
    "retype",
    "ALTER TABLE {t} DROP COLUMN extra",
)


class Migrations:
    """The soak's migrations of one database, run one at a time (`run_next`)."""

    def __init__(self, site: Site, engine: Engine) -> None:
        table = site.table("acct")
        self.statements = [RETYPE[site.dialect].format(t=table) if step == "retype" else step.format(t=table)
                           for step in STEPS if step != "retype" or site.dialect in RETYPE]
        self.site = site
        self.engine = engine
        self.ran = 0

    @property
    def left(self) -> bool:
        return self.ran < len(self.statements)

    def run_next(self) -> str:
        """Run the next migration; what it was."""
        statement = self.statements[self.ran]
        if self.site.dialect == "postgresql":
            with self.engine.begin() as conn:
                conn.execute(text(statement))
        else:
            from publisher.config.loading import load_config
            from publisher.service.migrate import migrate

            migrate(load_config(self.site.config), statement)
        self.ran += 1
        return statement
