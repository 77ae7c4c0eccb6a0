"""MariaDB and MySQL: what only they need."""
