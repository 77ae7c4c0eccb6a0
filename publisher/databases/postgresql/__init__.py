"""PostgreSQL: what only PostgreSQL needs."""
