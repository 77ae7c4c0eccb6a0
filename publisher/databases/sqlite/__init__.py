"""SQLite: what only SQLite needs."""
