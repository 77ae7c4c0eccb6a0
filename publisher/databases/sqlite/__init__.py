"""SQLite: its dialect, its row-trigger capture and its SQL templates; its lock is the default
lease row. Nothing is imported here: the registry loads the dialect alone."""
