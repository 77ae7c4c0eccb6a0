"""Whether a `snapshot --where` condition stays inside the parentheses each chunk's query wraps
it in, as every supported database reads it. Pure: the snapshot asks before anything is read."""
from __future__ import annotations


def condition_problem(condition: str) -> str | None:
    """Why `condition` could reach past the parentheses each chunk's query wraps it in (and so
    escape the chunk's key bounds, every chunk starting again from the first row), or None.

    Its text is read as every supported database would read it, and what one of them reads
    otherwise is refused: a parenthesis outside quoted text ('…', "…", `…`) that closes one the
    condition did not open, or that it leaves open; a quote never closed; a comment (--, /* */,
    and # where `Lexis.hash_comments`), whose parentheses would not count; a quote after a
    backslash, which ends the quoted text but for `Lexis.backslash_escapes`; a dollar quote
    ($$…$$, `Lexis.dollar_quotes`); and a quote or parenthesis inside [ ], a name where
    `Lexis.bracket_names` (each family's capture says which are its own)."""
    opened: list[int] = []
    quote: str | None = None
    quote_at = bracket_at = doubled = -1
    for at, char in enumerate(condition):
        place = f"{char} at character {at + 1}"
        if quote is not None:
            if char != quote or at == doubled:
                continue
            if quote in "'\"" and _backslashes_before(condition, at, quote_at) % 2:
                return (f"ambiguous quote: the quote {place} follows a backslash, which escapes it in some "
                        "databases' strings and not in others', so where the quoted text "
                        f"ends depends on the database; write {char}{char} for a quote inside quoted text")
            if condition.startswith(quote, at + 1):
                doubled = at + 1  # '' inside '…' is a quote within it: the quoted text goes on
            else:
                quote = None
            continue
        comment = _comment_at(condition, at)
        if comment is not None:
            return (f"comments are refused: {comment[0]} at character {at + 1} begins {comment[1]}; a condition has "
                    "no need of one, and the parentheses inside a comment are not counted, so the condition could "
                    "escape the chunks' key bounds")
        if char == "$" and not _inside_name(condition, at):
            return (f"dollar quotes are refused: the {place} would begin a dollar-quoted string on some databases, "
                    "whose parentheses are not counted; write text in '…', and a name that begins with $ in \"…\"")
        if bracket_at >= 0 and char in "'\"`()":
            return (f"the {place} is inside the [ at character {bracket_at + 1}, which quotes a name on some "
                    "databases and begins a subscript on others, so the databases disagree on where its quotes and "
                    "parentheses are; write the name in \"…\" instead")
        if char in "'\"`":
            quote, quote_at = char, at
        elif char == "[":
            bracket_at = at
        elif char == "]":
            bracket_at = -1
        elif char == "(":
            opened.append(at)
        elif char == ")":
            if not opened:
                return (f"unbalanced parentheses: the {place} closes one the condition did not open, so the "
                        "condition would escape the chunks' key bounds")
            opened.pop()
    if quote is not None:
        return f"unterminated quote: the quote {quote} at character {quote_at + 1} is never closed"
    if opened:
        return f"unbalanced parentheses: the ( at character {opened[0] + 1} is never closed"
    return None


def _backslashes_before(text: str, at: int, after: int) -> int:
    """How many backslashes come right before `text[at]`, after `text[after]`."""
    count = 0
    while at - count - 1 > after and text[at - count - 1] == "\\":
        count += 1
    return count


def _comment_at(text: str, at: int) -> tuple[str, str] | None:
    """The comment that begins at `text[at]` (outside quoted text), as (its opening, what it is), if one does."""
    if text.startswith("--", at):
        return "--", "a line comment"
    if text.startswith("/*", at):
        return "/*", "a block comment"
    if text[at] == "#":
        return "#", "a line comment on some databases"
    return None


def _inside_name(text: str, at: int) -> bool:
    """Whether the $ at `text[at]` continues an unquoted name (a$b), rather than beginning a
    token of its own, as dollar quotes (`Lexis.dollar_quotes`) and parameters ($1) do."""
    start = at
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_$" or ord(text[start - 1]) > 127):
        start -= 1
    return start < at and not text[start].isdigit()
