"""`publisher demo`: the whole path on a throwaway database file (`file_url`), in one command."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from lxml import etree
from sqlalchemy import text

from publisher.capture.install import install_capture
from publisher.config.loading import load_config
from publisher.database import connect
from publisher.dialects import file_url
from publisher.pipeline.cycle import run_cycle
from publisher.pipeline.spark import get_spark

CONFIG_TEMPLATE = """\
# Written by `publisher demo`; run `publisher poll -c {config}` after changing {database}.
[database]
url = "{url}"
schema = "indirect"

[output]
directory = "{output}"

[spark]
master = "{master}"
{formats}"""
FORMATS = """
[output.change_tables]
enabled = true

[output.messages]
enabled = true
"""

TABLES = (
    "CREATE TABLE usr (idu INTEGER PRIMARY KEY, fname VARCHAR(64), lname VARCHAR(64), photo BLOB)",
    "CREATE TABLE grp (name VARCHAR(64), site INTEGER, descr VARCHAR(64), PRIMARY KEY (name, site))",
)
CHANGES = (
    "INSERT INTO usr (idu, fname, lname, photo) VALUES (1, 'Jack', 'Frost', X'AAAA')",
    "INSERT INTO usr (idu, fname, lname, photo) VALUES (2, 'Ann', 'Lee', NULL)",
    "UPDATE usr SET fname = 'John', lname = 'Doe', photo = X'BBBB' WHERE idu = 1",
    "DELETE FROM usr WHERE idu = 2",
    "INSERT INTO grp (name, site, descr) VALUES ('R&D, \"Lab\" <1>', 7, 'research')",
)


def run_demo(directory: Path, master: str, formats: bool = False) -> int:
    """Create the demo database afresh, change it, poll once, print what was published; with
    `formats`, the change tables and messages too."""
    directory = directory.resolve()
    database, output = directory / "demo.db", directory / "out"
    directory.mkdir(parents=True, exist_ok=True)
    database.unlink(missing_ok=True)
    shutil.rmtree(output, ignore_errors=True)
    config_path = directory / "publisher.toml"
    config_path.write_text(
        CONFIG_TEMPLATE.format(
            config=config_path, database=database, url=file_url(str(database)), output=output, master=master,
            formats=FORMATS if formats else "",
        ),
        encoding="utf-8",
    )
    config = load_config(config_path, environ={})
    engine = connect(config)
    with engine.begin() as conn:
        for statement in TABLES:
            conn.execute(text(statement))
    install_capture(config, engine, ["usr", "grp"], "field")
    with engine.begin() as conn:
        for statement in CHANGES:
            print(f"-- {statement}")
            conn.execute(text(statement))
    with engine.connect() as conn:
        logged = conn.execute(text(
            "SELECT record_id, event_type, table_name, table_key, column_name, old_value, new_value "
            "FROM event_log ORDER BY record_id"
        )).all()
    print(f"\nThe triggers logged {len(logged)} events:")
    for row in logged:
        print("  " + " | ".join("NULL" if v is None else str(v) for v in row))
    result = run_cycle(get_spark(config.spark), engine, config)
    print("\nOne polling cycle published:")
    for name in result.files:
        document = etree.fromstring((output / name).read_bytes())
        print(f"\n{output / name}:")
        print(etree.tostring(document, pretty_print=True, encoding="unicode"))
    for name in result.format_files:
        print(f"\n{output / name}:")
        for line in _format_lines(output / name):
            print("  " + line)
    print(json.dumps(result.summary()))
    print(f"\nTry: publisher stats -c {config_path}")
    return 0


def _format_lines(path: Path) -> list[str]:
    """A change table's rows or a message file's lines, one JSON object per line."""
    if path.suffix == ".jsonl":
        return path.read_text(encoding="utf-8").splitlines()
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return [json.dumps(row, default=_shown_value, ensure_ascii=False) for row in rows]


def _shown_value(value: object) -> str:
    if isinstance(value, bytes):
        return "0x" + value.hex().upper()
    return str(value)
