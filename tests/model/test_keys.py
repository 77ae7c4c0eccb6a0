"""Tests for publisher.model.keys: the table_key grammar, formatting and canonical keys."""

from __future__ import annotations

import base64
import datetime as dt
import pickle
import re
import string
from collections.abc import Callable

import pyarrow as pa
import pytest
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.model import canonical as canonical_module
from publisher.model.canonical import (
    canonical_key,
    canonical_key_column,
    canonical_key_of,
    canonical_value,
    canonical_value_column,
    key_values,
    keys_values,
)
from publisher.model.keys import (
    KeyColumnError,
    KeyKind,
    KeyPart,
    KeySyntaxError,
    _parse,
    _parse_with_grammar,
    format_key,
    parse_key,
)

SPECIALS = ",;'+\"=\\<>"
QUOTED_EXAMPLE = r'''pkey=", ; ' + \" = \\ < >"'''
INT = KeyKind.INTEGER
TEXT = KeyKind.TEXT


# --- spec examples -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("idu=1", (KeyPart("idu", "1"),)),
        ("pk_empno=1", (KeyPart("pk_empno", "1"),)),
        ("pkey1=value1+pkey2=value2", (KeyPart("pkey1", "value1"), KeyPart("pkey2", "value2"))),
        (QUOTED_EXAMPLE, (KeyPart("pkey", ", ; ' + \" = \\ < >"),)),
    ],
)
def test_spec_examples(text: str, parts: tuple[KeyPart, ...]) -> None:
    assert parse_key(text) == parts
    assert format_key(parts) == text


def test_quoted_example_decodes_each_escape_once() -> None:
    (part,) = parse_key(QUOTED_EXAMPLE)
    assert part.value == ", ; ' + \" = \\ < >"
    assert part.value.count("\\") == 1
    assert part.value.count('"') == 1
    assert len(part.value) == 17


def test_whitespace_is_kept_in_values_and_stripped_from_column_names() -> None:
    assert parse_key("idu= 1") == (KeyPart("idu", " 1"),)
    assert parse_key(" a b =x y +c= ") == (KeyPart("a b", "x y "), KeyPart("c", " "))


def test_bare_values_may_hold_newlines_and_other_characters() -> None:
    assert parse_key("a=line1\nline2\t(é)") == (KeyPart("a", "line1\nline2\t(é)"),)


def test_quoted_values() -> None:
    assert parse_key('a=""') == (KeyPart("a", ""),)
    assert parse_key('a="\\\\"+b="\\""') == (KeyPart("a", "\\"), KeyPart("b", '"'))
    assert parse_key('a="plain"') == (KeyPart("a", "plain"),)


# --- format_key ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("1", "1"),
        (" 1 ", " 1 "),
        ("a\nb", "a\nb"),
        ("", '""'),
        ("a+b", '"a+b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("C:\\dir", '"C:\\\\dir"'),
        ("<>", '"<>"'),
    ],
)
def test_format_key_quotes_exactly_when_needed(value: str, written: str) -> None:
    assert format_key([KeyPart("k", value)]) == "k=" + written


@pytest.mark.parametrize("special", list(SPECIALS))
def test_format_key_quotes_every_special_character(special: str) -> None:
    text = format_key([KeyPart("k", f"a{special}b")])
    assert text.startswith('k="') and text.endswith('"')
    assert parse_key(text) == (KeyPart("k", f"a{special}b"),)


@pytest.mark.parametrize("column", ["", " k", "k ", "a=b", "a+b", 'a"b'])
def test_format_key_rejects_unwritable_column_names(column: str) -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        format_key([KeyPart(column, "1")])


def test_format_key_rejects_duplicates_and_empty_input() -> None:
    with pytest.raises(ValueError, match="twice"):
        format_key([KeyPart("a", "1"), KeyPart("a", "2")])
    with pytest.raises(ValueError, match="at least one part"):
        format_key([])


