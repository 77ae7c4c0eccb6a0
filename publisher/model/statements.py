"""SQL text as `publisher migrate` reads it: cut into statements, and the tables each one alters.

No parser of any database's grammar: a migration is run by the database, which refuses what it
does not take. What the publisher needs of it is where each statement ends (a `;` outside texts,
quoted names, comments and bodies, as each database spells them: `Lexis`), and, for a statement
that may change a table's shape or empty it, which table that is (`altered_tables`): `ALTER
TABLE`, `DROP TABLE`, `RENAME TABLE`, `CREATE INDEX … ON`, `TRUNCATE`. Rows changed by other
statements are captured by the triggers as any application's.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass


class StatementSyntaxError(ValueError):
    """SQL text whose end cannot be found: an unterminated quote, comment or body."""


@dataclass(frozen=True)
class Statement:
    text: str
    line: int
    """The line of the SQL text it starts on, from 1."""


@dataclass(frozen=True)
class Lexis:
    """What a database's SQL text means where statements end."""

    hash_comments: bool = False
    """`#` opens a comment, and `--` does only before a blank (each family's capture sets its `lexis`)."""
    backslash_escapes: bool = False
    """A backslash in a quoted text escapes the next character."""
    dollar_quotes: bool = False
    """`$tag$ … $tag$` bodies, `E'…'` texts with backslash escapes, nested `/* */`."""
    bracket_names: bool = False
    """`[name]` is a quoted name."""
    complete: Callable[[str], bool] | None = None
    """Whether text that ends at a `;` is a whole statement (where trigger bodies hold `;`)."""


@dataclass(frozen=True)
class Token:
    kind: str
    """name (bare), quoted (a quoted name), text, punct (one character), end (`;`)."""
    value: str
    """A name as written (a quoted one unquoted), or the character."""
    start: int
    end: int


_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_NAME = re.compile(r"[A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*")


def tokens(sql: str, lexis: Lexis = Lexis()) -> Iterator[Token]:
    """The names, texts, punctuation and `;` of SQL text, comments and blanks left out."""
    i, n = 0, len(sql)
    while i < n:
        char = sql[i]
        if char.isspace():
            i += 1
        elif _line_comment(sql, i, lexis):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            i = _after_comment(sql, i, lexis.dollar_quotes)
        elif char == "'" or (lexis.dollar_quotes and char in "Ee" and sql.startswith("'", i + 1)):
            quote = i + (char != "'")
            end = _after_quote(sql, quote, "'", lexis.backslash_escapes or quote != i)
            yield Token("text", sql[quote + 1:end - 1], i, end)
            i = end
        elif char in '"`' or (char == "[" and lexis.bracket_names):
            closing = "]" if char == "[" else char
            end = _after_quote(sql, i, closing, lexis.backslash_escapes and char == '"')
            yield Token("quoted", sql[i + 1:end - 1].replace(closing * 2, closing), i, end)
            i = end
        elif char == "$" and lexis.dollar_quotes and (found := _DOLLAR.match(sql, i)):
            end = sql.find(found.group(0), found.end())
            if end < 0:
                raise StatementSyntaxError(f"line {_line(sql, i)}: the body opened with {found.group(0)} is never "
                                           "closed")
            yield Token("text", sql[found.end():end], i, end + len(found.group(0)))
            i = end + len(found.group(0))
        elif (name := _NAME.match(sql, i)) is not None:
            yield Token("name", name.group(0), i, name.end())
            i = name.end()
        else:
            yield Token("end" if char == ";" else "punct", char, i, i + 1)
            i += 1


def _line_comment(sql: str, at: int, lexis: Lexis) -> bool:
    if lexis.hash_comments:
        return sql[at] == "#" or (sql.startswith("--", at) and (at + 2 == len(sql) or sql[at + 2].isspace()))
    return sql.startswith("--", at)


def _after_comment(sql: str, at: int, nested: bool) -> int:
    depth, i = 0, at
    while True:
        close = sql.find("*/", i)
        opened = sql.find("/*", i) if nested or depth == 0 else -1
        if opened >= 0 and (close < 0 or opened < close):
            depth, i = depth + 1, opened + 2
            continue
        if close < 0:
            raise StatementSyntaxError(f"line {_line(sql, at)}: a comment opened with /* is never closed")
        depth, i = depth - 1, close + 2
        if depth == 0:
            return i


def _after_quote(sql: str, at: int, quote: str, backslash: bool) -> int:
    """Where a quoted text or name that opens at `at` ends; a doubled quote is the quote itself,
    and so is one after a backslash where `backslash` escapes."""
    i = at + 1
    while True:
        end = sql.find(quote, i)
        if end < 0:
            kind = "text" if quote == "'" else "name"
            raise StatementSyntaxError(f"line {_line(sql, at)}: a quoted {kind} opened with "
                                       f"{sql[at]} is never closed")
        if backslash and _escaped(sql, i, end):
            i = end + 1
        elif sql.startswith(quote, end + 1):
            i = end + 2
        else:
            return end + 1


