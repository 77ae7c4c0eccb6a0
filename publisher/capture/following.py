"""Following a migration: the capture of every published table whose shape changed made anew
for its new shape, each reader owed the table's resync in the same transaction
(`capture.resyncs`). `publisher migrate` does it inside the migration, as the tables' owner; a
cycle does it after a migration another tool ran, as the publisher's own user, which may not
be allowed to: then the table is said, with the way out, and the cycle goes on with the others.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from publisher.capture.base import capture_of
from publisher.capture.install import capture_carriers, installed_native, on_native_alone, reinstall_sql
from publisher.capture.resyncs import owe_resync_sql, resyncs_kept
from publisher.capture.shape import StaleCapture, record_sql, stale_captures
from publisher.capture.shape_history import shape_record_sql
from publisher.capture.tables import CaptureError
from publisher.config import Config
from publisher.dialects import dialect_of
from publisher.errors import root_cause

log = logging.getLogger("publisher")


def follow_shapes(config: Config, engine: Engine, only: Collection[str] | None = None,
                  execute: Callable[[Sequence[str]], None] | None = None, strict: bool = False) -> list[StaleCapture]:
    """Reinstall the capture of every table a migration changed (of those installed as `only`,
    in lower case, if given), logging one warning each; a table that cannot be captured any more
    is logged and left as it is (`strict`: raised). `execute`: how the statements run (`publisher
    migrate` runs them in its own transaction); by default, a cycle's, each table's in one of
    their own, and a table this user may not make anew is said (`_not_made_anew`) and left out
    of the tables returned."""
    run = execute or (lambda statements: capture_of(config, engine).execute(statements))
    def carriers() -> tuple[str, ...]:
        return capture_carriers(config, engine, any_trigger=True)

    stale = stale_captures(config, engine, carriers, only)
    owing = bool(stale) and (execute is not None or resyncs_kept(config, engine))  # `migrate` made sure of it
    native = installed_native(config, engine)
    capture = capture_of(config, engine)
    followed: list[StaleCapture] = []
    for found in stale:
        owed = owe_resync_sql(config, found.published_as, capture.qualify, capture.literal) if owing else []
        # first: where each statement commits on its own, a kill in between leaves a resync too many, never one too few
        on_native = on_native_alone(config, engine, found, native)
        if on_native is not None:
            run(owed + record_sql(config, engine, found.published_as, on_native, found.style)
                + shape_record_sql(config, engine, found.published_as, capture.qualify))
            log.info("%s: the native capture follows it; its new shape recorded", found.describe())
            followed.append(found)
            continue
        try:
            if execute is None:
                _check_may_log(config, engine, found)
            run(owed + reinstall_sql(config, engine, found.published_as, found.style))
        except MayNotLog:
            continue
        except CaptureError as exc:
            if strict:
                raise CaptureError(f"{found.describe()}: its capture cannot be made anew: {exc}") from None
            log.error("%s: capture not reinstalled: %s", found.describe(), exc)
            continue
        except DBAPIError as exc:
            if execute is not None or not dialect_of(engine).refused_for_rights(exc.orig):
                raise
            if stale_captures(config, engine, carriers, {found.published_as.lower()}):  # else `migrate` made it anew
                _not_made_anew(engine, found, root_cause(exc))
            continue
        log.warning("%s: capture reinstalled", found.describe())
        followed.append(found)
    return followed


class MayNotLog(CaptureError):
    """Triggers this user made would run as it, and it may not insert into the event log."""


def _check_may_log(config: Config, engine: Engine, found: StaleCapture) -> None:
    """MayNotLog where triggers run as their definer and this user may not INSERT into the event
    log: triggers it made anew would fail every write of the table. Nothing is inserted: no row
    is selected."""
    if not dialect_of(engine).triggers_run_as_their_definer:
        return
    log_table = capture_of(config, engine).qualify(config.event_log.table)
    with engine.connect() as conn:
        try:
            conn.execute(text(f"INSERT INTO {log_table} SELECT * FROM {log_table} WHERE 1 = 0"))
        except DBAPIError as exc:
            if not dialect_of(engine).refused_for_rights(exc.orig):
                raise
            _not_made_anew(engine, found, root_cause(exc), may_log=False)
            raise MayNotLog(root_cause(exc)) from None
        finally:
            conn.rollback()


_SAID: set[tuple[str, str]] = set()
"""The captures a cycle could not make anew and has said so (engine, what), once per process."""


def _not_made_anew(engine: Engine, found: StaleCapture, cause: str, may_log: bool = True) -> None:
    """A cycle's user may not make the table's capture anew: said once per shape, with the way
    out. Its writes may fail meanwhile (a column the old triggers name, renamed or dropped);
    `may_log` False: it may not insert into the event log, which the triggers it made before run as."""
    said = (str(engine.url), found.describe())
    if said in _SAID:
        return
    _SAID.add(said)
    if not may_log:
        log.error("%s: its capture is not made anew: the triggers would run as the publisher's user, which may not "
                  "insert into the event log (%s), and fail every write of the table; so would every trigger this user "
                  "made anew before. Grant it INSERT on the event log (the next cycle then makes the capture anew), "
                  "or run `publisher install --table %s` as the table's owner", found.describe(), cause,
                  found.published_as)
        return
    log.error("%s: the publisher's user may not make its capture anew (%s), and until it is, a write of the table "
              "that the old capture cannot log fails (a column renamed or dropped): run `publisher install --table "
              "%s` as the table's owner, which makes it anew and publishes its rows again; run the next migration "
              "through `publisher migrate`, which does both inside it", found.describe(), cause, found.published_as)
