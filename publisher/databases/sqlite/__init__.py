"""SQLite: its dialect, its row-trigger capture and its SQL templates; its lock is the default
lease row. `workshop.py` is what bench and soak need to drive it. Nothing is imported here: the
registry loads the dialect alone."""
