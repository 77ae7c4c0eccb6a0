"""The names PostgreSQL's capture gives its triggers, functions and transition tables: shared by
the PL/pgSQL capture, the native one and the capture that follows a migration."""
from __future__ import annotations

import hashlib

KEY_VALUE_FUNCTION = "publisher_key_value"
POSTGRESQL_NAME_BYTES = 63
"""PostgreSQL cuts longer identifiers (NAMEDATALEN - 1), at a character boundary."""
POSTGRESQL_OLD_ROWS = "_publisher_old"
POSTGRESQL_NEW_ROWS = "_publisher_new"
"""The transition tables of the UPDATE statement trigger."""


def postgresql_trigger_name(table: str) -> str:
    """The row trigger of inserts and deletes: the one `triggered_tables` looks for, and the
    table's switch: while it is dropped or disabled, the UPDATE trigger logs nothing either."""
    return f"{table}_publisher"


def postgresql_update_trigger_name(table: str) -> str:
    """The statement trigger of updates."""
    return _postgresql_name(table, "_publisher_upd")


def postgresql_truncate_trigger_name(table: str) -> str:
    """The statement trigger of TRUNCATE."""
    return _postgresql_name(table, "_publisher_trunc")


def postgresql_trigger_names(table: str) -> tuple[str, str, str]:
    """The capture's three triggers of the table, as PostgreSQL names them: of rows (the switch),
    of UPDATE statements, of TRUNCATE."""
    return (postgresql_identifier(postgresql_trigger_name(table)), postgresql_update_trigger_name(table),
            postgresql_truncate_trigger_name(table))


def postgresql_function_names(table: str) -> tuple[str, str]:
    """The PL/pgSQL capture's functions of the table: of its rows, and of its UPDATE statements."""
    return f"{table}_publisher_log", _postgresql_name(table, "_publisher_log_upd")


def postgresql_identifier(name: str) -> str:
    return name.encode("utf-8")[:POSTGRESQL_NAME_BYTES].decode("utf-8", errors="ignore")


def _postgresql_name(table: str, suffix: str) -> str:
    """The name of a trigger or function of the table's: the table's name and the suffix.

    Where PostgreSQL would cut that, the table's name is cut instead and marked with a digest
    of the whole: a cut suffix would give the UPDATE trigger or function the name of the row
    trigger or function, and a cut table name two long tables sharing a prefix one function."""
    name = table + suffix
    if len(name.encode("utf-8")) <= POSTGRESQL_NAME_BYTES:
        return name
    marked = f"_{hashlib.sha256(table.encode('utf-8')).hexdigest()[:8]}{suffix}"
    room = POSTGRESQL_NAME_BYTES - len(marked.encode("utf-8"))
    return table.encode("utf-8")[:room].decode("utf-8", errors="ignore") + marked

