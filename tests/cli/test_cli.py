"""The `publisher` command as a user runs it: output, exit codes, messages."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MARIADB_URL
from sqlalchemy import create_engine, make_url, text

from publisher.cli import main
from publisher.config import Config, DatabaseConfig
from publisher.database import connect


def sqlite_config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "publisher.toml"
    path.write_text(
        f'[database]\nurl = "sqlite:///{tmp_path / "cli.db"}"\nschema = "indirect"\n'
        f'[output]\ndirectory = "{tmp_path / "out"}"\n[spark]\nmaster = "local[2]"\n{extra}',
        encoding="utf-8",
    )
    engine = create_engine(f"sqlite:///{tmp_path / 'cli.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64))"))
    engine.dispose()
    return path


def change(tmp_path: Path, *statements: str) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'cli.db'}")
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


def test_parse_key_prints_parts_and_canonical_form(capsys):
    assert main(["parse-key", 'pkey=", ; \' + \\" = \\\\ < >"+n= 1']) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parts"] == [{"column": "pkey", "value": ", ; ' + \" = \\ < >"}, {"column": "n", "value": " 1"}]
    assert out["canonical"] == 'pkey=", ; \' + \\" = \\\\ < >"+n= 1'


def test_parse_key_error_shows_the_position(capsys):
    assert main(["parse-key", "idu=1+name=a<b"]) == 2
    err = capsys.readouterr().err
    assert "position 12" in err
    caret_line = err.splitlines()[-1]
    assert caret_line.index("^") - 2 == 12


def test_install_dry_run_prints_sql_and_changes_nothing(tmp_path, capsys):
    config = sqlite_config(tmp_path)
    assert main(["install", "-c", str(config), "--table", "usr", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "CREATE TABLE" in out and "CREATE TRIGGER" in out
    engine = create_engine(f"sqlite:///{tmp_path / 'cli.db'}")
    with engine.connect() as conn:
        names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
    assert "event_log" not in names


def test_install_without_table_captures_the_configured_tables(tmp_path, capsys):
    config = sqlite_config(tmp_path, '[publisher]\ntables = ["usr"]\n')
    assert main(["install", "-c", str(config)]) == 0
    assert "triggers of usr" in capsys.readouterr().err
    engine = create_engine(f"sqlite:///{tmp_path / 'cli.db'}")
    with engine.connect() as conn:
        captured = {r[0] for r in conn.execute(text("SELECT tbl_name FROM sqlite_master WHERE type = 'trigger'"))}
    assert captured == {"usr"}


def test_install_without_any_table_says_how_to_name_one(tmp_path, capsys):
    assert main(["install", "-c", str(sqlite_config(tmp_path))]) == 0
    assert "no tables (name them with --table, or as [publisher] tables)" in capsys.readouterr().err


def test_install_unknown_table_is_a_usage_error(tmp_path, capsys):
    config = sqlite_config(tmp_path)
    assert main(["install", "-c", str(config), "--table", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_poll_prints_one_json_line_and_stats_shows_the_backlog(spark, tmp_path, capsys):
    config = sqlite_config(tmp_path)
    assert main(["install", "-c", str(config), "--table", "usr"]) == 0
    change(
        tmp_path,
        "INSERT INTO usr VALUES (1, 'Jack')",
        "INSERT INTO usr VALUES (2, 'Jill')",
        "UPDATE usr SET fname = 'John' WHERE idu = 1",
        "INSERT INTO event_log (status, event_type, table_name, table_key) VALUES ('N', 9, 'usr', 'idu=1')",
    )
    capsys.readouterr()
    assert main(["stats", "-c", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["statuses"] == {"N": 4}
    assert report["new_by_table"] == {"usr": 4}
    assert report["oldest_new_age_seconds"] >= 0

    assert main(["poll", "-c", str(config), "--set", "publisher.batch_size=1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["events"] == 4
    assert summary["operations"] == 3  # add idu=1, add idu=2, modify idu=1
    assert summary["documents"] == 3
    assert summary["statuses"] == {"S": 3, "E": 1}

    assert main(["stats", "-c", str(config)]) == 0
    table = capsys.readouterr().out
    assert "S" in table and "(none)" in table


def test_poll_with_bad_config_exits_2_with_one_line(tmp_path, capsys):
    config = sqlite_config(tmp_path, "[publisher]\nbatch_size = 'big'\n")
    assert main(["poll", "-c", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "publisher: publisher.batch_size: expected a whole number, got str 'big'"


def test_poll_without_config_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["poll"])
    assert info.value.code == 2
    assert "-c/--config" in capsys.readouterr().err


def test_poll_with_unreachable_database_exits_1_without_the_password(tmp_path, capsys):
    config = tmp_path / "down.toml"
    config.write_text('[database]\nurl = "postgresql://idm:s3cret@127.0.0.1:9/test"\n', encoding="utf-8")
    assert main(["poll", "-c", str(config)]) == 1
    err = capsys.readouterr().err
    assert "cannot use the database at postgresql://idm:***@127.0.0.1:9/test" in err
    assert "s3cret" not in err


def test_help_teaches_the_commands():
    out = subprocess.run(
        [sys.executable, "-m", "publisher.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for word in ("demo", "install", "poll", "run", "stats", "parse-key", "PUBLISHER_DATABASE_URL"):
        assert word in out


@pytest.mark.process
def test_run_publishes_and_stops_cleanly_on_sigterm(tmp_path):
    config = sqlite_config(tmp_path, "[publisher]\npolling_interval = 0.5\n")
    assert main(["install", "-c", str(config), "--table", "usr"]) == 0
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    process = subprocess.Popen(
        [sys.executable, "-m", "publisher.cli", "run", "-c", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        change(tmp_path, "INSERT INTO usr VALUES (7, 'Seven')")
        out = tmp_path / "out"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(out.glob("*.xml")):
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.5)
        documents = list(out.glob("*.xml"))
        assert documents, "no document published within 120 s"
        assert b"idu=7,table=usr,schema=indirect" in documents[0].read_bytes()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "cycle {" in err and "SIGTERM" in err and "stopped" in err


def test_demo_prints_the_published_documents(spark, tmp_path, capsys):
    assert main(["demo", "--directory", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert '<add class-name="usr"' in out
    assert '<delete class-name="usr"' in out
    assert "idu=1,table=usr,schema=indirect" in out
    summary = json.loads([line for line in out.splitlines() if line.startswith('{"events"')][0])
    assert summary["statuses"].get("E", 0) == 0 and summary["documents"] >= 1
    assert (tmp_path / "demo" / "publisher.toml").exists()


def test_verify_says_the_mirror_equals_the_source_after_a_drain(spark, tmp_path, capsys):
    config = sqlite_config(tmp_path)
    assert main(["install", "-c", str(config), "--table", "usr"]) == 0
    change(tmp_path, "INSERT INTO usr VALUES (1, 'Jack')", "INSERT INTO usr VALUES (2, 'Jill')")
    assert main(["poll", "-c", str(config)]) == 0
    capsys.readouterr()
    assert main(["verify", "-c", str(config)]) == 0
    assert capsys.readouterr().out == "mirror equals source: 2 objects in 1 table, 1 document replayed\n"


def test_verify_prints_one_line_per_difference_and_exits_1(spark, tmp_path, capsys):
    config = sqlite_config(tmp_path)
    assert main(["install", "-c", str(config), "--table", "usr"]) == 0
    change(tmp_path, "INSERT INTO usr VALUES (1, 'Jack')", "INSERT INTO usr VALUES (2, 'Jill')")
    assert main(["poll", "-c", str(config)]) == 0
    change(tmp_path, "DROP TRIGGER usr_publisher_upd", "UPDATE usr SET fname = 'John' WHERE idu = 1",
           "DELETE FROM usr WHERE idu = 2")
    capsys.readouterr()
    assert main(["verify", "-c", str(config), "--documents", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "usr  idu=1,table=usr,schema=indirect  fname: expected ['John'], published ['Jack']",
        "usr  idu=2,table=usr,schema=indirect  object: expected absent, published present",
        "2 differences over 2 objects in 1 table",
        "note: 1 event is still new; poll until drained before verifying",
    ]


def test_verify_without_documents_is_one_line_and_exit_1(tmp_path, capsys):
    config = sqlite_config(tmp_path)
    assert main(["verify", "-c", str(config), "--documents", str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().err == (
        f"publisher: no documents to replay: the directory {tmp_path / 'nowhere'} does not exist\n"
    )


def test_verify_help_says_what_it_does():
    out = subprocess.run(
        [sys.executable, "-m", "publisher.cli", "verify", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "Replays the XDS documents" in " ".join(out.split()) and "--documents DIR" in out


@pytest.mark.database
@pytest.mark.parametrize(("scheme", "query"), [("mysql", ""), ("mariadb", ""), ("mysql+pymysql", "?charset=utf8mb4")])
def test_a_mysql_or_mariadb_url_works_out_of_the_box(scheme, query):
    """A bare scheme gets the driver installed with the publisher, and utf8mb4 unless the URL
    asks for another character set."""
    server = make_url(MARIADB_URL)
    url = server.set(drivername=scheme).render_as_string(hide_password=False) + query
    engine = connect(Config(database=DatabaseConfig(url=url)))
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT @@character_set_client, DATABASE()").one() == ("utf8mb4", server.database)
    assert engine.url.drivername.endswith("+pymysql")
    engine.dispose()


@pytest.mark.parametrize(("url", "code", "message"), [
    ("foo://x", 2, "publisher: database.url: 'foo://x': 'foo' is not a database or driver SQLAlchemy knows "
     "(e.g. sqlite:///demo.db or postgresql://user@host/db)"),
    ("mysql+mysqldb://idm:s3cret@127.0.0.1/x", 1, "publisher: database.url: 'mysql+mysqldb://idm:***@127.0.0.1/x' "
     "needs the Python module 'MySQLdb' (driver mysql+mysqldb), which is not installed here"),
    ("mssql://idm:s3cret@127.0.0.1/x", 1, "publisher: database.url: 'mssql://idm:***@127.0.0.1/x' needs the Python "
     "module 'pyodbc' (driver mssql+pyodbc), which is not installed here"),
])
def test_a_database_url_that_cannot_load_is_one_line(tmp_path, capsys, url, code, message):
    config = tmp_path / "url.toml"
    config.write_text(f'[database]\nurl = "{url}"\n', encoding="utf-8")
    for command in ("poll", "stats", "verify"):
        assert main([command, "-c", str(config)]) == code
        assert capsys.readouterr().err == message + "\n"


@pytest.mark.parametrize(("argv", "variable", "pool"), [
    (["poll", "-c", "missing.toml"], None, "jemalloc"),
    (["poll", "-c", "missing.toml"], "system", "system"),
])
def test_a_command_gives_arrow_the_pool_that_reuses_freed_memory_unless_one_is_named(
        argv: list[str], variable: str | None, pool: str, tmp_path: Path) -> None:
    """A cycle's Arrow memory comes from jemalloc, which keeps freed pages a moment (see
    `reuse_freed_memory`), chosen before the configuration is read; a pool named in the
    environment is kept."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if variable:
        env["ARROW_DEFAULT_MEMORY_POOL"] = variable
    script = ("import sys, pyarrow as pa; from publisher.cli import main; main(sys.argv[1:]); "
              "print(pa.default_memory_pool().backend_name)")
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == pool, done.stderr
