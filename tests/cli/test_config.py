"""Configuration: TOML, environment and --set layers, and a precise complaint for every bad value."""
from __future__ import annotations

from pathlib import Path

import pytest

from publisher.config import ConfigError
from publisher.config.loading import load_config


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "publisher.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_defaults_are_the_vendor_defaults(tmp_path):
    config = load_config(write(tmp_path, ""), environ={})
    p = config.publisher
    assert (p.polling_interval, p.query_limit, p.batch_size, p.heartbeat_interval) == (10.0, 10000, 128, 0.0)
    assert (p.allow_loopback, p.future_events, p.delete_processed_rows) == (False, False, False)
    assert config.event_log.table == "event_log"
    assert config.event_log.columns.in_order()[0] == "record_id"
    assert config.spark.master == "local[*]"


@pytest.mark.parametrize(("spark", "driver_events", "on_tasks"), [
    ("", 1_000_000, False),  # a local master: the driver's cores are all there is
    ('master = "local[2]"', 1_000_000, False),
    ('master = "spark://10.0.0.5:7077"', 20_000, True),  # a cluster: executors elsewhere
    ('master = "sc://10.0.0.5:15002"', 20_000, True),
    ('master = "spark://10.0.0.5:7077"\nsmall_cycle_events = 0', 0, True),  # as set, whatever the master
    ("small_cycle_events = 0", 0, True),
    ("small_cycle_events = 5000", 5000, False),
])
def test_the_driver_takes_cycles_and_key_ranges_by_where_spark_runs_unless_told(tmp_path, spark, driver_events,
                                                                                on_tasks):
    config = load_config(write(tmp_path, f"[spark]\n{spark}\n"), environ={})
    assert (config.spark.driver_events, config.spark.on_tasks) == (driver_events, on_tasks)


def test_file_then_environment_then_set(tmp_path):
    path = write(tmp_path, '[database]\nurl = "sqlite:///a.db"\n[publisher]\nbatch_size = 5\nquery_limit = 7\n')
    env = {"PUBLISHER_DATABASE_URL": "sqlite:///b.db", "PUBLISHER_PUBLISHER_BATCH_SIZE": "6"}
    config = load_config(path, environ=env, overrides=["publisher.batch_size=9", "event_log.columns.status=state"])
    assert config.database.url == "sqlite:///b.db"
    assert config.publisher.batch_size == 9
    assert config.publisher.query_limit == 7
    assert config.event_log.columns.status == "state"


def test_renamed_columns_and_lists(tmp_path):
    path = write(
        tmp_path,
        '[event_log]\ntable = "evlog"\n[event_log.columns]\nstatus = "state"\ntable_key = "objkey"\n'
        '[publisher]\npost_polling_statements = ["DELETE FROM x"]\ntime_of_day = ["02:00", "14:30:15"]\n',
    )
    config = load_config(path, environ={})
    assert config.event_log.columns.in_order()[1] == "state"
    assert config.event_log.columns.table_key == "objkey"
    assert config.publisher.post_polling_statements == ("DELETE FROM x",)
    assert config.publisher.time_of_day == ("02:00", "14:30:15")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("[database]\nurll = 'x'\n", "database.urll: unknown key"),
        ("[nonsense]\n", "nonsense: unknown key"),
        ("[publisher]\nquery_limit = 'many'\n", "publisher.query_limit: expected a whole number, got str 'many'"),
        ("[publisher]\nquery_limit = 0\n",
         "publisher.query_limit: expected a whole number from 1 to 9223372036854775807 (the largest signed 64-bit "
         "integer), got 0"),
        ("[publisher]\nbatch_size = -1\n", "publisher.batch_size: expected a whole number from 1 to "),
        ("[publisher]\nmax_row_bytes = 0\n", "publisher.max_row_bytes: expected bytes from 1 to 1073741824"),
        ("[publisher]\nmax_row_bytes = 1073741825\n", "1 GiB), got 1073741825"),
        ("[publisher]\nallow_loopback = 'yes'\n", "publisher.allow_loopback: expected true or false"),
        (
            "[publisher]\npolling_interval = 5\ntime_of_day = ['02:00']\n",
            "time_of_day excludes publisher.polling_interval",
        ),
        ("[publisher]\ntime_of_day = ['25:00']\n", "publisher.time_of_day: expected HH:MM or HH:MM:SS, got '25:00'"),
        ("[publisher]\ntime_of_day = '02:00'\n", "publisher.time_of_day: expected a list of strings"),
        ("[publisher]\nheartbeat_interval = -1\n", "publisher.heartbeat_interval"),
        (
            "[publisher]\ninsert_row_operation = 'upsert'\n",
            "publisher.insert_row_operation: expected one of 'modify', 'add'",
        ),
        ("[publisher]\nretired_columns = 'drop'\n", "publisher.retired_columns: expected one of 'keep', 'remove'"),
        ("[publisher]\npost_polling_statements = ['  ']\n", "post_polling_statements[0]: empty statement"),
        ("[event_log.columns]\nstatus = 'record_id'\n", "names two columns"),
        ("[event_log.columns]\nstatus = ''\n", "event_log.columns.status: expected a column name"),
        ("[database]\nurl = 'not a url'\n", "database.url: 'not a url' is not a SQLAlchemy URL"),
        ("database = 3\n", "database: expected a table"),
        ("[spark]\nmaster = ''\n", "spark.master"),
        ("[classes.usr.multi_valued]\nphone = 'usr_phone'\n",
         "classes.usr.multi_valued.phone: expected \"child_table.value_column\", got 'usr_phone'"),
        ("[classes.usr.multi_valued]\nphone = 'p.n'\nmail = 'P.m'\n",
         "classes.usr.multi_valued.mail: child table 'P' is also classes.usr.multi_valued.phone"),
        ("[classes.usr.multi_valued]\nmember = 'grp.idu'\n[classes.grp]\n",
         "classes.usr.multi_valued.member: 'grp' is a class of its own, not a child table"),
        ("[classes.usr.references]\nmanager = ''\n", "classes.usr.references.manager: expected an attribute"),
        ("[classes.usr.multi_valued]\nphone = 'p.n'\n[output.messages]\nenabled = true\n",
         "output: change tables and messages carry a table's columns, and class 'usr' has multi-valued"),
        ("[classes.usr.multi_valued]\nphone = 'p.n'\n[subscriptions.s]\ntables = ['doc', 'USR']\n"
         "[subscribers.x]\nsubscription = 's'\noutput = 'x'\n[subscribers.x.formats.change_tables]\nenabled = true\n",
         "subscribers.x.formats: change tables and messages carry a table's columns, and class 'usr' has"),
        ("classes = 3\n", "classes: expected a table of named entries"),
    ],
)
def test_bad_configuration_names_the_key(tmp_path, body, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, body), environ={})
    assert fragment in str(info.value)