# --- syntax errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "reason"),
    [
        ("idu=", 4, "expected a value after '='"),
        ("idu=+b=1", 4, "expected a value after '='"),
        ('a="abc', 6, "unterminated quoted value"),
        ('a="a\\', 4, "unterminated quoted value"),
        ('a="a\\b"', 4, "invalid escape '\\\\b'"),
        ("a=b<c", 3, "unexpected character '<' (write the value in double quotes)"),
        ("a==1", 2, "unexpected character '='"),
        ('a=b"c"', 3, "unexpected character '\"'"),
        ('a="x"y', 5, "after the closing quote"),
        ("idu", 3, "expected '=' after the column name"),
        ("a+b=1", 1, "unexpected character '+', expected '='"),
        ("a=1+", 4, "expected a column name"),
        ("a=1++b=2", 4, "expected a column name"),
        ("", 0, "expected a column name"),
        ("=1", 0, "expected a column name"),
        (" =1", 1, "expected a column name"),
        ("<a=1", 0, "unexpected character '<', expected a column name"),
        ("a=1+a=2", 4, "column 'a' appears twice"),
        ("a=1+ a =2", 5, "column 'a' appears twice"),
    ],
)
def test_syntax_errors(text: str, position: int, reason: str) -> None:
    with pytest.raises(KeySyntaxError) as caught:
        parse_key(text)
    error = caught.value
    assert error.text == text
    assert error.position == position
    assert reason in str(error)
    assert str(error).startswith(f"table_key {text!r} at position {position}: ")


def test_message_format_from_the_brief() -> None:
    with pytest.raises(KeySyntaxError) as caught:
        parse_key("idu=")
    assert str(caught.value) == "table_key 'idu=' at position 4: expected a value after '='"


@pytest.mark.parametrize("value", [None, 1, b"idu=1", ["idu=1"]])
def test_non_str_input_is_a_syntax_error(value: object) -> None:
    with pytest.raises(KeySyntaxError, match=type(value).__name__) as caught:
        parse_key(value)  # type: ignore[arg-type]
    assert caught.value.position == 0


def test_syntax_error_survives_pickling() -> None:
    with pytest.raises(KeySyntaxError) as caught:
        parse_key('a="x')
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.text, copy.position, str(copy)) == ('a="x', 4, str(caught.value))


def test_key_part_survives_pickling() -> None:
    part = KeyPart("a", "b")
    assert pickle.loads(pickle.dumps(part)) == part


# --- canonical_key / key_values ----------------------------------------------------------------


def test_padding_is_canonicalised_for_integer_columns_only() -> None:
    assert canonical_key("idu= 1", [("idu", INT)]) == canonical_key("idu=1", [("idu", INT)])
    assert canonical_key("idu= 1", [("idu", INT)]) == "idu=1"
    assert canonical_key("idu= 1", [("idu", TEXT)]) == "idu= 1"
    assert canonical_key("idu= 1", [("idu", TEXT)]) != canonical_key("idu=1", [("idu", TEXT)])


@pytest.mark.parametrize(
    ("text", "canonical"),
    [('idu="+01"', "idu=1"), ('idu=" -007 "', "idu=-7"), ("idu=0", "idu=0"), ('idu="-0"', "idu=0")],
)
def test_integer_values_are_written_as_plain_decimals(text: str, canonical: str) -> None:
    assert canonical_key(text, [("idu", INT)]) == canonical


def test_columns_match_case_insensitively_and_follow_key_column_order() -> None:
    columns = [("idu", INT), ("Name", TEXT)]
    assert canonical_key("NAME=x+IDU=2", columns) == "idu=2+Name=x"
    assert canonical_key("idu=2+name=x", columns) == "idu=2+Name=x"


def test_text_values_stay_verbatim_and_get_requoted() -> None:
    assert canonical_key('name="a+b"', [("name", TEXT)]) == 'name="a+b"'
    assert canonical_key('name=""', [("name", TEXT)]) == 'name=""'
    assert canonical_key('name="plain"', [("name", TEXT)]) == "name=plain"


def test_key_values_are_typed_in_key_column_order() -> None:
    values = key_values('name=" x "+IDU= 42', [("idu", INT), ("name", TEXT)])
    assert values == (42, " x ")
    assert type(values[0]) is int


@pytest.mark.parametrize(
    ("text", "columns", "message"),
    [
        ("idu=1", [("idu", INT), ("b", TEXT)], "key column 'b' is missing, expected 'idu', 'b'"),
        ("idu=1+y=2", [("idu", INT)], "unknown key column 'y', expected 'idu'"),
        ("idu=1+IDU=2", [("idu", INT)], "key column 'idu' is given twice"),
        ("idu=abc", [("idu", INT)], "column 'idu' needs an integer, got 'abc'"),
        ('idu="1.5"', [("idu", INT)], "column 'idu' needs an integer, got '1.5'"),
        ('idu=" "', [("idu", INT)], "column 'idu' needs an integer"),
        ('idu=""', [("idu", INT)], "column 'idu' needs an integer"),
        ("idu=1_000", [("idu", INT)], "column 'idu' needs an integer"),
    ],
)
def test_key_column_errors(text: str, columns: list[tuple[str, KeyKind]], message: str) -> None:
    with pytest.raises(KeyColumnError, match="^table_key ") as caught:
        canonical_key(text, columns)
    assert message in str(caught.value)
    with pytest.raises(KeyColumnError):
        key_values(text, columns)


