"""The bench's scratch directory is made below one marked as a top of directory hierarchies,
where the file system keeps that mark, and is an ordinary directory where it does not."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from publisher.workshop.bench.scratch import mark_top_directory, work_directory


def lsattr_flags(directory: Path) -> str | None:
    """The attribute letters `lsattr -d` prints, or None where it reads none."""
    if shutil.which("lsattr") is None:
        return None
    done = subprocess.run(["lsattr", "-d", str(directory)], capture_output=True, text=True, check=False)
    return done.stdout.split()[0] if done.returncode == 0 and done.stdout else None


def test_a_directory_is_marked_as_lsattr_reads_it(tmp_path: Path) -> None:
    marked = tmp_path / "marked"
    marked.mkdir()
    before = lsattr_flags(marked)
    if before is None:
        pytest.skip(f"{tmp_path}'s file system keeps no attributes lsattr reads")
    assert "T" not in before
    assert mark_top_directory(marked)
    after = lsattr_flags(marked)
    assert after is not None and "T" in after
    assert after.replace("T", "-") == before, "the directory's other attributes are kept"


def test_a_file_system_without_the_mark_leaves_an_ordinary_directory() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no tmpfs at /dev/shm")
    directory = Path(tempfile.mkdtemp(dir=shm))
    try:
        assert mark_top_directory(directory) is False
        assert directory.is_dir()
    finally:
        directory.rmdir()


def test_the_temporary_work_directory_lies_in_a_marked_one_and_is_removed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with work_directory(None) as workdir:
        assert workdir.is_dir() and list(workdir.iterdir()) == []
        assert workdir.parent.parent == tmp_path
        flags = lsattr_flags(workdir.parent)
        assert flags is None or "T" in flags
        (workdir / "document.xml").write_bytes(b"<nds/>")
    assert not workdir.parent.exists()


def test_a_given_work_directory_is_made_and_kept(tmp_path: Path) -> None:
    given = tmp_path / "a" / "b"
    with work_directory(given) as workdir:
        assert workdir == given and given.is_dir()
    assert given.is_dir()
