"""`publisher migrate`: a migration run, or the resyncs migrations owe published, as the
application's login while the publisher's own user stays the loopback one."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from publisher.cli.errors import UsageError
from publisher.config import Config


def publisher_user_kept(config: Config, path: str | None, overrides: list[str]) -> Config:
    """`migrate --set database.url=…` runs as another login, the application's, so that the
    changes it makes are published; whose changes are loopback stays what the cycles take it to be:
    `database.user`, else the user of the URL the configuration names without that override."""
    from dataclasses import replace

    from sqlalchemy.engine import make_url

    from publisher.config.loading import load_config

    def names_url(item: str) -> bool:
        return item.partition("=")[0].strip() == "database.url"

    if config.database.user or not any(names_url(item) for item in overrides):
        return config
    named = load_config(path, overrides=[item for item in overrides if not names_url(item)])
    user = named.database.user or make_url(named.database.url).username
    return replace(config, database=replace(config.database, user=user)) if user else config


def migrate_command(config: Config, args: argparse.Namespace) -> int:
    from publisher.model.statements import StatementSyntaxError
    from publisher.service.migrate import MigrationError, migrate

    if args.resync_owed:
        return _resync_owed(publisher_user_kept(config, args.config, args.set), args.dry_run)
    if args.file is not None:
        try:
            sql = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"-f {args.file}: {exc.strerror or exc}") from None
    else:
        sql = "\n;\n".join(args.execute)  # a statement's trailing -- comment ends at its line
    config = publisher_user_kept(config, args.config, args.set)
    try:
        result = migrate(config, sql, args.dry_run)
    except StatementSyntaxError as exc:
        raise UsageError(f"migrate: {exc}; nothing has run") from None
    except MigrationError as exc:
        raise UsageError(f"migrate: {config.database.redact(str(exc))}") from None
    if args.dry_run:
        print(";\n".join(result.sql) + (";" if result.sql else ""))
    for table in result.shapes_recorded:
        print(f"publisher: the capture of {table!r} was made anew for its new shape", file=sys.stderr)
    print(json.dumps(result.summary()))
    return 0


def _resync_owed(config: Config, dry_run: bool) -> int:
    """`migrate --resync-owed`: what migrations owe, published; its summary line."""
    from sqlalchemy.exc import SQLAlchemyError

    from publisher.errors import root_cause
    from publisher.service.migrate import MigrationError, ensure_owed_resyncs, resync

    if dry_run:
        raise UsageError("migrate: --dry-run shows a migration's SQL; --resync-owed runs none")
    started = time.monotonic()
    try:
        ensure_owed_resyncs(config)
    except MigrationError as exc:
        raise UsageError(f"migrate: {config.database.redact(str(exc))}") from None
    try:
        resynced = resync(config)
    except SQLAlchemyError as exc:
        raise UsageError(f"migrate --resync-owed: {config.database.redact(root_cause(exc))}: a resync reads the rows "
                         "under a share lock and logs them in the event log; run it as the tables' owner "
                         "(--set database.url=…)") from None
    print(json.dumps({"resynced": resynced, "seconds": round(time.monotonic() - started, 3)}))
    return 0