def test_canonical_key_reports_syntax_errors_as_such() -> None:
    with pytest.raises(KeySyntaxError):
        canonical_key("idu=", [("idu", INT)])


# --- properties ----------------------------------------------------------------------------

SAFE_NAME_CHARS = string.ascii_letters + string.digits + "_$#.- äßÜ"
column_names = st.text(alphabet=SAFE_NAME_CHARS, min_size=1, max_size=12).filter(
    lambda name: name == name.strip()
)
tricky_text = st.text(alphabet=SPECIALS + " \n\t\r ab1é", max_size=12)
values = st.one_of(st.text(max_size=20), tricky_text, st.just(""), st.just(" "))
part_lists = st.lists(
    st.builds(KeyPart, column_names, values), min_size=1, max_size=5, unique_by=lambda p: p.column
)


specials = st.sampled_from(SPECIALS)


def _escape(value: str) -> str:
    return "".join("\\" + c if c in '"\\' else c for c in value)


@st.composite
def canonical_texts(draw: st.DrawFn) -> tuple[str, tuple[KeyPart, ...]]:
    """A canonical table_key written by hand from its parts, independently of format_key."""
    names = draw(st.lists(column_names, min_size=1, max_size=5, unique=True))
    written, parts = [], []
    for name in names:
        if draw(st.booleans()):
            value = draw(st.text(st.characters(exclude_characters=SPECIALS), min_size=1))
            written.append(f"{name}={value}")
        else:
            value = draw(st.just("") | st.builds("{}{}{}".format, st.text(), specials, st.text()))
            written.append(f'{name}="{_escape(value)}"')
        parts.append(KeyPart(name, value))
    return "+".join(written), tuple(parts)


@given(part_lists)
def test_parse_undoes_format(parts: list[KeyPart]) -> None:
    assert parse_key(format_key(parts)) == tuple(parts)


@given(canonical_texts())
def test_format_undoes_parse_for_canonical_text(case: tuple[str, tuple[KeyPart, ...]]) -> None:
    text, parts = case
    assert parse_key(text) == parts
    assert format_key(parse_key(text)) == text


@given(st.text(alphabet=SPECIALS + " \nab", max_size=15))
def test_any_text_parses_or_raises_key_syntax_error(text: str) -> None:
    try:
        parts = parse_key(text)
    except KeySyntaxError as error:
        assert 0 <= error.position <= len(text)
    else:
        assert parse_key(format_key(parts)) == parts


plain_like_keys = st.lists(
    st.tuples(st.text(" \tab", max_size=3), st.text(" ab1", max_size=3)), min_size=1, max_size=3
).map(lambda parts: "+".join(f"{column}={value}" for column, value in parts))
"""Keys of the plain shape, with the cases around it: empty, blank or repeated columns, empty values."""


@given(
    plain_like_keys
    | st.text(alphabet=SPECIALS + " \tab=+1", max_size=20)
    | canonical_texts().map(lambda case: case[0])
)
def test_the_split_of_plain_keys_reads_every_text_as_the_grammar_does(text: str) -> None:
    """Plain keys skip Lark; whatever the text, the outcome is the grammar's: same parts, or the
    same error at the same position."""

    def outcome(parse: Callable[[str], tuple[KeyPart, ...]]) -> object:
        try:
            return parse(text)
        except KeySyntaxError as error:
            return (error.position, str(error))

    assert outcome(_parse.__wrapped__) == outcome(_parse_with_grammar)


@given(
    st.text(alphabet=string.ascii_letters + " 1\n", max_size=8),
    st.sampled_from([c for c in SPECIALS if c not in '+"']),
    st.data(),
)
def test_special_character_in_bare_value_is_reported_where_it_is(
    value: str, special: str, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(value)))
    text = "col=" + value[:cut] + special + value[cut:]
    with pytest.raises(KeySyntaxError) as caught:
        parse_key(text)
    assert caught.value.position == 4 + cut
    assert repr(special) in str(caught.value)


# --- key kinds: one spelling per value, whichever side wrote it --------------------------------

