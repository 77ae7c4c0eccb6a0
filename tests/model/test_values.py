from __future__ import annotations

import base64
import calendar
import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pyarrow as pa
import pytest
import sqlalchemy as sa
from conftest import TestDatabase
from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.model.values import (
    COLUMN_VALUE_TYPES,
    BadValueError,
    ValueType,
    encode_current,
    encode_logged,
    logged_unchanged,
    value_type_of,
)

OCTET, INT, STATE, TIME, STRING = (
    ValueType.OCTET,
    ValueType.INT,
    ValueType.STATE,
    ValueType.TIME,
    ValueType.STRING,
)

UTC = dt.timezone.utc


def epoch(*fields: int) -> str:
    """Expected epoch seconds for a UTC date-time, by the standard library's own route."""
    return str(calendar.timegm((*fields, *(0,) * (6 - len(fields)), 0, 0, 0)))


JAN_2 = epoch(2024, 1, 2, 3, 4, 5)


class TestLogged:
    def test_none_is_none_for_every_type(self) -> None:
        for value_type in COLUMN_VALUE_TYPES:
            assert encode_logged(value_type, None) is None

    def test_octet_is_returned_unchanged(self) -> None:
        assert encode_logged(OCTET, "qqo=") == "qqo="
        assert encode_logged(OCTET, "u7s=") == "u7s="
        assert encode_logged(OCTET, "") == ""

    def test_octet_line_breaks_of_database_encoders_are_dropped(self) -> None:
        wrapped = "qqqq" * 19 + "\n" + "qqqq" + "\r\n"
        assert encode_logged(OCTET, wrapped) == "qqqq" * 20

    @pytest.mark.parametrize("bad", ["qq?=", "qqo", "qq=o", "=qqo", "qqo==", "qqo=qqo=", "éé"])
    def test_octet_rejects_non_strict_base64(self, bad: str) -> None:
        with pytest.raises(BadValueError, match=r"is not valid base64$"):
            encode_logged(OCTET, bad)

    def test_octet_message(self) -> None:
        with pytest.raises(BadValueError) as error:
            encode_logged(OCTET, "qq?=")
        assert str(error.value) == "'qq?=' is not valid base64"

    @pytest.mark.parametrize(
        ("text", "expected"),
        [("1", "1"), (" 42 ", "42"), ("-7", "-7"), ("+7", "7"), ("007", "7"), ("0", "0")],
    )
    def test_int(self, text: str, expected: str) -> None:
        assert encode_logged(INT, text) == expected

    def test_int_beyond_64_bits(self) -> None:
        assert encode_logged(INT, str(2**70)) == str(2**70)

    @pytest.mark.parametrize("bad", ["abc", "", "1.0", "1_000", "1e3", "٣", "0x10", "- 1"])
    def test_int_rejects(self, bad: str) -> None:
        with pytest.raises(BadValueError, match=r"is not an integer$"):
            encode_logged(INT, bad)

    def test_int_message(self) -> None:
        with pytest.raises(BadValueError) as error:
            encode_logged(INT, "abc")
        assert str(error.value) == "'abc' is not an integer"

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            *[(t, "true") for t in ("true", "TRUE", "True", "t", "T", "1", "yes", "YES", " true ")],
            *[(t, "false") for t in ("false", "FALSE", "f", "F", "0", "no", "No", "false\n")],
        ],
    )
    def test_state(self, text: str, expected: str) -> None:
        assert encode_logged(STATE, text) == expected

    @pytest.mark.parametrize("bad", ["maybe", "", "2", "tru", "-1"])
    def test_state_rejects(self, bad: str) -> None:
        with pytest.raises(BadValueError, match=r"is not a boolean \(true/false/1/0\)$"):
            encode_logged(STATE, bad)

    def test_state_message(self) -> None:
        with pytest.raises(BadValueError) as error:
            encode_logged(STATE, "maybe")
        assert str(error.value) == "'maybe' is not a boolean (true/false/1/0)"

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2024-01-02 03:04:05", JAN_2),
            ("2024-01-02T03:04:05", JAN_2),
            ("2024-01-02 03:04:05.123456", JAN_2),
            ("2024-01-02 03:04:05.999999999", JAN_2),
            ("2024-01-02T03:04:05Z", JAN_2),
            ("2024-01-02T03:04:05z", JAN_2),
            ("2024-01-02 03:04:05+00", JAN_2),
            ("2024-01-02 03:04:05+00:00", JAN_2),
            ("2024-01-02 03:04:05-0000", JAN_2),
            ("2024-01-02 03:04:05.5+02", epoch(2024, 1, 2, 1, 4, 5)),
            ("2024-01-02 03:04:05+05:30", epoch(2024, 1, 1, 21, 34, 5)),
            ("2024-01-02 03:04:05-08:00", epoch(2024, 1, 2, 11, 4, 5)),
            ("1900-01-01 00:00:00+05:53:28", epoch(1899, 12, 31, 18, 6, 32)),
            ("2024-01-02 03:04", epoch(2024, 1, 2, 3, 4)),
            ("2024-01-02", epoch(2024, 1, 2)),
            (" 2024-01-02 03:04:05 ", JAN_2),
            ("1970-01-01 00:00:00", "0"),
            ("1969-12-31 23:59:59.5", "-1"),
            ("1704164645", "1704164645"),
            ("-86400", "-86400"),
        ],
    )
    def test_time(self, text: str, expected: str) -> None:
        assert encode_logged(TIME, text) == expected

    @pytest.mark.parametrize(
        "bad",
        [
            "2024-13-01",
            "2024-02-30",
            "2024-01-02 25:00:00",
            "2024-01-02 03:04:60",
            "2024-01-02 03:04:05+24",
            "2024-01-02 03:04:05+01:60",
            "2024-01-02Z",
            "02.01.2024",
            "infinity",
            "1.5",
            "",
            "2024-1-2",
        ],
    )
    def test_time_rejects(self, bad: str) -> None:
        with pytest.raises(BadValueError, match=r"is not a date-time$"):
            encode_logged(TIME, bad)

    def test_time_message(self) -> None:
        with pytest.raises(BadValueError) as error:
            encode_logged(TIME, "2024-13-01")
        assert str(error.value) == "'2024-13-01' is not a date-time"

    def test_string_is_returned_as_is(self) -> None:
        for text in ["Jack", "", "  padded  ", "<&>\"'", "tab\tnl\ncr\r", "é\U0001f600\ufffd"]:
            assert encode_logged(STRING, text) == text

    @pytest.mark.parametrize(
        ("text", "char", "offset"),
        [
            ("abc\x01", "0001", 3),
            ("\x00", "0000", 0),
            ("a\x1fb", "001F", 1),
            ("x\ufffe", "FFFE", 1),
            ("x\uffff", "FFFF", 1),
            ("ab\ud800", "D800", 2),
        ],
    )
    def test_string_rejects_xml_invalid_characters(
        self, text: str, char: str, offset: int
    ) -> None:
        with pytest.raises(BadValueError) as error:
            encode_logged(STRING, text)
        assert str(error.value) == (
            f"contains U+{char} at offset {offset}, which XML 1.0 cannot carry"
        )

    def test_long_value_is_cut_short_in_message(self) -> None:
        with pytest.raises(BadValueError) as error:
            encode_logged(INT, "x" * 10_000)
        assert len(str(error.value)) < 200

    def test_plain_string_type_name_is_accepted(self) -> None:
        assert encode_logged("int", " 5 ") == "5"  # type: ignore[arg-type]


