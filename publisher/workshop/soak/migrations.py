"""Migrations of a published table during a soak, among the other faults: through `publisher
migrate`, or where the capture follows DDL (`Workbench.soak_plain_ddl`) as the application's own
tool runs them (plain DDL from another session; the event trigger follows, and `run`'s cycle
publishes the rows again).

The writers write `acct`'s columns by name, so the migrations leave those names alone: a column
added with a default (in every row), one added empty, renamed and dropped, and `score` retyped
to a decimal that spells every value anew where the database keeps a column's type
(`Workbench.soak_retype_sql`).
"""
from __future__ import annotations

from sqlalchemy import Engine, text

from publisher.workshop.soak.schema import Site

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
        retype = site.database.soak_retype_sql
        steps = [retype if step == "retype" else step for step in STEPS]
        self.statements = [step.format(t=table) for step in steps if step is not None]
        self.site = site
        self.engine = engine
        self.ran = 0

    @property
    def left(self) -> bool:
        return self.ran < len(self.statements)

    def run_next(self) -> str:
        """Run the next migration; what it was."""
        statement = self.statements[self.ran]
        if self.site.database.soak_plain_ddl:
            with self.engine.begin() as conn:
                conn.execute(text(statement))
        else:
            from publisher.config.loading import load_config
            from publisher.service.migrate import migrate

            migrate(load_config(self.site.config), statement)
        self.ran += 1
        return statement
