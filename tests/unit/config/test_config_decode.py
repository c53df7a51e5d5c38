"""The job configuration's typed decoder (l2m/config/decode.py): defaults from the records,
"did you mean" hints on the misspelled key's line, Kafka client setting names, the monitoring
port (0: a free one), and what ``l2m run`` prints for it."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import fields, replace
from pathlib import Path

import pytest

from l2m.config.decode import client_setting_problem
from l2m.config.job import JobConfig, MonitoringConfig, SourceConfig, Topics
from l2m.config.loader import config_from_dict, load_config
from tests.support.configs import KAFKA, config_error

ROOT = Path(__file__).resolve().parents[3]
SECRET = "hunter2_Zq9"


def test_every_default_comes_from_the_records(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA)
    cfg = load_config(path)
    default = JobConfig()
    assert cfg.rules == tuple(str(tmp_path / r) for r in default.rules)
    assert cfg.checkpoint == str(tmp_path / default.checkpoint)
    assert cfg.path == str(path)
    assert replace(cfg, kafka=default.kafka, rules=default.rules, checkpoint=default.checkpoint,
                   path=None) == default
    # empty sections are the sections' defaults too
    path.write_text(KAFKA + "topics: {}\nsource: ~\nmonitoring: {}\nspark: {}\n")
    cfg = load_config(path)
    assert (cfg.topics, cfg.source, cfg.monitoring) == (Topics(), SourceConfig(),
                                                        MonitoringConfig())
    assert (cfg.master, cfg.spark) == (default.master, {})


def test_the_loader_repeats_no_default():
    # the defaults live in l2m/config/job.py and l2m/defaults.py only
    text = (ROOT / "l2m" / "config" / "loader.py").read_text()
    for written in ("5 seconds", "20 minutes", "5 minutes", "7 days", "local[*]", "@timestamp",
                    "balanced", "120_000", "100_000", "0.0.0.0", "checkpoints/l2m"):
        assert written not in text


@pytest.mark.parametrize(("text", "expected"), [
    (KAFKA + "trigger: 5s\ngrce: 1m\n", "job.yaml:4: unknown key(s): grce (did you mean 'grace'?)"),
    (KAFKA + "source:\n  planner: partition\n  max_record_per_task: 5\n",
     "job.yaml:5: source: unknown key(s): max_record_per_task "
     "(did you mean 'max_records_per_task'?)"),
    (KAFKA + "monitoring:\n  host: 127.0.0.1\n  prot: 9464\n",
     "job.yaml:5: monitoring: unknown key(s): prot (did you mean 'port'?)"),
    (KAFKA + "topics: {logs: a, dead_leters: b}\n",
     "job.yaml:3: topics: unknown key(s): dead_leters (did you mean 'dead_letters'?)"),
    (KAFKA + "\nplanner: partition\n", "job.yaml:4: unknown key(s): planner "
                                       "(belongs under 'source')"),
])
def test_a_misspelled_key_gets_a_hint_on_its_own_line(tmp_path, text, expected):
    assert config_error(tmp_path, text) == expected


def test_an_unknown_key_without_a_near_miss_lists_the_allowed_ones(tmp_path):
    message = config_error(tmp_path, KAFKA + "colour: blue\n")
    assert message.startswith("job.yaml:3: unknown key(s): colour (allowed: checkpoint, ")


@pytest.mark.parametrize(("text", "expected"), [
    ("kafka: {bootstrap_servers: 'x:1'}\n",
     "job.yaml:1: kafka.bootstrap_servers: unknown client setting; "
     "did you mean 'bootstrap.servers'?"),
    ("kafka:\n  client.id: l2m\n  bootstrap.server: x:1\n",
     "job.yaml:3: kafka.bootstrap.server: unknown client setting; "
     "did you mean 'bootstrap.servers'?"),
    (KAFKA + "sink_kafka:\n  acks: all\n  message_timeout_ms: 5000\n",
     "job.yaml:5: sink_kafka.message_timeout_ms: unknown client setting; "
     "did you mean 'message.timeout.ms'?"),
    ("kafka:\n  client.id: l2m\n", "job.yaml:1: kafka: 'bootstrap.servers' is required"),
    ("trigger: 5s\n", "job.yaml: kafka: 'bootstrap.servers' is required"),
])
def test_client_settings_are_librdkafka_names(tmp_path, text, expected):
    assert config_error(tmp_path, text).startswith(expected)


def test_librdkafka_underscored_settings_are_accepted():
    cfg = config_from_dict({"kafka": {"bootstrap.servers": "x:1", "log_level": 3,
                                      "enabled_events": 0}})
    assert cfg.kafka == {"bootstrap.servers": "x:1", "log_level": "3", "enabled_events": "0"}
    assert client_setting_problem("ssl_ca_location") is not None
    assert client_setting_problem("ssl.ca.location") is None


@pytest.mark.parametrize("line", [
    f"kafka: {{bootstrap.servers: 'x:1', {SECRET}}}\n",            # a stray value as a key
    f"kafka: {{bootstrap.servers: 'x:1', sasl.password {SECRET}}}\n",
    f"kafka: {{bootstrap.servers: 'x:1', sasl_password: {SECRET}}}\n",  # the value, not shown
    f"kafka: {{bootstrap_servers: {SECRET}}}\n",
])
def test_client_setting_hints_never_show_a_value(tmp_path, line):
    message = config_error(tmp_path, line)
    assert message.startswith("job.yaml:1: kafka")
    assert SECRET not in message and SECRET.replace("_", ".") not in message


@pytest.mark.parametrize(("written", "port"), [
    ("monitoring: {port: 0}\n", 0),             # a free port, reported by the endpoint
    ("monitoring: {port: 9464}\n", 9464),
    ("monitoring: {port: null}\n", None),       # not served
    ("monitoring: {host: 127.0.0.1}\n", None),
    ("", None),
])
def test_monitoring_port_zero_is_a_free_port_and_absent_is_off(tmp_path, written, port):
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA + written)
    assert load_config(path).monitoring.port == port


@pytest.mark.parametrize("bad", ["65536", "-1", "false", "'x'"])
def test_monitoring_port_must_be_a_tcp_port(tmp_path, bad):
    assert config_error(tmp_path, KAFKA + f"monitoring:\n  port: {bad}\n").startswith(
        "job.yaml:4: monitoring.port: ")


def test_durations_integers_and_limits_keep_their_rules(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA + "trigger: 250 ms\ngrace: 90\ncounter_shards: ' 16 '\n"
                    "source: {max_records_per_trigger: 0, max_records_per_task: null, "
                    "min_partitions: 2, poll_timeout_ms: 1}\n")
    cfg = load_config(path)
    assert (cfg.trigger_ms, cfg.grace_ms, cfg.counter_shards) == (250, 90_000, 16)
    assert (cfg.source.max_records_per_trigger, cfg.source.max_records_per_task,
            cfg.source.min_partitions, cfg.source.poll_timeout_ms) == (None, None, 2, 1)
    for bad, where in [("source: {poll_timeout_ms: 0}", "source.poll_timeout_ms"),
                       ("source: {min_partitions: 2147483648}", "source.min_partitions"),
                       ("counter_ttl: yes", "counter_ttl"), ("rules: [a, '']", "rules")]:
        assert config_error(tmp_path, KAFKA + bad + "\n").startswith(f"job.yaml:3: {where}: ")


def test_every_record_field_is_decoded():
    # a field added to a record without a decodable type fails here, not in a user's file
    data = {"kafka": {"bootstrap.servers": "x:1"}, "sink_kafka": {"acks": "all"},
            "topics": {f.name: f.name for f in fields(Topics)},
            "source": {"starting_offsets": "latest", "max_records_per_trigger": 1,
                       "max_records_per_task": 2, "min_partitions": 3, "planner": "partition",
                       "plan_log": "p", "fail_on_data_loss": False, "group_id": "g",
                       "poll_timeout_ms": 4},
            "monitoring": {"port": 1, "host": "h", "top_accounts": 3},
            "spark": {"master": "local[1]", "spark.x": 1.5}, "rules": "/r", "checkpoint": "/c",
            "trigger": 1, "grace": 2, "max_future_skew": 3, "counter_ttl": 4,
            "counter_shards": 5, "text_fields": ["t"], "default_fields": ["d"],
            "timestamp_field": "ts"}
    assert {f.name for f in fields(SourceConfig)} == set(data["source"])
    assert {f.name for f in fields(MonitoringConfig)} == set(data["monitoring"])
    cfg = config_from_dict(data)
    assert cfg.source == SourceConfig("latest", 1, 2, 3, "partition", "p", False, "g", 4)
    assert (cfg.master, cfg.spark, cfg.rules, cfg.checkpoint) == (
        "local[1]", {"spark.x": "1.5"}, ("/r",), "/c")
    assert (cfg.trigger_ms, cfg.grace_ms, cfg.max_future_ms, cfg.counter_ttl_ms) == (
        1000, 2000, 3000, 4000)


def test_run_with_port_zero_prints_the_port_it_serves(tmp_path, monkeypatch, capsys):
    """``l2m run`` with ``monitoring.port: 0`` serves on a free port and names it (the job
    itself replaced: no JVM, no broker)."""
    from l2m import cli
    from l2m.runtime import runner

    served: list[int] = []

    class NoJob:
        def __init__(self, cfg, rules, once=False, watcher=None, rules_status=None,
                     telemetry=None):
            self.cfg, self.spark, self.telemetry = cfg, None, None

        def install_signals(self) -> None:
            pass

        def start(self) -> None:
            pass

        def closed(self) -> None:
            pass

        def wait(self, duration=None) -> int:
            first = capsys.readouterr().err
            port = int(re.search(r"metrics on :(\d+)/metrics", first).group(1))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert r.status == 200 and b"l2m_" in r.read()
            served.append(port)
            return 0

    monkeypatch.setattr(runner, "Runner", NoJob)
    path = tmp_path / "job.yaml"
    path.write_text(f"{KAFKA}rules: [{ROOT / 'rules'}]\n"
                    "monitoring: {port: 0, host: 127.0.0.1}\n")
    assert cli.main(["run", "--config", str(path), "--once"]) == 0
    assert served and served[0] > 0