class TestCurrent:
    def test_none_is_none_for_every_type(self) -> None:
        for value_type in COLUMN_VALUE_TYPES:
            assert encode_current(value_type, None) is None

    def test_binary(self) -> None:
        assert encode_current(OCTET, b"\xaa\xaa") == "qqo="
        assert encode_current(OCTET, bytearray(b"\xbb\xbb")) == "u7s="
        assert encode_current(OCTET, memoryview(b"\xbb\xbb")) == "u7s="
        assert encode_current(OCTET, b"") == ""
        assert encode_current(OCTET, b"\xfb\xff") == "+/8="

    def test_binary_column_holding_text(self) -> None:
        assert encode_current(OCTET, "é") == base64.b64encode("é".encode()).decode()

    def test_binary_rejects_other_values(self) -> None:
        with pytest.raises(BadValueError, match="is not binary"):
            encode_current(OCTET, 5)

    def test_int(self) -> None:
        assert encode_current(INT, 42) == "42"
        assert encode_current(INT, -(2**70)) == str(-(2**70))
        assert encode_current(INT, Decimal("12")) == "12"
        assert encode_current(INT, 3.0) == "3"
        assert encode_current(INT, " 7 ") == "7"

    @pytest.mark.parametrize("bad", ["abc", 1.5, Decimal("1.5"), float("nan"), object()])
    def test_int_rejects(self, bad: object) -> None:
        with pytest.raises(BadValueError, match="is not an integer$"):
            encode_current(INT, bad)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (True, "true"),
            (False, "false"),
            (1, "true"),
            (0, "false"),
            ("t", "true"),
            ("0", "false"),
        ],
    )
    def test_state(self, value: object, expected: str) -> None:
        assert encode_current(STATE, value) == expected

    @pytest.mark.parametrize("bad", [2, -1, "maybe", 0.5])
    def test_state_rejects(self, bad: object) -> None:
        with pytest.raises(BadValueError, match=r"is not a boolean \(true/false/1/0\)$"):
            encode_current(STATE, bad)

    def test_naive_and_aware_datetimes_agree(self) -> None:
        naive = dt.datetime(2024, 1, 2, 3, 4, 5)
        aware_utc = naive.replace(tzinfo=UTC)
        aware_plus2 = dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
        assert encode_current(TIME, naive) == JAN_2
        assert encode_current(TIME, aware_utc) == JAN_2
        assert encode_current(TIME, aware_plus2) == JAN_2

    def test_datetime_fraction_is_floored(self) -> None:
        assert encode_current(TIME, dt.datetime(2024, 1, 2, 3, 4, 5, 999999)) == JAN_2
        assert encode_current(TIME, dt.datetime(1969, 12, 31, 23, 59, 59, 500000)) == "-1"

    def test_date(self) -> None:
        assert encode_current(TIME, dt.date(2024, 1, 2)) == epoch(2024, 1, 2)
        assert encode_current(TIME, dt.date(1960, 6, 1)) == epoch(1960, 6, 1)

    @pytest.mark.parametrize(
        "text",
        ["2024-01-02 03:04:05", "2024-01-02 03:04:05.123456", "2024-01-02 03:04:05+00"],
    )
    def test_time_text_from_sqlite(self, text: str) -> None:
        assert encode_current(TIME, text) == JAN_2

    def test_time_number(self) -> None:
        assert encode_current(TIME, 1704164645) == "1704164645"
        assert encode_current(TIME, 1704164645.9) == "1704164645"

    @pytest.mark.parametrize("bad", ["2024-13-01", object(), float("inf")])
    def test_time_rejects(self, bad: object) -> None:
        with pytest.raises(BadValueError, match="is not a date-time$"):
            encode_current(TIME, bad)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("Jack", "Jack"),
            (Decimal("10.50"), "10.50"),
            (1.25, "1.25"),
            (7, "7"),
            (True, "true"),
            (dt.time(3, 4, 5), "03:04:05"),
            ({"a": [1, "é"]}, '{"a":[1,"é"]}'),
            (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        ],
    )
    def test_string(self, value: object, expected: str) -> None:
        assert encode_current(STRING, value) == expected

    def test_string_rejects_xml_invalid_characters(self) -> None:
        with pytest.raises(BadValueError, match="^contains U\\+0001 at offset 3, which XML 1.0"):
            encode_current(STRING, "abc\x01")


