"""The output directory's cycle numbers: each cycle's number is above every number its files or
the kept counter have used, and the temporaries a killed writer left are gone, whatever else the
directory holds (a consumer's own files, documents of every earlier cycle)."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hunting import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from publisher.outputs.cycle_files import CYCLE_FILE, document_name, next_cycle_number

DOCUMENT = re.compile(r"^(\d{12})-\d{7}\.xml$")
TEMPORARY = re.compile(r"^\.(\d{12}-\d{7}\.xml|\.publisher-cycle)\.tmp$|^\.\d{12}-\d{5}-\d{7}\.staged$"
                       r"|^\.\d{12}-\d{5}\.(read|decided|rejected)-(rejects|statuses)\.staged$")

documents = st.builds(document_name, st.integers(1, 10**12 - 1), st.integers(0, 10**7 - 1))
temporaries = st.one_of(
    documents.map(lambda name: f".{name}.tmp"),
    st.just(f".{CYCLE_FILE}.tmp"),
    st.builds(lambda c, p, i: f".{c:012d}-{p:05d}-{i:07d}.staged", st.integers(0, 999), st.integers(0, 99),
              st.integers(0, 99)),
    st.builds(lambda c, p, k, w: f".{c:012d}-{p:05d}.{k}-{w}.staged", st.integers(0, 999), st.integers(0, 99),
              st.sampled_from(["read", "decided", "rejected"]), st.sampled_from(["rejects", "statuses"])),
)
others = st.one_of(
    st.sampled_from(["rejects.jsonl", "zzz.xml", "9999999999999-0000001.xml", "999999999999-0000001.xml.bak",
                     "999999999999-000001.xml", ".hidden", ".999999999999-0000001.xml", "changes"]),
    st.text("0123456789-.xmlz", min_size=1, max_size=26).filter(lambda name: name not in (".", "..")),
)


def expected_next(names: set[str], counter: str | None) -> int:
    """The oracle: every name matched by the pattern, the kept counter if it is a number."""
    last = int(counter) if counter is not None and counter.strip().isdigit() else 0
    cycles = [int(m.group(1)) for m in map(DOCUMENT.match, names) if m]
    return max([last, *cycles]) + 1


@settings(max_examples=budget(200))
@given(st.sets(documents, max_size=30), st.sets(temporaries, max_size=8), st.sets(others, max_size=8),
       st.one_of(st.none(), st.integers(0, 10**12).map(str), st.just("garbage")))
def test_the_next_cycle_is_above_every_document_and_the_counter_and_temporaries_are_gone(
        docs: set[str], temps: set[str], other: set[str], counter: str | None) -> None:
    names = (docs | temps | other) - {CYCLE_FILE}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name in names:
            (directory / name).write_bytes(b"x")
        if counter is not None:
            (directory / CYCLE_FILE).write_text(f"{counter}\n", encoding="ascii")
        number = next_cycle_number(directory)
        assert number == expected_next(names, counter)
        left = {p.name for p in directory.iterdir()}
        assert left == {n for n in names if not TEMPORARY.match(n)} | {CYCLE_FILE}
        assert (directory / CYCLE_FILE).read_text(encoding="ascii") == f"{number}\n"
        assert next_cycle_number(directory) == number + 1


def test_a_document_named_above_the_counter_moves_the_next_cycle_past_it(tmp_path: Path) -> None:
    (tmp_path / CYCLE_FILE).write_text("5\n", encoding="ascii")
    (tmp_path / document_name(41, 3)).write_bytes(b"<nds/>")
    (tmp_path / "999999999999-0000001.xml.bak").write_bytes(b"")
    assert next_cycle_number(tmp_path) == 42