@pytest.mark.parametrize(
    ("kind", "spellings", "canonical"),
    [
        (KeyKind.FIXED_CHAR, ["ab", "ab   "], "ab"),
        (KeyKind.BOOLEAN, ["true", "t", "TRUE", " yes ", "1", "on"], "true"),
        (KeyKind.BOOLEAN, ["false", "f", "0", "off", "No"], "false"),
        (KeyKind.DATE, ["2026-03-01", " 2026-03-01 "], "2026-03-01"),
        (KeyKind.TIMESTAMP, ["2026-03-01 10:00:00.5", "2026-03-01T10:00:00.500000", "2026-03-01 10:00:00.50"],
         "2026-03-01 10:00:00.5"),
        (KeyKind.TIMESTAMP, ["2026-03-01 10:00:00", "2026-03-01T10:00"], "2026-03-01 10:00:00"),
        (KeyKind.TIMESTAMP_TZ,
         ["2026-03-01 10:00:00.5+05:30", "2026-03-01 04:30:00.5+00", "2026-03-01T04:30:00.500Z",
          "2026-02-28 23:30:00.5-05", "2026-03-01 04:30:00.5"],
         "2026-03-01 04:30:00.5+00"),
        (KeyKind.UUID, ["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc999c0b4ef8bb6d6bb9bd380a11",
                        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"], "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (KeyKind.NUMERIC, ["1.50", "1.5", "+1.500", "15E-1"], "1.5"),
        (KeyKind.NUMERIC, ["100", "1E+2", "100.00"], "100"),
        (KeyKind.NUMERIC, ["0", "-0.00", "0E+3"], "0"),
        (KeyKind.NUMERIC, ["NaN"], "NaN"),
        (KeyKind.NUMERIC, ["1.000000000000000000000000000010", "+1.00000000000000000000000000001"],
         "1.00000000000000000000000000001"),
        (KeyKind.NUMERIC, ["-12345678901234567890123456789012345.50"], "-12345678901234567890123456789012345.5"),
        (KeyKind.FLOAT, ["0.1", "1e-1", "0.10"], "0.1"),
        (KeyKind.FLOAT, ["1e+20", "100000000000000000000"], "1e+20"),
        (KeyKind.FLOAT, ["Infinity", "inf"], "inf"),
        (KeyKind.FLOAT, ["0", "-0", "0.0e5"], "0.0"),
        (KeyKind.BINARY, ["AP8=", "AP8=\n", " AP 8= "], "AP8="),
        (KeyKind.TEXT, ["a b  "], "a b  "),
    ],
)
def test_each_kind_spells_one_value_one_way(kind: KeyKind, spellings: list[str], canonical: str) -> None:
    assert {canonical_value(kind, s) for s in spellings} == {canonical}


@pytest.mark.parametrize(
    ("kind", "text", "needs"),
    [
        (KeyKind.BOOLEAN, "maybe", "a boolean (true/false)"),
        (KeyKind.DATE, "2026-02-30", "a date (YYYY-MM-DD)"),
        (KeyKind.TIMESTAMP, "2026-03-01 10:00:00+01", "a timestamp without time zone"),
        (KeyKind.TIMESTAMP, "infinity", "a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff])"),
        (KeyKind.TIMESTAMP_TZ, "soon", "a timestamp with time zone (YYYY-MM-DD HH:MM:SS[.ffffff]+HH[:MM])"),
        (KeyKind.TIMESTAMP_TZ, "0001-01-01 00:00:00+01", "a timestamp with time zone within years 1..9999"),
        (KeyKind.UUID, "notauuid", "a uuid"),
        (KeyKind.NUMERIC, "1,5", "a number"),
        (KeyKind.FLOAT, "x", "a floating-point number"),
        (KeyKind.BINARY, "not base64!", "binary as base64"),
    ],
)
def test_a_value_not_of_its_kind_is_refused_with_what_the_kind_needs(kind: KeyKind, text: str, needs: str) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(needs)}$"):
        canonical_value(kind, text)


_KIND_TEXTS = {
    KeyKind.INTEGER: st.integers(-(2**63), 2**63 - 1).map(str),
    KeyKind.TEXT: st.text(),
    KeyKind.FIXED_CHAR: st.text(),
    KeyKind.BOOLEAN: st.sampled_from(["true", "f", "1", "no"]),
    KeyKind.DATE: st.dates().map(str),
    KeyKind.TIMESTAMP: st.datetimes().map(str),
    KeyKind.TIMESTAMP_TZ: st.datetimes(min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 1, 1),
                                       timezones=st.timezones()).map(str),
    KeyKind.UUID: st.uuids().map(str),
    KeyKind.NUMERIC: st.decimals(allow_nan=False).map(str),
    KeyKind.FLOAT: st.floats(allow_nan=False).map(repr),
    KeyKind.BINARY: st.binary().map(lambda b: base64.b64encode(b).decode()),
}