@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)))
def test_datetime_and_its_iso_text_agree(moment: dt.datetime) -> None:
    expected = str(calendar.timegm(moment.timetuple()))
    assert encode_current(TIME, moment) == expected
    assert encode_logged(TIME, moment.isoformat(sep=" ")) == expected
    assert encode_logged(TIME, moment.replace(tzinfo=UTC).isoformat()) == expected


@given(st.binary())
def test_current_binary_is_valid_logged_binary(data: bytes) -> None:
    text = encode_current(OCTET, data)
    assert text is not None
    assert encode_logged(OCTET, text) == text
    assert base64.b64decode(text) == data


@given(st.text())
def test_string_either_passes_unchanged_or_is_refused(text: str) -> None:
    try:
        assert encode_logged(STRING, text) == text
    except BadValueError as error:
        assert "which XML 1.0 cannot carry" in str(error)


COLUMNS = {
    "c_integer": ("INTEGER", INT),
    "c_bigint": ("BIGINT", INT),
    "c_smallint": ("SMALLINT", INT),
    "c_boolean": ("BOOLEAN", STATE),
    "c_timestamp": ("TIMESTAMP", TIME),
    "c_date": ("DATE", TIME),
    "c_varchar": ("VARCHAR(64)", STRING),
    "c_text": ("TEXT", STRING),
    "c_numeric": ("NUMERIC(10, 2)", STRING),
}
SQLITE_COLUMNS = {
    **COLUMNS,
    "c_blob": ("BLOB", OCTET),
    "c_datetime": ("DATETIME", TIME),
    "c_unknown": ("FANCY", STRING),
    "c_untyped": ("", STRING),
}
POSTGRES_COLUMNS = {
    **COLUMNS,
    "c_bytea": ("BYTEA", OCTET),
    "c_timestamptz": ("TIMESTAMPTZ", TIME),
    "c_double": ("DOUBLE PRECISION", STRING),
    "c_time": ("TIME", STRING),
    "c_uuid": ("UUID", STRING),
}


