"""The `publisher` command.

Exit codes: 0 done (rows may still have been rejected: see the statuses), 1 the database or the
output could not be used, 2 a bad configuration, argument or key. The parser (`parser`) says
what each command takes; `commands` does each one.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from publisher.cli import commands, inspection, migrating
from publisher.cli.errors import UnavailableError, UsageError
from publisher.cli.parser import build_parser
from publisher.config import Config, ConfigError, Reader
from publisher.config.loading import load_config
from publisher.service.logs import configure_logging

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(getattr(args, "log_format", "text"))
    try:
        return _dispatch(args)
    except UsageError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
        return 2
    except UnavailableError as exc:
        print(f"publisher: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("publisher: interrupted; what was not acknowledged is published again next time", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "parse-key":
        return commands.parse_key_command(args.text)
    from publisher.pipeline.driver import reuse_freed_memory

    reuse_freed_memory()
    if args.command == "demo":
        from publisher.service.demo import run_demo

        return _guard(lambda: run_demo(Path(args.directory), args.master, args.formats), None)
    if args.command == "bench":
        from publisher.workshop.bench.command import run as run_bench

        return _guard(lambda: run_bench(args), None)
    if args.command == "soak":
        from publisher.workshop.soak.command import run as run_soak

        return run_soak(args)
    config = _load(args)
    command = "verify --repair" if args.command == "verify" and args.repair else args.command
    if command in commands.TRIGGERED_ONLY:
        commands.refuse_triggerless(config, command)
    if args.command == "install":
        return _guard(lambda: commands.install_command(config, args), config)
    if args.command == "poll":
        return _guard(lambda: commands.poll_command(config, Reader(args.subscriber)), config)
    if args.command == "snapshot":
        return _guard(lambda: commands.snapshot_command(config, args), config)
    if args.command == "purge":
        return _guard(lambda: commands.purge_command(config), config)
    if args.command == "requeue":
        return _guard(lambda: commands.requeue_command(config, args), config)
    if args.command == "migrate":
        return _guard(lambda: migrating.migrate_command(config, args), config)
    if args.command == "checkin":
        return _guard(lambda: commands.checkin_command(config, args), config)
    if args.command == "run":
        return _guard(lambda: commands.run_command(config, args.subscriber, args.config), config)
    if args.command == "stats":
        if args.prometheus:
            return _guard(lambda: inspection.prometheus_command(config), config)
        return _guard(lambda: inspection.stats_command(config, args.json), config)
    if args.command == "verify":
        reader = Reader(args.subscriber)
        return _guard(lambda: inspection.verify_command(config, args.documents, reader, args.repair), config)
    raise UsageError(f"unknown command {args.command}")  # pragma: no cover


def _load(args: argparse.Namespace) -> Config:
    try:
        return load_config(args.config, overrides=args.set)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _guard(action: Any, config: Config | None) -> int:
    """Turn an unreachable database or unwritable output into exit 1 with one readable line."""
    from sqlalchemy.exc import DBAPIError, NoSuchTableError, OperationalError

    from publisher.capture.install import CaptureError
    from publisher.database import MissingDriverError
    from publisher.errors import MissingStateError, TransientError, root_cause
    from publisher.locking.lock import LockHeldError
    from publisher.snapshots.snapshot import SnapshotError
    from publisher.triggerless.state import ForeignStateError, StateLockedError
    from publisher.workshop.bench.command import BenchArgumentError, BenchUnavailableError

    redact = config.database.redact if config else str
    try:
        return int(action())
    except (BenchArgumentError, CaptureError, ConfigError, ForeignStateError, MissingStateError, SnapshotError) as exc:
        raise UsageError(str(exc)) from None
    except (BenchUnavailableError, MissingDriverError) as exc:
        raise UnavailableError(str(exc)) from None
    except (TransientError, LockHeldError, StateLockedError) as exc:
        raise UnavailableError(redact(str(exc))) from None
    except NoSuchTableError as exc:
        raise UsageError(f"table {exc} does not exist") from None
    except (OperationalError, DBAPIError) as exc:
        where = config.database.display_url() if config else "the database"
        raise UnavailableError(f"cannot use the database at {where}: {redact(root_cause(exc))}") from None
    except OSError as exc:
        raise UnavailableError(f"cannot write the output: {exc}") from None
