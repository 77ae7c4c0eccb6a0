"""Two PostgreSQL sessions change the tables in interleaved transactions (some left open across
check-outs, some rolled back) while two subscribers check out at random moments. Whatever the
schedule, each subscriber takes every committed event exactly once (the events its check-outs
took add up to the event log's rows) and its consumer ends up with the tables.

CI runs a fixed set of examples (derandomized); PUBLISHER_PROPERTY_EXAMPLES=n runs n random ones
(tests/hunting.py).
"""
from __future__ import annotations

import shutil

from hunting import HUNT, property_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from test_subscriptions import ALL, Site

SESSIONS = 2
IDS = 6
"""Ids per session; a session touches only its own (ids ≡ session mod SESSIONS), so that the two
never wait for each other's row locks."""

Step = tuple[str, int, int]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, SESSIONS - 1), st.integers(0, IDS - 1)),
        st.tuples(st.sampled_from(["commit", "rollback"]), st.integers(0, SESSIONS - 1), st.just(0)),
        st.tuples(st.just("check_out"), st.integers(0, 1), st.just(0)),
    ),
    min_size=1, max_size=30,
)


def test_interleaved_transactions_reach_every_subscriber_once(spark, postgresql_database, tmp_path):
    site = Site(spark, postgresql_database, tmp_path, ALL, {"a": "all", "b": "all"})
    engine = create_engine(postgresql_database.url)

    @settings(**property_settings(HUNT or 25))
    @example([("write", 0, 0), ("write", 1, 0), ("commit", 1, 0), ("check_out", 0, 0), ("commit", 0, 0),
              ("check_out", 0, 0)])
    @given(steps)
    def run(schedule: list[Step]) -> None:
        reset(site)
        sessions = [engine.connect() for _ in range(SESSIONS)]
        taken = {"a": 0, "b": 0}
        committed: list[dict[int, str]] = [{} for _ in range(SESSIONS)]
        pending = [dict(rows) for rows in committed]
        try:
            for action, number, index in schedule:
                if action == "check_out":
                    name = "ab"[number]
                    taken[name] += site.check_out(name)["events"]
                elif action == "write":
                    idu = index * SESSIONS + number + 1
                    sessions[number].execute(text(change(pending[number], idu, site)))
                elif action == "commit":
                    sessions[number].commit()
                    committed[number] = dict(pending[number])
                else:
                    sessions[number].rollback()
                    pending[number] = dict(committed[number])
            for session in sessions:
                session.commit()
        finally:
            for session in sessions:
                session.close()
        for name in taken:
            taken[name] += site.check_out(name)["events"]
        assert taken == dict.fromkeys(taken, site.events()), schedule
        assert site.verify("a") == [] and site.verify("b") == [], schedule

    try:
        run()
    finally:
        engine.dispose()


def change(rows: dict[int, str], idu: int, site: Site) -> str:
    """Insert the row, or update or delete it, as the session sees it."""
    usr = site.db.qualified("usr")
    if idu not in rows:
        rows[idu] = "new"
        return f"INSERT INTO {usr} VALUES ({idu}, 'new', NULL)"
    if rows[idu] == "new":
        rows[idu] = "changed"
        return f"UPDATE {usr} SET fname = 'changed', lname = 'x{idu}' WHERE idu = {idu}"
    del rows[idu]
    return f"DELETE FROM {usr} WHERE idu = {idu}"


def reset(site: Site) -> None:
    tables = ", ".join(site.db.qualified(t) for t in ("usr", "member", "event_log", "event_log_subscriber",
                                                       "event_log_checkin"))
    site.db.execute(f"TRUNCATE {tables} RESTART IDENTITY")
    for name in ("a", "b"):
        shutil.rmtree(site.root / name, ignore_errors=True)
        (site.root / name).mkdir()