def create_table(
    connection: sa.Connection, table: str, columns: dict[str, tuple[str, ValueType]]
) -> None:
    ddl = ", ".join(f"{name} {sql}" for name, (sql, _) in columns.items())
    connection.execute(sa.text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, {ddl})"))


@pytest.fixture
def sqlite_engine() -> Iterator[sa.Engine]:
    engine = sa.create_engine("sqlite://")
    with engine.begin() as connection:
        create_table(connection, "t", SQLITE_COLUMNS)
    yield engine
    engine.dispose()


@pytest.fixture
def postgres_schema(postgresql_database: TestDatabase) -> tuple[sa.Engine, str]:
    with postgresql_database.engine.begin() as connection:
        create_table(connection, f'"{postgresql_database.schema}".t', POSTGRES_COLUMNS)
    return postgresql_database.engine, str(postgresql_database.schema)


def reflected_types(engine: sa.Engine, schema: str | None) -> dict[str, ValueType]:
    columns = sa.inspect(engine).get_columns("t", schema=schema)
    return {c["name"]: value_type_of(c["type"]) for c in columns if c["name"] != "id"}


def test_value_type_of_reflected_sqlite(sqlite_engine: sa.Engine) -> None:
    expected = {name: value_type for name, (_, value_type) in SQLITE_COLUMNS.items()}
    assert reflected_types(sqlite_engine, None) == expected


def test_value_type_of_reflected_postgres(postgres_schema: tuple[sa.Engine, str]) -> None:
    engine, schema = postgres_schema
    expected = {name: value_type for name, (_, value_type) in POSTGRES_COLUMNS.items()}
    assert reflected_types(engine, schema) == expected


def test_value_type_of_generic_and_decorated_types() -> None:
    class Wrapped(sa.TypeDecorator[bytes]):
        impl = sa.LargeBinary
        cache_ok = True

    assert value_type_of(sa.LargeBinary()) is OCTET
    assert value_type_of(sa.VARBINARY(8)) is OCTET
    assert value_type_of(Wrapped()) is OCTET
    assert value_type_of(sa.BigInteger()) is INT
    assert value_type_of(sa.Boolean()) is STATE
    assert value_type_of(sa.DateTime(timezone=True)) is TIME
    assert value_type_of(sa.Numeric()) is STRING
    assert value_type_of(sa.types.NullType()) is STRING
    assert value_type_of(sa.Enum("a", "b")) is STRING


def read_back(engine: sa.Engine, schema: str | None) -> dict[str, str | None]:
    """Encode a row as query-back would: reflected types, values through SQLAlchemy."""
    table = sa.Table("t", sa.MetaData(), schema=schema, autoload_with=engine)
    with engine.connect() as connection:
        row = connection.execute(sa.select(table)).one()._mapping
    return {
        column.name: encode_current(value_type_of(column.type), row[column.name])
        for column in table.columns
    }


ROW_SQL = (
    "INSERT INTO {t} (id, c_integer, c_bigint, c_smallint, c_boolean, c_timestamp, c_date,"
    " c_varchar, c_text, c_numeric, {extra}) VALUES (1, 1, 9000000000, -2, {true},"
    " '2024-01-02 03:04:05.123456', '2024-01-02', 'Jack', NULL, 10.5, {extra_values})"
)
ROW_EXPECTED = {
    "id": "1",
    "c_integer": "1",
    "c_bigint": "9000000000",
    "c_smallint": "-2",
    "c_boolean": "true",
    "c_timestamp": JAN_2,
    "c_date": epoch(2024, 1, 2),
    "c_varchar": "Jack",
    "c_text": None,
    "c_numeric": "10.50",
}


def test_query_back_values_from_sqlite(sqlite_engine: sa.Engine) -> None:
    with sqlite_engine.begin() as connection:
        connection.execute(
            sa.text(
                ROW_SQL.format(
                    t="t", true="1", extra="c_blob, c_datetime", extra_values="x'aaaa', :dt"
                )
            ),
            {"dt": "2024-01-02 03:04:05"},
        )
    values = read_back(sqlite_engine, None)
    assert values == {
        **ROW_EXPECTED,
        "c_numeric": values["c_numeric"],
        "c_blob": "qqo=",
        "c_datetime": JAN_2,
        "c_unknown": None,
        "c_untyped": None,
    }
    assert values["c_numeric"] in {"10.5", "10.50"}


