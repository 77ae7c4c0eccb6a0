"""Snapshots: publish whole rows of published tables, consistent with the changes made while they
are read: the initial load, a resync after a migration, a repair.

Entry points: `snapshot.snapshot` (chunks of rows logged as row query-backs, published by the
next cycles), `snapshot.snapshot_directly` (`--direct`: documents written straight from the rows)
and `snapshot.initial_snapshot` (a new reader's first load). `ranges` cuts a table into key
ranges, `chunks` logs one chunk's events, `direct` builds a chunk's documents, `state` keeps
the progress a resumed snapshot starts from.
"""
