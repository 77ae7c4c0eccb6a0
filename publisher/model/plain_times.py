"""Date-times logged in the plain forms a database writes them (`2024-05-01`, `2024-05-01
10:00:00`, and with `+00` where the session is in UTC), published as columns: the seconds since
1970 as text, as `encode_logged` publishes them one at a time (a property in the tests holds the
two equal). Every text is the same few bytes in fixed places, so the fields are read as digits
from the column's bytes at once, in numpy: no text is parsed, sliced or written out again.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

_LENGTHS = (10, 19, 22)
"""A date, a date and time, and a date and time with `+00`."""
_WIDEST = max(_LENGTHS)
_DATE_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9]
_TIME_DIGITS = [11, 12, 14, 15, 17, 18]
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
_OFFSETS = {pa.string(): np.int32, pa.large_string(): np.int64}


def logged_times(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each text in a plain form that names a moment of the calendar (a day of its month, an
    hour of 0-23, minutes and seconds of 0-59, a year from 1) as its seconds since 1970 (a
    moment without zone taken as UTC); null for every other text, which is encoded one value at
    a time."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.type not in _OFFSETS:
        texts = texts.cast(pa.large_string())
    count = len(texts)
    nothing = pa.nulls(count, pa.string())
    if not count or texts.buffers()[2] is None:
        return nothing
    offsets = np.frombuffer(texts.buffers()[1], _OFFSETS[texts.type])[texts.offset : texts.offset + count + 1]
    lengths = np.diff(offsets)
    plain = np.isin(lengths, _LENGTHS) & np.asarray(texts.is_valid(), np.bool_)
    rows = np.flatnonzero(plain)
    if not len(rows):
        return nothing
    data = np.frombuffer(texts.buffers()[2], np.uint8)
    first, last = int(offsets[0]), int(offsets[-1])
    width = int(lengths[rows[0]])
    if last - first == width * len(rows):  # every text of one form, side by side: a view of the data
        chars = data[first:last].reshape(len(rows), width)
    else:
        chars = data[np.minimum(offsets[rows, None].astype(np.int64) + np.arange(_WIDEST), len(data) - 1)]
    seconds, exact = _moments(chars, lengths[rows])
    kept = np.zeros(count, np.bool_)
    kept[rows[exact]] = True
    out = np.zeros(count, np.int64)
    out[rows] = seconds
    return pa.array(out, pa.int64(), mask=~kept).cast(pa.string())


def _moments(chars: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The seconds since 1970 of each row of `chars` (a text's first bytes, as many as the
    widest form), and whether its text is a plain form naming a moment of the calendar."""
    digits = chars.astype(np.int64) - ord("0")
    is_digit = (digits >= 0) & (digits <= 9)
    timed = lengths >= 19
    exact = is_digit[:, _DATE_DIGITS].all(axis=1) & (chars[:, 4] == ord("-")) & (chars[:, 7] == ord("-"))

    def field(at: int) -> np.ndarray:
        return digits[:, at] * 10 + digits[:, at + 1]

    year = field(0) * 100 + field(2)
    month, day = field(5), field(8)
    hour = minute = second = np.zeros(len(chars), np.int64)
    if chars.shape[1] >= 19:  # a date's row holds no more than its date, where every row is one
        exact &= ~timed | (is_digit[:, _TIME_DIGITS].all(axis=1) & (chars[:, 10] == ord(" "))
                           & (chars[:, 13] == ord(":")) & (chars[:, 16] == ord(":")))
        hour, minute, second = (np.where(timed, field(at), 0) for at in (11, 14, 17))
    if chars.shape[1] >= 22:
        exact &= (lengths != 22) | ((chars[:, 19] == ord("+")) & (chars[:, 20] == ord("0"))
                                    & (chars[:, 21] == ord("0")))
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    last = _DAYS_IN_MONTH[np.clip(month - 1, 0, 11)] + (leap & (month == 2))
    exact &= (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= last)
    exact &= (hour <= 23) & (minute <= 59) & (second <= 59)
    # the days since 1970-01-01 of a day of the proleptic Gregorian calendar, its years from March
    shifted = year - (month <= 2)
    era = shifted // 400
    of_era = shifted - era * 400
    of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    days = era * 146097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719468
    return days * 86400 + hour * 3600 + minute * 60 + second, exact