@given(st.sampled_from(list(KeyKind)).flatmap(lambda kind: st.tuples(st.just(kind), _KIND_TEXTS[kind])))
def test_the_canonical_spelling_is_a_fixed_point_and_survives_a_table_key(case: tuple[KeyKind, str]) -> None:
    """Spelling a spelled value again changes nothing, and so does writing it into a table_key
    and reading it back: a key read back from a row and the key a trigger logged stay one."""
    kind, text = case
    once = str(canonical_value(kind, text))
    assert str(canonical_value(kind, once)) == once
    if kind is not KeyKind.TEXT or "\x00" not in once:
        key = format_key([KeyPart("k", once)])
        assert canonical_key(key, [("k", kind)]) == key


_FAST_VALUES = st.from_regex(r"\A(?:0|-?[1-9][0-9]{0,17}|[A-Za-z0-9_.@-]{1,8})\Z") | st.sampled_from(
    ["00", "-0", "+1", " 1", "1 ", "9223372036854775808", "1e3", "a b", 'a"b', "", "x=y", "é"]
)
_FAST_COLUMNS = st.lists(
    st.tuples(st.sampled_from(["id", "Id", "k_2", "a b"]),
              st.sampled_from([KeyKind.INTEGER, KeyKind.TEXT, KeyKind.UUID])),
    min_size=1, max_size=3, unique_by=lambda c: c[0].casefold(),
)


def _fast_parts(columns: list[tuple[str, KeyKind]]) -> st.SearchStrategy[list[tuple[str, str]]]:
    """Mostly each key column in order with a value of any kind; else any names in any order."""
    in_order = st.tuples(*(_FAST_VALUES for _ in columns)).map(
        lambda values: [(name, value) for (name, _), value in zip(columns, values, strict=True)]
    )
    names = st.sampled_from([c[0] for c in columns] + ["ID", "other"])
    return in_order | st.lists(st.tuples(names, _FAST_VALUES), min_size=1, max_size=3)


@settings(max_examples=budget(300))
@given(_FAST_COLUMNS.flatmap(lambda cols: st.tuples(st.just(cols), _fast_parts(cols))))
def test_a_key_taken_as_already_canonical_is_what_parsing_it_gives(
    case: tuple[list[tuple[str, KeyKind]], list[tuple[str, str]]],
) -> None:
    """canonical_key gives a key back unparsed when it looks canonical; parsing it (the cached
    core, which never takes that shortcut) must give exactly the same text, or the same error."""
    columns, parts = case
    text = "+".join(f"{name}={value}" for name, value in parts)
    _assert_shortcuts_agree_with_parsing(text, columns)
    if [name for name, _ in parts] == [name for name, _ in columns]:
        _assert_row_key_agrees_with_parsing([value for _, value in parts], columns)


def _outcome(function: Callable[[], object]) -> object:
    try:
        return function()
    except ValueError as exc:
        return type(exc)


def _assert_shortcuts_agree_with_parsing(text: str, columns: list[tuple[str, KeyKind]]) -> None:
    """canonical_key and key_values take a shortcut for a key that looks canonical; the cached
    cores, which never do, are the oracle."""
    cores = tuple(columns)
    assert _outcome(lambda: canonical_key(text, columns)) == _outcome(lambda: canonical_module._canonical(text, cores))
    assert _outcome(lambda: key_values(text, columns)) == _outcome(lambda: canonical_module._typed(text, cores))


def _assert_row_key_agrees_with_parsing(values: list[str], columns: list[tuple[str, KeyKind]]) -> None:
    """A row's key from its key columns' texts: as formatting their canonical values spells it."""
    def parsed() -> str:
        return format_key(KeyPart(name, str(canonical_value(kind, value)))
                          for (name, kind), value in zip(columns, values, strict=True))

    assert _outcome(lambda: canonical_key_of(values, columns)) == _outcome(parsed)
    keys, failures = canonical_key_column([pa.array([value], pa.string()) for value in values], columns)
    expected = _outcome(parsed)
    if isinstance(expected, str):
        assert (keys.to_pylist(), failures) == ([expected], {})
    else:
        assert keys.to_pylist() == [None] and list(failures) == [0]
    made = [canonical_value_column(pa.array([value], pa.string()), kind)
            for (_, kind), value in zip(columns, values, strict=True)]
    again, again_failures = canonical_key_column(made, columns)
    assert (again.to_pylist(), list(again_failures)) == (keys.to_pylist(), list(failures)), "texts made canonical first"