def _escaped(sql: str, start: int, at: int) -> bool:
    """Whether an odd number of backslashes (after `start`) stand right before `at`."""
    count = 0
    while at - count - 1 >= start and sql[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _line(sql: str, at: int) -> int:
    return sql.count("\n", 0, at) + 1


def split_statements(sql: str, lexis: Lexis = Lexis()) -> list[Statement]:
    """The statements of `sql`, each from its first word to before its `;`; empty ones (`;;`,
    comments alone) left out."""
    statements: list[Statement] = []
    first: Token | None = None
    for token in tokens(sql, lexis):
        if token.kind != "end":
            first = first or token
            continue
        if first is None:
            continue
        if lexis.complete is not None and not lexis.complete(sql[first.start:token.end]):
            continue
        statements.append(Statement(sql[first.start:token.start].strip(), _line(sql, first.start)))
        first = None
    if first is not None:
        statements.append(Statement(sql[first.start:].strip(), _line(sql, first.start)))
    return statements


def words_in(statement: str, lexis: Lexis = Lexis()) -> list[str]:
    """The names and keywords of a statement, in order, texts and comments left out."""
    return [t.value for t in tokens(statement, lexis) if t.kind in ("name", "quoted")]


@dataclass(frozen=True)
class TableName:
    """A table as a statement names it: its schema if qualified, and whether it was quoted
    (then its case is its own; else the database folds it)."""

    name: str
    schema: str | None = None
    quoted: bool = False


def altered_tables(statement: str, lexis: Lexis = Lexis()) -> list[TableName]:
    """The tables whose shape a statement may change or whose rows it empties: the table of
    ALTER TABLE (and the name it is renamed to), CREATE INDEX … ON, the tables of DROP TABLE,
    TRUNCATE and both sides of RENAME TABLE. None for any other statement (its rows' changes
    are captured by the triggers)."""
    found = [t for t in tokens(statement, lexis) if t.kind != "text"]
    words = [t.value.upper() if t.kind == "name" else "" for t in found]
    head = words[:2]
    if head == ["ALTER", "TABLE"] or head == ["DROP", "TABLE"]:
        at = _skip(words, 2, ("IF", "EXISTS", "ONLY"))
        names = _names(found, at, many=head[0] == "DROP")
        for i in range(at, len(words) - 2):  # ALTER TABLE a RENAME TO b: b is a's name from now on
            if words[i:i + 2] == ["RENAME", "TO"]:
                names += _names(found, i + 2, many=False)
        return names
    if words[:1] == ["TRUNCATE"]:
        return _names(found, _skip(words, 1, ("TABLE", "ONLY")), many=True)
    if head == ["RENAME", "TABLE"]:  # RENAME TABLE a TO b, c TO d: each side
        names = []
        at = 2
        while at < len(found):
            name, at = _name(found, at)
            if name is not None:
                names.append(name)
            if at < len(found) and words[at] in ("TO", ""):
                at += 1
        return names
    if words[:1] == ["CREATE"] and "INDEX" in words[:3] and "ON" in words:
        return _names(found, _skip(words, words.index("ON") + 1, ("ONLY",)), many=False)
    return []


def _skip(words: list[str], at: int, optional: tuple[str, ...]) -> int:
    while at < len(words) and words[at] in optional:
        at += 1
    return at


def _names(found: list[Token], at: int, many: bool) -> list[TableName]:
    names = []
    while at < len(found):
        name, at = _name(found, at)
        if name is None:
            break
        names.append(name)
        if not many or at >= len(found) or found[at].value != ",":
            break
        at += 1
    return names


def _name(found: list[Token], at: int) -> tuple[TableName | None, int]:
    """A name, perhaps qualified (`schema.table`, the last two parts), starting at `at`."""
    parts: list[Token] = []
    while at < len(found) and found[at].kind in ("name", "quoted"):
        parts.append(found[at])
        at += 1
        if at < len(found) and found[at].value == ".":
            at += 1
            continue
        break
    if not parts:
        return None, at
    last = parts[-1]
    schema = parts[-2].value if len(parts) > 1 else None
    return TableName(last.value, schema, last.kind == "quoted"), at


_TRANSACTION_WORDS = frozenset({"BEGIN", "START", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE"})
DDL_WORDS = frozenset({"ALTER", "CREATE", "DROP", "RENAME"})


def first_word(statement: str, lexis: Lexis = Lexis()) -> str:
    token = next(tokens(statement, lexis), None)
    return token.value.upper() if token is not None and token.kind == "name" else ""


def is_ddl(statement: str, lexis: Lexis = Lexis()) -> bool:
    """Whether a statement changes the schema (ALTER, CREATE, DROP, RENAME …), not rows."""
    return first_word(statement, lexis) in DDL_WORDS


def is_truncate(statement: str, lexis: Lexis = Lexis()) -> bool:
    return first_word(statement, lexis) == "TRUNCATE"


_ROW_WORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "MERGE"})


def changes_rows(statement: str, lexis: Lexis = Lexis()) -> bool:
    """Whether a statement inserts, updates or deletes rows (also from a `WITH` ahead of it), so
    that the triggers of the tables it names log its changes."""
    first = first_word(statement, lexis)
    if first == "WITH":
        return any(word.upper() in _ROW_WORDS for word in words_in(statement, lexis))
    return first in _ROW_WORDS


def controls_transaction(statement: str, lexis: Lexis = Lexis()) -> bool:
    """BEGIN, COMMIT, ROLLBACK and their kin: a migration's transaction is its own."""
    return first_word(statement, lexis) in _TRANSACTION_WORDS


def drops_a_column(statement: str, lexis: Lexis = Lexis()) -> bool:
    """`ALTER TABLE … DROP [COLUMN] …` (a database may refuse it while a trigger names the column)."""
    words = [t.value.upper() for t in tokens(statement, lexis) if t.kind == "name"]
    return words[:2] == ["ALTER", "TABLE"] and "DROP" in words