BIG = "100000000000000000000"  # 10**20: more than a signed 64-bit integer holds


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("publisher.polling_interval", "nan", "publisher.polling_interval: expected a finite number, got float nan"),
        ("publisher.polling_interval", "inf", "publisher.polling_interval: expected a finite number, got float inf"),
        ("publisher.polling_interval", "-inf", "publisher.polling_interval: expected a finite number, got float -inf"),
        ("publisher.polling_interval", "1e300",
         "publisher.polling_interval: expected seconds above 0, at most 31536000 (365 days), got 1e+300"),
        ("publisher.polling_interval", "0", "publisher.polling_interval: expected seconds above 0, at most 31536000 "
         "(365 days), got 0.0"),
        ("publisher.polling_interval", "1" + "0" * 400,
         "publisher.polling_interval: expected a finite number, got int 1000"),
        ("publisher.heartbeat_interval", "nan",
         "publisher.heartbeat_interval: expected a finite number, got float nan"),
        ("publisher.heartbeat_interval", "inf",
         "publisher.heartbeat_interval: expected a finite number, got float inf"),
        ("publisher.query_limit", BIG, "publisher.query_limit: expected a whole number from 1 to 9223372036854775807 "
         f"(the largest signed 64-bit integer), got {BIG}"),
        ("publisher.query_limit", "9223372036854775808", "publisher.query_limit: expected a whole number from 1 to "),
        ("publisher.batch_size", BIG, "publisher.batch_size: expected a whole number from 1 to 9223372036854775807 "
         f"(the largest signed 64-bit integer), got {BIG}"),
        ("spark.small_cycle_events", BIG, "spark.small_cycle_events: expected 0 (always Spark) or more, at most "
         f"9223372036854775807 (the largest signed 64-bit integer), got {BIG}"),
        ("spark.read_partitions", BIG, "spark.read_partitions: expected 0 (automatic) or more, at most "
         f"9223372036854775807 (the largest signed 64-bit integer), got {BIG}"),
    ],
)
def test_malformed_numbers_are_refused_from_every_layer(tmp_path, key, text, message):
    """NaN, infinities and integers no database holds are refused at start, naming the key, whether
    they come from the file, a PUBLISHER_<SECTION>_<KEY> variable or --set: a NaN interval polled
    without a pause, an infinite one died later naming no key, a huge query_limit failed the poll."""
    section, name = key.split(".")
    variable = f"PUBLISHER_{section.upper()}_{name.upper()}"
    layers = {
        "file": lambda: load_config(write(tmp_path, f"[{section}]\n{name} = {text}\n"), environ={}),
        "environment": lambda: load_config(write(tmp_path, ""), environ={variable: text}),
        "--set": lambda: load_config(write(tmp_path, ""), environ={}, overrides=[f"{key}={text}"]),
    }
    for layer, load in layers.items():
        with pytest.raises(ConfigError) as info:
            load()
        assert str(info.value).startswith(message), (layer, str(info.value))


