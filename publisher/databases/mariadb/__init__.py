"""MariaDB and MySQL (one family): its dialect, its row-trigger capture, its named lock and its SQL
templates. `workshop.py` is what bench and soak need to drive it. Nothing is imported here: the
registry loads the dialect alone."""
