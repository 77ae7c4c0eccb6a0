"""SQL text as `publisher migrate` reads it: cut into statements, and each statement's names.

No parser of any database's grammar: a migration is run by the database, which refuses what it
does not take. What the publisher needs of it is where each statement ends (a `;` outside quotes,
comments and PostgreSQL's dollar quotes), the names it mentions (to find the published tables it
may change, which are then locked and their capture made anew), and whether it is a TRUNCATE
(whose deletes no trigger sees on MariaDB, MySQL and SQLite).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


class StatementSyntaxError(ValueError):
    """SQL text whose end cannot be found: an unterminated quote, comment or dollar quote."""


@dataclass(frozen=True)
class Statement:
    text: str
    line: int
    """The line of the SQL text it starts on, from 1."""


_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_CLOSING = {"'": "'", '"': '"', "`": "`", "[": "]"}


@dataclass(frozen=True)
class Lexis:
    """What a database's SQL text means where statements end: MariaDB and MySQL take `#` for a
    comment and a backslash in a quoted text for an escape (unless NO_BACKSLASH_ESCAPES);
    SQLite's trigger bodies hold `;` inside BEGIN … END, which `complete` (its own rule) knows."""

    hash_comments: bool = False
    backslash_escapes: bool = False
    complete: Callable[[str], bool] | None = None
    """Whether text that ends at a `;` is a whole statement."""


def split_statements(sql: str, lexis: Lexis = Lexis()) -> list[Statement]:
    """The statements of `sql`, each without its `;` and surrounding blanks; empty ones (`;;`,
    comments alone) left out."""
    statements: list[Statement] = []
    start = i = 0
    n = len(sql)
    while i < n:
        char = sql[i]
        if char in "'\"`":
            i = _after_quote(sql, i, char, lexis.backslash_escapes and char != "`")
        elif sql.startswith("--", i) or (char == "#" and lexis.hash_comments):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise StatementSyntaxError(f"line {_line(sql, i)}: a comment opened with /* is never closed")
            i = end + 2
        elif char == "$" and (found := _DOLLAR.match(sql, i)) and not _in_word(sql, i):
            end = sql.find(found.group(0), found.end())
            if end < 0:
                raise StatementSyntaxError(f"line {_line(sql, i)}: the dollar quote {found.group(0)} is never closed")
            i = end + len(found.group(0))
        elif char == ";" and (lexis.complete is None or lexis.complete(sql[start:i + 1])):
            _add(statements, sql, start, i)
            start = i = i + 1
        else:
            i += 1
    _add(statements, sql, start, n)
    return statements


def _after_quote(sql: str, at: int, quote: str, backslash: bool = False) -> int:
    """Where a quoted text or name that opens at `at` ends; a doubled quote is the quote itself,
    and so is one after a backslash where `backslash` escapes."""
    i = at + 1
    while True:
        end = sql.find(quote, i)
        if backslash and end > 0 and _escaped(sql, i, end):
            i = end + 1
            continue
        if end < 0:
            kind = "text" if quote == "'" else "name"
            raise StatementSyntaxError(f"line {_line(sql, at)}: a quoted {kind} opened with {quote} is never closed")
        if sql.startswith(quote, end + 1):
            i = end + 2
            continue
        return end + 1


def _escaped(sql: str, start: int, at: int) -> bool:
    """Whether an odd number of backslashes (after `start`) stand right before `at`."""
    count = 0
    while at - count - 1 >= start and sql[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _in_word(sql: str, at: int) -> bool:
    return at > 0 and (sql[at - 1].isalnum() or sql[at - 1] == "_")


def _line(sql: str, at: int) -> int:
    return sql.count("\n", 0, at) + 1


_LEADING = re.compile(r"(?:\s+|--[^\n]*|#[^\n]*|/\*.*?\*/)*", re.DOTALL)


def _add(statements: list[Statement], sql: str, start: int, end: int) -> None:
    """The statement between `start` and `end`, from its first word on (comments before it are
    the previous statement's trailing ones, or the file's)."""
    begins = _LEADING.match(sql, start, end)
    first = begins.end() if begins else start
    text = sql[first:end].strip()
    if text:
        statements.append(Statement(text, _line(sql, first)))


_TOKEN = re.compile(r"""'(?:[^']|'')*'|"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|([A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*)"""
                    r"""|--[^\n]*|/\*.*?\*/|#[^\n]*""", re.DOTALL)


def _words(text: str) -> list[tuple[str, bool]]:
    """Each name or keyword of a statement, in order, as (text, quoted); texts and comments left out."""
    found = []
    for match in _TOKEN.finditer(text):
        double, back, bare = match.groups()
        if double is not None:
            found.append((double.replace('""', '"'), True))
        elif back is not None:
            found.append((back.replace("``", "`"), True))
        elif bare is not None:
            found.append((bare, False))
    return found


def words_in(statement: str) -> list[str]:
    """The names and keywords of a statement, in order, texts and comments left out."""
    return [word for word, _ in _words(statement)]


DDL_WORDS = frozenset({"ALTER", "CREATE", "DROP", "RENAME"})


def is_ddl(statement: str) -> bool:
    """Whether a statement changes the schema (ALTER, CREATE, DROP, RENAME …), not rows."""
    words = _words(statement)
    return bool(words) and not words[0][1] and words[0][0].upper() in DDL_WORDS


_ANY_NAME = re.compile(r"""[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*|"((?:[^"]|"")+)"|`((?:[^`]|``)+)`""")


def names_in(statement: str) -> set[str]:
    """Every name a statement may mention (a table's, a column's, a keyword), in lower case: the
    published tables among them are those it may change. Too many is harmless (an extra table
    waits), too few is not, so words inside texts and comments count too."""
    found = set()
    for match in _ANY_NAME.finditer(statement):
        double, back = match.groups()
        name = double.replace('""', '"') if double else back.replace("``", "`") if back else match.group(0)
        found.add(name.lower())
    return found


_TRUNCATE_OPTIONS = {"RESTART", "CONTINUE", "IDENTITY", "CASCADE", "RESTRICT"}


def truncated_tables(statement: str) -> list[str] | None:
    """The tables a `TRUNCATE [TABLE] [ONLY] a[, s.b] [options]` empties, by their names' last
    parts (a quoted name as written, others in lower case), or None for any other statement."""
    words = _words(statement)
    if not words or words[0][1] or words[0][0].upper() != "TRUNCATE":
        return None
    rest = re.sub(r"^\s*TRUNCATE(\s+TABLE\b)?(\s+ONLY\b)?", "", statement, flags=re.IGNORECASE)
    tables = []
    for part in _split_at_commas(rest):
        names = [(w, quoted) for w, quoted in _words(part) if quoted or w.upper() not in _TRUNCATE_OPTIONS]
        if names:
            word, quoted = names[-1]
            tables.append(word if quoted else word.lower())
    return tables


def _split_at_commas(text: str) -> list[str]:
    """Text cut at its commas, quoted names kept whole."""
    parts, start, i = [], 0, 0
    while i < len(text):
        if text[i] in "\"`'":
            i = _after_quote(text, i, text[i])
            continue
        if text[i] == ",":
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts
