"""Writer threads: random transactions of several statements through the real triggers.

Keys come from a small space, so that inserts meet deleted keys again and key updates collide;
the database refuses what breaks a key or a foreign key, and that transaction is rolled back
and counted. Texts carry what a table_key or a document has to quote or escape.
"""
from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from publisher.workshop.soak.schema import Site

CODES = ["plain", "O'Brien", 'say "hi"', "a,b", "x=y", "k=v,w", "Ünïcødé", "日本語", "🙂 smile",
         "back\\slash", "semi;colon", "<tag>&amp;", " lead", "+plus#", "new\nline"]
DAYS = [dt.date(2026, 1, 1), dt.date(1999, 12, 31), dt.date(2000, 2, 29), dt.date(1970, 1, 1)]
ODD = ["", "O'Reilly", 'a "quoted" word', "comma, and more", "k=v", "é à ü ß", "Ελληνικά", "中文字符",
       "🙂🚀👍🏽", "two\nlines", "tab\there", "<b>&lt;</b>", "trailing  ", "\\", "=,;+\"'#<>"]
MEMBERS = ["ann", "b,o=b", "Çé", "🙂", "x y", "'q'", "\"dq\"", "m\nn"]
TEAMS = 30
MIB = 1024 * 1024
Statement = tuple[str, dict[str, Any]]


class Writers:
    """`count` threads writing until `stop` is set; their counts, merged, in `counts`."""

    def __init__(self, engine: Engine, site: Site, seed: int, count: int, large_values: int, rate: float,
                 bursts: bool) -> None:
        self.engine, self.site, self.seed, self.count, self.bursts = engine, site, seed, count, bursts
        self.pause = 2.0 / rate
        """Pauses between a writer's transactions average 1/rate: bursts, and a pace the
        publisher keeps up with, so the drain is short."""
        self.large_left = large_values
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        """Why transactions were aborted: the first words of the driver's message."""
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._write, args=(n,), name=f"soak-writer-{n}", daemon=True)
                         for n in range(count)]
        site.database.soak_session(engine)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self, timeout: float = 120.0) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _count(self, **amounts: int) -> None:
        with self._lock:
            self.counts.update(amounts)

    def _take_large(self, rng: random.Random) -> bool:
        with self._lock:
            if self.large_left <= 0 or rng.random() > 0.02:
                return False
            self.large_left -= 1
            return True

    def _write(self, number: int) -> None:
        rng = random.Random(self.seed * 1000 + number)
        gen = Generator(self.site, rng, lambda: self._take_large(rng))
        while not self.stop.wait(0 if self.bursts and _burst() else rng.uniform(0, self.pause)):
            plan = [s for _ in range(rng.randint(1, 4)) for s in gen.change()]
            try:
                with self.engine.begin() as conn:
                    changed = sum(_execute(conn, statement) for statement in plan)
                self._count(transactions=1, statements=len(plan), writes=changed,
                            large=sum(1 for _, p in plan if len(str(p.get("note") or "")) > MIB))
            except IntegrityError:
                self._count(conflicts=1)
            except DBAPIError as exc:
                self._count(aborted=1)
                with self._lock:
                    self.reasons[" ".join(str(exc.orig).split())[:60]] += 1
                time.sleep(rng.uniform(0.05, 0.3))


def _burst() -> bool:
    """One second in every ten the writers write as fast as they can, all at once: concurrent
    statements interleave their events in the event log."""
    return int(time.monotonic()) % 10 == 0


def _execute(conn: Connection, statement: Statement) -> int:
    return int(conn.execute(text(statement[0]), statement[1]).rowcount or 0)


