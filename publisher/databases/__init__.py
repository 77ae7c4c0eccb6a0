"""The databases the publisher speaks, one folder each: `postgresql/`, `mariadb/` (MySQL and
MariaDB), `sqlite/`.

A folder holds everything its database needs: its `Dialect` (`dialect.py`), its capture
(`capture.py`, the triggers and what they install, with its SQL templates in `sql/`), its lock
where it has one of its own (`lock.py`), and whatever else only that database has (PostgreSQL's
native capture and its C sources, its event trigger, its reads through COPY), and what `publisher
bench` and `publisher soak` need to drive it (`workshop.py`, a `Workbench`: its private server,
its load; `workbench.py` and `servers.py` here are their common ground). The registry,
`publisher.dialects._FAMILIES`, names each folder's dialect class by its dotted name; the dialect
names its capture, its lock and its other parts the same way, and the layers below this package
reach a database only through the registry. A new database is a new folder and one line in the
registry (the steps: `docs/guides/new-database.md`).
"""
