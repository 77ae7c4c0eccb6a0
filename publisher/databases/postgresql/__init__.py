"""PostgreSQL: its dialect, its capture (PL/pgSQL triggers, the native C capture and the event
trigger that follows a migration), its advisory lock, its reads through COPY and its SQL
templates. `workshop.py` is what bench and soak need to drive it. Nothing is imported here: the
registry loads the dialect alone."""