_NEAR_CANONICAL = ["0", "7", "-12", "00", "-0", "+1", " 1", "1 ", "9223372036854775808", "1e3", "abc", "a.b@c-d",
                   "a b", 'a"b', "<x>", "a\\b", "", "é", "x=y", "a,b", "a;b", "a+b"]


@pytest.mark.parametrize("kinds", [(KeyKind.INTEGER,), (KeyKind.TEXT, KeyKind.INTEGER), (KeyKind.UUID, KeyKind.TEXT)])
def test_keys_made_canonical_a_column_at_a_time_are_those_made_one_by_one(kinds: tuple[KeyKind, ...]) -> None:
    """Rows that are spelled canonically and rows that are not, side by side: each row's key,
    or its failure, is its own, in its place."""
    columns = [(f"k{i}", kind) for i, kind in enumerate(kinds)]
    rows = [[_NEAR_CANONICAL[(row + 7 * i) % len(_NEAR_CANONICAL)] for i in range(len(kinds))]
            for row in range(3 * len(_NEAR_CANONICAL))]
    keys, failures = canonical_key_column([pa.array(list(texts), pa.string()) for texts in zip(*rows, strict=True)],
                                          columns)
    for row, (values, key) in enumerate(zip(rows, keys.to_pylist(), strict=True)):
        one = _outcome(lambda values=values: canonical_key_of(values, columns))
        assert (key, row in failures) == ((one, False) if isinstance(one, str) else (None, True)), values


@pytest.mark.parametrize("kind", [KeyKind.INTEGER, KeyKind.TEXT, KeyKind.UUID])
@pytest.mark.parametrize("value", _NEAR_CANONICAL)
def test_near_canonical_keys_are_spelled_as_parsing_spells_them(kind: KeyKind, value: str) -> None:
    _assert_shortcuts_agree_with_parsing(f"id={value}", [("id", kind)])
    _assert_row_key_agrees_with_parsing([value], [("id", kind)])


@pytest.mark.parametrize("kind", list(KeyKind))
def test_a_column_of_key_texts_made_canonical_is_each_text_made_canonical_alone(kind: KeyKind) -> None:
    """What a triggerless state keeps of a key column: each text as `canonical_value` spells it,
    a NULL or a text not of the kind as it was (the key is refused later, with its reason)."""
    texts = [*_NEAR_CANONICAL, None, "1.5000", "-0.0010", "2026-01-02 03:04:05.000000", "2026-01-02T03:04:05+02:00",
             "AQID", "AQ\nID", "t", "false", "  x  ", "6F1C58A5-2F1E-4E55-9A8B-4D1C7E0F0A11"]
    made = canonical_value_column(pa.array(texts, pa.string()), kind).to_pylist()
    for text, one in zip(texts, made, strict=True):
        alone = None if text is None else _outcome(lambda text=text: str(canonical_value(kind, text)))
        assert one == (alone if alone is None or isinstance(alone, str) else text), (kind, text)


KEY_TEXTS = st.sampled_from(["idu=1", "idu=01", "idu=-0", "idu=-12", "IDU=1", "idu=1 ", "idu= 1", "idu=x", "idu=a.b@c",
                             "idu=1234567890123456789", "idu=123456789012345678", 'idu="a b"', "id=1"]) | st.text(
    max_size=12)


@settings(max_examples=budget(300))
@given(st.lists(KEY_TEXTS, max_size=20),
       st.sampled_from([[("idu", INT)], [("idu", TEXT)], [("idu", INT), ("s", TEXT)]]))
def test_keys_values_are_key_values_one_by_one(texts: list[str], columns: list[tuple[str, KeyKind]]) -> None:
    """The query-back's many keys at once give what each gives alone, or fail as the first that fails."""
    try:
        expected = [key_values(text, columns) for text in texts]
    except ValueError as exc:
        with pytest.raises(type(exc)):
            keys_values(texts, columns)
        return
    assert keys_values(texts, columns) == expected
