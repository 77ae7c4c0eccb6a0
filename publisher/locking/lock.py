"""One publisher per event log, enforced by the database itself.

Where the database has a lock that lasts as long as a session (`Dialect.lock`: an advisory lock, a
named lock), it is taken on a connection held for the process's lifetime; the server drops it
when that connection closes, so also when the process dies. Elsewhere (`LeaseRow`): a row in
`<event_log>_lock` with an owner and a lease that a daemon thread renews; an expired lease, or
one whose owner is a dead process on this host, may be taken over. Lease times come from the
clocks of the publishers' hosts, so they should be roughly in step.
"""
from __future__ import annotations

import logging
import threading
from types import TracebackType

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from publisher.config import STATUS_MODE, Config, Reader
from publisher.dialects import dialect_of
from publisher.errors import root_cause
from publisher.locking.backends import Backend, LockScope, lock_backend, locked_name, this_process

log = logging.getLogger("publisher")


LEASE_SECONDS = 30.0


RENEW_SECONDS = 5.0


RETRY_SECONDS = 3.0


class LockHeldError(RuntimeError):
    """Another publisher is publishing this event log and `when_locked` says not to wait."""

    def __init__(self, event_log: str, holder: str) -> None:
        super().__init__(
            f"the event log {event_log} is already being published by {holder}: stop that publisher first, "
            'or set publisher.when_locked = "wait" to wait for it'
        )
        self.event_log = event_log
        self.holder = holder


class PublisherLock:
    """`with PublisherLock(config, stop) as lock:` holds the event log's lock for the block.

    `held` is False when `stop` was set while waiting; `lost` turns True (and `stop` is set) when
    the lock slipped away, e.g. the lock connection broke or the lease expired unrenewed.
    """

    def __init__(
        self,
        config: Config,
        stop: threading.Event | None = None,
        *,
        lease_seconds: float = LEASE_SECONDS,
        renew_seconds: float = RENEW_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        reader: Reader = STATUS_MODE,
        scope: LockScope = LockScope.CYCLES,
    ) -> None:
        """`reader`: whose lock, the status mode's or a subscriber's check-outs'; `scope`: of
        its cycles, or of its resyncs."""
        self.config = config
        self.stop = stop if stop is not None else threading.Event()
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.owner = this_process()
        self.held = False
        self._lost = threading.Event()
        self._backend: Backend
        dialect = dialect_of(make_url(config.database.sqlalchemy_url()).get_backend_name())
        self._backend = lock_backend(dialect).open(config, self.owner, locked_name(config, reader, scope),
                                                        lease_seconds)
        self._renewer: threading.Thread | None = None
        self._stop_renewing = threading.Event()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def acquire(self, wait: bool = False) -> bool:
        """Take the lock, or per `publisher.when_locked` (`wait`: whatever it says, wait) raise
        LockHeldError or wait until `stop`."""
        try:
            if not self._wait_for_lock(wait):
                self._backend.close()
                return False
        except BaseException:
            self._backend.close()
            raise
        self._hold()
        return True

    def acquire_if_free(self) -> bool:
        """Take the lock if no other process holds it, without waiting (whatever `when_locked` says)."""
        try:
            holder = self._backend.try_acquire()
        except BaseException:
            self._backend.close()
            raise
        if holder is not None:
            self._backend.close()
            return False
        self._hold()
        return True

    def _hold(self) -> None:
        self.held = True
        self._stop_renewing.clear()
        self._renewer = threading.Thread(target=self._renew, name="publisher-lock", daemon=True)
        self._renewer.start()

    def _wait_for_lock(self, wait: bool) -> bool:
        holder = self._backend.try_acquire()
        if holder is None:
            return True
        if self.config.publisher.when_locked == "exit" and not wait:
            raise LockHeldError(self._backend.name, holder)
        log.info(
            "the event log %s is being published by %s: waiting for it (retrying every %g s)",
            self._backend.name, holder, self.retry_seconds,
        )
        while holder is not None:
            if self.stop.wait(self.retry_seconds):
                log.info("stopped waiting for the event log %s", self._backend.name)
                return False
            holder = self._backend.try_acquire()
        log.info("got the lock of the event log %s", self._backend.name)
        return True

    def release(self) -> None:
        """Give the lock back; safe to call when it is not held."""
        self._stop_renewing.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        if self.held:
            self.held = False
            self._backend.release()
        self._backend.close()

    def __enter__(self) -> PublisherLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def _renew(self) -> None:
        while not self._stop_renewing.wait(self.renew_seconds):
            try:
                still_held = self._backend.renew()
            except DBAPIError as exc:
                still_held = self._backend.may_still_hold()
                log.warning("could not renew the lock of %s: %s", self._backend.name, root_cause(exc))
            if not still_held:
                log.warning(
                    "lost the lock of the event log %s (its connection broke, as when the database restarts, "
                    "or its lease ran out): no new cycle starts until it is ours again",
                    self._backend.name,
                )
                self.held = False
                self._lost.set()
                self.stop.set()
                return
