"""The filter between the driver JVM's stderr and ours."""
from __future__ import annotations

import io
import os

import pytest

from publisher.pipeline import spark


def test_the_jvm_stderr_is_read_to_its_end_after_ours_stops_taking_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Else a JVM whose stderr pipe fills up would block at its next write."""
    written: list[bytes] = []

    def write(fd: int, data: bytes) -> int:
        if written:
            raise BrokenPipeError("the reader went away")
        written.append(data)
        return len(data)

    monkeypatch.setattr(os, "write", write)
    lines = b"".join(b"line %d\n" % i for i in range(10_000))
    stream = io.BytesIO(b"WARNING: Using incubator modules: jdk.incubator.vector\n" + lines)
    spark._pass_on(stream)
    assert written == [b"line 0\n"]
    assert stream.read() == b""