class Generator:
    """Random statements for one site; `change()` is one change of some kind."""

    def __init__(self, site: Site, rng: random.Random, large: Callable[[], bool]) -> None:
        self.site, self.rng, self.large = site, rng, large
        self.acct, self.team, self.member = (site.table(n) for n in ("acct", "team", "team_member"))
        self.parts: list[Any] = list(site.database.soak_parts)

    def change(self) -> list[Statement]:
        choices: list[tuple[float, Callable[[], list[Statement]]]] = [
            (0.16, self.insert), (0.22, self.update), (0.08, self.update_key), (0.12, self.delete),
            (0.05, self.reinsert), (0.05, self.insert_team), (0.05, self.update_team),
            (0.12, self.add_member), (0.07, self.remove_member), (0.04, self.delete_team),
        ]
        pick = self.rng.random() * sum(w for w, _ in choices)
        for weight, make in choices:
            pick -= weight
            if pick <= 0:
                return make()
        return self.insert()

    def key(self, prefix: str = "") -> dict[str, Any]:
        return {f"{prefix}code": self.rng.choice(CODES), f"{prefix}day": self.day(),
                f"{prefix}part": self.rng.choice(self.parts)}

    def day(self) -> Any:
        day = self.rng.choice(DAYS)
        return self.site.database.soak_bind(day)

    def values(self, columns: list[str]) -> dict[str, Any]:
        return {c: getattr(self, f"_{c}")() for c in columns}

    def _maybe(self, make: Callable[[], Any]) -> Any:
        return None if self.rng.random() < 0.2 else make()

    def _name(self) -> Any:
        return self._maybe(lambda: self.rng.choice(ODD) + self.rng.choice(ODD))

    def _score(self) -> Any:
        def number() -> Any:
            value = Decimal(self.rng.randint(-10**8, 10**8)) / 1000
            return self.site.database.soak_bind(value)
        return self._maybe(number)

    def _seen(self) -> Any:
        def moment() -> Any:
            at = dt.datetime(2026, 1, 1) + dt.timedelta(milliseconds=self.rng.randint(0, 10**11))
            return self.site.database.soak_bind(at)
        return self._maybe(moment)

    def _photo(self) -> Any:
        return self._maybe(lambda: self.rng.randbytes(self.rng.choice([0, 1, 3, 40, 300])))

    def _note(self) -> Any:
        if self.large():
            return "Ωmega🙂,=\n" * int(MIB / 10 * self.rng.uniform(1.0, 2.5))  # 1.3 to 3.3 MB
        return self._maybe(lambda: "\n".join(self.rng.choice(ODD) for _ in range(self.rng.randint(1, 3))))

    WHERE = "code = :code AND day = :day AND part = :part"
    COLUMNS = ["name", "score", "seen", "photo", "note"]

    def insert(self) -> list[Statement]:
        params = {**self.key(), **self.values(self.COLUMNS)}
        names = ", ".join(params)
        return [(f"INSERT INTO {self.acct} ({names}) VALUES ({', '.join(':' + n for n in params)})", params)]

    def update(self) -> list[Statement]:
        columns = self.rng.sample(self.COLUMNS, self.rng.randint(1, 3))
        sets = ", ".join(f"{c} = :{c}" for c in columns)
        return [(f"UPDATE {self.acct} SET {sets} WHERE {self.WHERE}", {**self.key(), **self.values(columns)})]

    def update_key(self) -> list[Statement]:
        new = self.key("new_")
        parts = self.rng.sample(["code", "day", "part"], self.rng.randint(1, 3))
        extra = self.rng.sample(self.COLUMNS, self.rng.randint(0, 2))
        sets = ", ".join([f"{p} = :new_{p}" for p in parts] + [f"{c} = :{c}" for c in extra])
        params = {**self.key(), **new, **self.values(extra)}
        return [(f"UPDATE {self.acct} SET {sets} WHERE {self.WHERE}", params)]

    def delete(self) -> list[Statement]:
        return [(f"DELETE FROM {self.acct} WHERE {self.WHERE}", self.key())]

    def reinsert(self) -> list[Statement]:
        """A key deleted and inserted again in one transaction, with other values."""
        key = self.key()
        params = {**key, **self.values(self.COLUMNS)}
        names = ", ".join(params)
        return [(f"DELETE FROM {self.acct} WHERE {self.WHERE}", key),
                (f"INSERT INTO {self.acct} ({names}) VALUES ({', '.join(':' + n for n in params)})", params)]

    def tid(self) -> dict[str, Any]:
        return {"tid": self.rng.randint(1, TEAMS)}

    def insert_team(self) -> list[Statement]:
        return [(f"INSERT INTO {self.team} (tid, title) VALUES (:tid, :title)", {**self.tid(), "title": self._name()})]

    def update_team(self) -> list[Statement]:
        return [(f"UPDATE {self.team} SET title = :title WHERE tid = :tid", {**self.tid(), "title": self._name()})]

    def add_member(self) -> list[Statement]:
        params = {**self.tid(), "member": self.rng.choice(MEMBERS)}
        return [(f"INSERT INTO {self.member} (tid, member) SELECT tid, :member FROM {self.team} WHERE tid = :tid",
                 params)]

    def remove_member(self) -> list[Statement]:
        params = {**self.tid(), "member": self.rng.choice(MEMBERS)}
        return [(f"DELETE FROM {self.member} WHERE tid = :tid AND member = :member", params)]

    def delete_team(self) -> list[Statement]:
        """Members first: the foreign key has no action (where an action fires no trigger, the
        capture refuses it)."""
        params = self.tid()
        return [(f"DELETE FROM {self.member} WHERE tid = :tid", params),
                (f"DELETE FROM {self.team} WHERE tid = :tid", params)]
