"""The database password reaches the database and nothing else: no output, log, message or document.

The test server trusts 127.0.0.1, so it does not check the password; what matters here is where
the password shows up, not whether it is right.
"""
from __future__ import annotations

import json
import logging
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from sqlalchemy.engine import make_url

from publisher.cli import main
from publisher.config import Config, DatabaseConfig
from publisher.config.loading import load_config


@pytest.fixture
def role(postgresql_database) -> Iterator[tuple[str, str]]:
    """A login role with a password that owns the test schema's `usr` table: (name, password)."""
    db = postgresql_database
    name = f"pub_{uuid.uuid4().hex[:10]}"
    password = f"s3c@r/{secrets.token_hex(8)}"
    db.execute(
        f"CREATE ROLE {name} LOGIN PASSWORD '{password}'",
        f"GRANT USAGE, CREATE ON SCHEMA {db.schema} TO {name}",
        f"CREATE TABLE {db.schema}.usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64))",
        f"ALTER TABLE {db.schema}.usr OWNER TO {name}",
    )
    yield name, password
    db.execute(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'",
        f"DROP OWNED BY {name}",
        f"DROP ROLE {name}",
    )


class Seen:
    """Everything the publisher showed: stdout, stderr, log records and the files it wrote."""

    def __init__(self, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, output: Path) -> None:
        self.capsys, self.caplog, self.output = capsys, caplog, output
        self.out: list[str] = []
        self.err: list[str] = []

    def run(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = self.capsys.readouterr()
        self.out.append(captured.out)
        self.err.append(captured.err)
        return code, captured.out, captured.err

    def assert_hidden(self, password: str, *more: str) -> None:
        forms = {password, quote(password, safe=""), quote_plus(password)}
        files = {p.name: p.read_text(encoding="utf-8") for p in self.output.iterdir()} if self.output.exists() else {}
        places = {
            "stdout": "".join(self.out),
            "stderr": "".join(self.err),
            "log records": "\n".join(r.getMessage() for r in self.caplog.records) + self.caplog.text,
            **files,
            **{f"text {i}": text for i, text in enumerate(more)},
        }
        for where, text in places.items():
            for form in forms:
                assert form not in text, f"the password shows in {where}"


def config_file(path: Path, url: str, schema: str | None, output: Path) -> Path:
    schema_line = f'schema = "{schema}"\n' if schema else ""
    path.write_text(
        f'[database]\nurl = "{url}"\n{schema_line}[output]\ndirectory = "{output}"\n[spark]\nmaster = "local[1]"\n',
        encoding="utf-8",
    )
    return path


def role_url(database, name: str, password: str | None = None, port: int | None = None) -> str:
    url = make_url(database.url).set(username=name, password=password)
    if port is not None:
        url = url.set(port=port)
    return url.render_as_string(hide_password=False)


def log_changes(database) -> None:
    """Changes by another user (not loopback) and one malformed row, so documents and rejects get written."""
    database.execute(
        f"INSERT INTO {database.schema}.usr VALUES (1, 'Jack')",
        f"UPDATE {database.schema}.usr SET fname = 'John' WHERE idu = 1",
        f"INSERT INTO {database.schema}.event_log (status, event_type, table_name, table_key) "
        "VALUES ('N', 9, 'usr', 'idu=1')",
    )


def test_a_password_from_the_environment_never_shows(
    spark, postgresql_database, role, tmp_path, monkeypatch, capsys, caplog
):
    caplog.set_level(logging.INFO)
    name, password = role
    db = postgresql_database
    output = tmp_path / "out"
    config = config_file(tmp_path / "publisher.toml", role_url(db, name), db.schema, output)
    monkeypatch.setenv("PUBLISHER_DATABASE_PASSWORD", password)
    loaded = load_config(config)
    assert loaded.database.password == password
    assert quote(password, safe="") in loaded.database.sqlalchemy_url()
    seen = Seen(capsys, caplog, output)

    assert seen.run("install", "-c", str(config), "--table", "usr")[0] == 0
    log_changes(db)
    code, out, _ = seen.run("stats", "-c", str(config), "--json")
    assert code == 0 and json.loads(out)["statuses"] == {"N": 3}
    assert seen.run("stats", "-c", str(config))[0] == 0
    code, out, _ = seen.run("poll", "-c", str(config))
    assert code == 0, seen.err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["documents"] >= 1 and summary["rejected"] == 1
    assert (output / "rejects.jsonl").exists()

    down = config_file(tmp_path / "down.toml", role_url(db, name, port=9), db.schema, output)
    code, _, err = seen.run("poll", "-c", str(down))
    assert code == 1
    assert f"cannot use the database at postgresql://{name}@127.0.0.1:9/" in err

    seen.assert_hidden(password, repr(loaded), str(loaded), repr(load_config(down)))


def test_a_password_inside_the_url_is_masked(spark, postgresql_database, role, tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    name, password = role
    db = postgresql_database
    output = tmp_path / "out"
    config = config_file(tmp_path / "publisher.toml", role_url(db, name, password), db.schema, output)
    seen = Seen(capsys, caplog, output)

    assert seen.run("install", "-c", str(config), "--table", "usr")[0] == 0
    log_changes(db)
    code, out, _ = seen.run("poll", "-c", str(config))
    assert code == 0, seen.err
    assert json.loads(out.strip().splitlines()[-1])["documents"] >= 1

    down = config_file(tmp_path / "down.toml", role_url(db, name, password, port=9), db.schema, output)
    code, _, err = seen.run("poll", "-c", str(down))
    assert code == 1
    assert f"cannot use the database at postgresql://{name}:***@127.0.0.1:9/" in err

    loaded = load_config(config)
    assert "***" in repr(loaded)
    seen.assert_hidden(password, repr(loaded), str(loaded), loaded.database.display_url())


def test_repr_and_messages_mask_the_password_even_in_a_broken_url():
    broken = DatabaseConfig(url="postgresql://idm:hunter2@db:notaport/hr", password="hunter3")
    assert "hunter" not in repr(Config(database=broken))
    assert broken.display_url() == "postgresql://idm:***@db:notaport/hr"
    assert broken.redact("login hunter2 then hunter3") == "login *** then ***"