def test_the_largest_numbers_that_work_are_accepted(tmp_path):
    body = ("[publisher]\npolling_interval = 31536000\nquery_limit = 9223372036854775807\n"
            "batch_size = 9223372036854775807\nheartbeat_interval = 1e300\n"
            "[spark]\nsmall_cycle_events = 9223372036854775807\nread_partitions = 9223372036854775807\n")
    config = load_config(write(tmp_path, body), environ={})
    assert (config.publisher.polling_interval, config.publisher.query_limit) == (31536000.0, (1 << 63) - 1)


def test_bad_environment_value_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="publisher.batch_size: expected a whole number"):
        load_config(write(tmp_path, ""), environ={"PUBLISHER_PUBLISHER_BATCH_SIZE": "lots"})


def test_bad_set_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--set publisher.batchsize: unknown key"):
        load_config(write(tmp_path, ""), environ={}, overrides=["publisher.batchsize=3"])
    with pytest.raises(ConfigError, match="expects key.path=value"):
        load_config(write(tmp_path, ""), environ={}, overrides=["publisher.batch_size"])


@pytest.mark.parametrize(("body", "overrides", "message"), [
    ("", ["publisher.querylimit=5"], "--set publisher.querylimit: unknown key; did you mean `publisher.query_limit`?"),
    ("", ["database.query_limit=5"], "--set database.query_limit: unknown key; did you mean `publisher.query_limit`?"),
    ("[publisher]\nqeury_limit = 5\n", [], "publisher.qeury_limit: unknown key; did you mean `publisher.query_limit`?"),
    ("[publishr]\nquery_limit = 5\n", [], "publishr: unknown key; did you mean `publisher`?"),
    ("[output]\npolling_interval = 5\n", [],
     "output.polling_interval: unknown key; did you mean `publisher.polling_interval`?"),
    ("", ["zzz.qqq=1"], "--set zzz.qqq: unknown key (every key is shown in examples/publisher.toml)"),
])
def test_an_unknown_key_names_the_closest_known_one_and_not_every_key(tmp_path, body, overrides, message):
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, body), environ={}, overrides=overrides)
    assert str(raised.value) == message


def test_a_misspelt_environment_variable_is_said_with_the_one_it_resembles(tmp_path, caplog):
    environ = {"PUBLISHER_PUBLISHER_QUERY_LIMT": "5", "PUBLISHER_FAILPOINT": "x", "PUBLISHER_TEST_POSTGRES_URL": "y"}
    config = load_config(write(tmp_path, ""), environ=environ)
    assert config.publisher.query_limit == 10000
    assert [r.getMessage() for r in caplog.records] == [
        "environment variable PUBLISHER_PUBLISHER_QUERY_LIMT sets no key and is ignored; did you mean "
        "PUBLISHER_PUBLISHER_QUERY_LIMIT (publisher.query_limit)?"]


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[publisher\n"), environ={})


def test_spark_settings_pass_through(tmp_path):
    config = load_config(
        write(tmp_path, '[spark]\nmaster = "spark://127.0.0.1:7077"\nconf = {"spark.executor.memory" = "2g"}\n'),
        environ={},
        overrides=["spark.conf.spark.sql.shuffle.partitions=8"],
    )
    assert config.spark.master == "spark://127.0.0.1:7077"
    assert config.spark.conf == {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "8"}


def test_example_configuration_is_valid():
    example = Path(__file__).parents[2] / "examples" / "publisher.toml"
    config = load_config(example, environ={})
    assert config.database.url.startswith("sqlite:///")


def test_a_subscriber_that_tracks_no_class_with_multi_valued_attributes_may_have_formats(tmp_path):
    body = ("[classes.usr.multi_valued]\nphone = 'p.n'\n[subscriptions.s]\ntables = ['doc']\n"
            "[subscribers.x]\nsubscription = 's'\noutput = 'x'\n[subscribers.x.formats.change_tables]\n"
            "enabled = true\n")
    config = load_config(write(tmp_path, body), environ={})
    assert config.subscribers["x"].output_config().publishes_changes


def test_a_subscribers_formats_are_checked_as_the_status_modes(tmp_path):
    body = ("[subscriptions.s]\ntables = ['usr']\n[subscribers.x]\nsubscription = 's'\noutput = 'x'\n"
            "[subscribers.x.formats.change_tables]\nenabled = true\npartition_minutes = 7\n")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, body), environ={})
    assert str(info.value).startswith("subscribers.x.formats.change_tables.partition_minutes: expected 0 (off) or "
                                      "minutes that divide a day (e.g. 60, 240, 1440), got 7")