def test_query_back_values_from_postgres(postgres_schema: tuple[sa.Engine, str]) -> None:
    engine, schema = postgres_schema
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                ROW_SQL.format(
                    t=f'"{schema}".t',
                    true="TRUE",
                    extra="c_bytea, c_timestamptz",
                    extra_values="'\\xbbbb'::bytea, '2024-01-02 05:04:05.5+02'",
                )
            )
        )
    assert read_back(engine, schema) == {
        **ROW_EXPECTED,
        "c_bytea": "u7s=",
        "c_timestamptz": JAN_2,
        "c_double": None,
        "c_time": None,
        "c_uuid": None,
    }


_LOGGED_SAMPLE_TEXTS = (
    "0", "7", "-12", "00", "-0", "+1", " 1", "1 ", "123456789012345678", "1234567890123456789", "1e3",
    "true", "false", "yes", "True", "t", "1", "aGk=", "QR==", "aGk", "aG k=", "aGk=\n", "====", "",
    "1990-05-17 08:30:00", "plain", "a\x01b", "tab\there", "\ufffe", "é",
)
_LOGGED_SAMPLES = st.sampled_from(_LOGGED_SAMPLE_TEXTS)


@settings(max_examples=budget(400))
@given(st.lists(st.tuples(st.sampled_from(COLUMN_VALUE_TYPES), st.none() | _LOGGED_SAMPLES | st.text(max_size=6)),
                max_size=20))
def test_logged_values_vouched_for_as_columns_are_what_encoding_them_gives(
    values: list[tuple[ValueType, str | None]],
) -> None:
    """Where the column check says a logged text publishes unchanged, encoding it one by one
    gives exactly that text."""
    types = pa.array([t.value for t, _ in values], pa.string())
    texts = pa.array([text for _, text in values], pa.string())
    for (value_type, text), unchanged in zip(values, logged_unchanged(types, texts).to_pylist(), strict=True):
        if unchanged:
            assert encode_logged(value_type, text) == text


@pytest.mark.parametrize("value_type", COLUMN_VALUE_TYPES)
def test_near_canonical_logged_values_vouched_for_are_what_encoding_gives(value_type: ValueType) -> None:
    samples = list(_LOGGED_SAMPLE_TEXTS)
    vouched = logged_unchanged(pa.array([value_type.value] * len(samples)), pa.array(samples, pa.string()))
    for text, unchanged in zip(samples, vouched.to_pylist(), strict=True):
        if unchanged:
            assert encode_logged(value_type, text) == text, text


def test_plain_canonical_logged_values_are_vouched_for_as_columns() -> None:
    cases = [(ValueType.INT, "-12"), (ValueType.TIME, "7"), (ValueType.STATE, "false"), (ValueType.OCTET, "aGk="),
             (ValueType.STRING, "plain é"), (ValueType.STRING, None)]
    types = pa.array([t.value for t, _ in cases], pa.string())
    assert logged_unchanged(types, pa.array([text for _, text in cases], pa.string())).to_pylist() == [True] * 6


_DATE_TIME_TEXTS = st.builds(
    lambda y, mo, d, time, utc: f"{y:04d}-{mo:02d}-{d:02d}" + (
        "" if time is None else " {:02d}:{:02d}:{:02d}".format(*time) + ("+00" if utc else "")),
    st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32),
    st.none() | st.tuples(st.integers(0, 25), st.integers(0, 61), st.integers(0, 61)), st.booleans())


@settings(max_examples=budget(500))
@given(st.lists(st.none() | _DATE_TIME_TEXTS | _LOGGED_SAMPLES | st.text(max_size=20), max_size=20))
def test_date_times_encoded_as_columns_are_what_encoding_them_one_by_one_gives(texts: list[str | None]) -> None:
    """`logged_times` publishes a date-time as `encode_logged` does, or leaves it to it (null)."""
    from publisher.model.plain_times import logged_times

    for text, fast in zip(texts, logged_times(pa.array(texts, pa.string())).to_pylist(), strict=True):
        if fast is not None:
            assert encode_logged(ValueType.TIME, text) == fast, text


def test_plain_date_times_are_encoded_as_columns() -> None:
    from publisher.model.plain_times import logged_times

    texts = ["2024-05-01", "2024-05-01 10:00:00", "2024-05-01 10:00:00+00", "1969-12-31 23:59:59"]
    assert logged_times(pa.array(texts)).to_pylist() == ["1714521600", "1714557600", "1714557600", "-1"]
    overflowing = ["2024-02-30", "2024-05-01 24:00:00", "2024-05-01 10:00:00.5", "2024-05-01 10:60:00",
                   "2024-05-01 23:59:60", "2024-13-05", "2024-00-10", "2024-05-00", "2024-12-31 24:00:00"]
    assert logged_times(pa.array(overflowing)).null_count == len(overflowing)
