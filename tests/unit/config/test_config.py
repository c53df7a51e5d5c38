"""Job configuration files and the rendered topology (no JVM)."""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from l2m.config.loader import ConfigError, config_from_dict, duration_ms, load_config
from l2m.engine.fanout import MATCH_SCHEMA
from l2m.engine.partials import merge
from l2m.engine.preaggregate import preaggregate
from l2m.rules.loader import load_rules
from l2m.streaming.topology import describe
from tests.support.configs import KAFKA, config_error

ROOT = Path(__file__).resolve().parents[3]


def test_durations():
    assert duration_ms("20 minutes") == 1_200_000
    assert duration_ms("5s") == 5000
    assert duration_ms("250 ms") == 250
    assert duration_ms("7 days") == 604_800_000
    assert duration_ms(2) == 2000
    with pytest.raises(ConfigError, match="trigger: 'soon'"):
        duration_ms("soon", "trigger")


def test_example_configs_load(monkeypatch):
    monkeypatch.setenv("L2M_KAFKA_PASSWORD", "from-env")
    local = load_config(ROOT / "topology" / "local.yaml")
    assert local.kafka == {"bootstrap.servers": "127.0.0.1:9092"}
    assert local.rules == (str(ROOT / "rules"),)
    assert local.checkpoint == str(ROOT / "checkpoints" / "local")
    assert (local.trigger_ms, local.grace_ms, local.counter_shards) == (5000, 1_200_000, 4)
    assert local.master == "local[2]"
    prod = load_config(ROOT / "topology" / "production.yaml")
    assert prod.kafka["sasl.password"] == "from-env"
    assert prod.sink["message.timeout.ms"] == "60000"
    assert prod.source.max_records_per_task == 200_000
    assert prod.source.group_id == "l2m"
    assert prod.publish_delay == 120_000
    (mimir,) = prod.remote_write.endpoints
    assert (mimir.name, mimir.tenant_header, mimir.bearer_token_env) == (
        "mimir", "X-Scope-OrgID", "L2M_REMOTE_WRITE_TOKEN")
    assert local.publish_delay == 120_000 and local.remote_write.endpoints == ()


def test_checkpoint_uris_are_kept_and_the_stop_marker_stays_local(tmp_path: Path) -> None:
    from l2m.streaming.job import stop_file

    base = {"kafka": {"bootstrap.servers": "k:9092"}}
    s3 = config_from_dict({**base, "checkpoint": "s3a://bucket/l2m"}, tmp_path / "job.yaml")
    assert s3.checkpoint == "s3a://bucket/l2m"
    marker = Path(stop_file(s3))
    assert marker.is_absolute() and marker.name == "STOPPING" and "s3a" not in str(marker)
    other = config_from_dict({**base, "checkpoint": "s3a://bucket/other"}, tmp_path / "job.yaml")
    assert stop_file(other) != stop_file(s3)
    local = config_from_dict({**base, "checkpoint": "ck"}, tmp_path / "job.yaml")
    assert stop_file(local) == str(tmp_path.resolve() / "ck" / "STOPPING")
    uri = config_from_dict({**base, "checkpoint": f"file://{tmp_path}/ck"}, tmp_path / "job.yaml")
    assert uri.checkpoint == f"file://{tmp_path}/ck"
    assert stop_file(uri) == f"{tmp_path}/ck/STOPPING"


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="unknown key\\(s\\): trigger_interval"):
        config_from_dict({"kafka": {"bootstrap.servers": "x"}, "trigger_interval": 1})
    with pytest.raises(ConfigError, match="source: unknown key\\(s\\): max_records"):
        config_from_dict({"kafka": {"bootstrap.servers": "x"}, "source": {"max_records": 1}})
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        config_from_dict({"kafka": {}})


def test_topology_md_is_current():
    cfg = load_config(ROOT / "topology" / "local.yaml")
    rules = load_rules(cfg.rules, cfg.query_config).rules
    rendered = describe(cfg, rules)
    assert (ROOT / "topology" / "TOPOLOGY.md").read_text() == rendered, (
        "run: l2m topology --config topology/local.yaml --write topology/TOPOLOGY.md")


def test_preaggregate_reduces_rows_with_exact_sums():
    d = decimal.Decimal
    rows = pa.table({
        "rule": ["r", "r", "r", "r", "s", "c"],
        "series": ["1:1", "1:1", "1:1", "1:2", "", ""],
        "le": [None, None, None, None, "+Inf", None],
        "window": [60_000, 60_000, 60_000, 60_000, 0, None],
        "ts": [61_000, 62_000, None, 70_000, 5, 9],
        "v": [0.1, 0.2, None, 1e30, 3.0, 1.0],
    }, schema=MATCH_SCHEMA)
    out = preaggregate(rows, {"r", "s"}).to_pylist()
    out.sort(key=lambda r: (r["rule"], r["series"]))
    assert [(r["rule"], r["series"], r["matches"], r["n"], r["exact_n"], r["ts"])
            for r in out] == [("c", "", 1, 1, 0, 9), ("r", "1:1", 3, 2, 2, 62_000),
                              ("r", "1:2", 1, 1, 0, 70_000), ("s", "", 1, 1, 1, 5)]
    assert out[1]["exact_sum"] == d("0.3")
    assert out[2]["sum"] == 1e30 and out[2]["exact_sum"] is None
    # Partials merge: sums add exactly, an unknown exact sum stays unknown.
    twice = merge([preaggregate(rows, {"r", "s"}), preaggregate(rows, {"r", "s"})]).to_pylist()
    twice.sort(key=lambda r: (r["rule"], r["series"]))
    assert [(r["matches"], r["n"], r["exact_n"]) for r in twice] == [
        (2, 2, 0), (6, 4, 4), (2, 2, 0), (2, 2, 2)]
    assert twice[1]["exact_sum"] == d("0.6") and twice[1]["ts"] == 62_000


@pytest.mark.parametrize(("text", "where", "problem"), [
    ("counter_shards: abc\n", ":2: counter_shards: ", "expected an integer, got string 'abc'"),
    ("counter_shards: 0\n", ":2: counter_shards: ", "must be at least 1"),
    ("source:\n  max_records_per_task: x\n", ":3: source.max_records_per_task: ",
     "expected an integer"),
    ("source:\n  fail_on_data_loss: maybe\n", ":3: source.fail_on_data_loss: ",
     "expected true or false"),
    ("source:\n  planner: fast\n", ":3: source.planner: ", "expected balanced or partition"),
    ("trigger: 5 parsecs\n", ":2: trigger: ", "is not a duration"),
    ("text_fields: {a: 1}\n", ":2: text_fields: ", "expected a list of strings"),
    ("spark: [1, 2]\n", ":2: spark: ", "expected a mapping"),
])
def test_values_are_checked_by_type_with_the_keys_line(tmp_path, text, where, problem):
    path = tmp_path / "job.yaml"
    path.write_text('kafka: {bootstrap.servers: "x:1"}\n' + text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.code == "CONFIG"
    assert str(err.value).startswith(f"{path}{where}")
    assert problem in str(err.value)


SECRET = "hunter2-Zq9"


@pytest.mark.parametrize("broken", [
    f"  sasl.password: {SECRET} : oops\n",        # a syntax error on the secret's line
    f"  sasl.password: '{SECRET}\n",              # an unterminated quote
    f"  sasl.password: [{SECRET}]\n",             # a list where a string belongs
    f"  sasl.password: !!int {SECRET}\n",         # a bad typed value
    f"  sasl.password: {{x: {SECRET}}}\n",        # a mapping
])
def test_secrets_are_never_printed_even_when_the_yaml_around_them_is_broken(tmp_path, broken):
    path = tmp_path / "job.yaml"
    path.write_text("kafka:\n  bootstrap.servers: x:1\n" + broken + "trigger: 5s\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert SECRET not in str(err.value)
    assert str(err.value).startswith(f"{path}:3") or "at line 3" in str(err.value)


def test_client_booleans_are_spelled_as_librdkafka_expects(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("kafka: {bootstrap.servers: 'x:1', enable.ssl.certificate.verification: "
                    "false}\nsource: {starting_offsets: {'0': 5, '1': -2}}\n")
    cfg = load_config(path)
    assert cfg.kafka["enable.ssl.certificate.verification"] == "false"
    assert cfg.source.starting_offsets == '{"0": 5, "1": -2}'




@pytest.mark.parametrize(("text", "where"), [
    (KAFKA + "trigger: .inf\n", "job.yaml:3: trigger: "),          # was an OverflowError
    (KAFKA + "trigger: .nan\n", "job.yaml:3: trigger: "),          # was a ValueError
    (KAFKA + "grace: -5\n", "job.yaml:3: grace: "),                # was -5000 ms
    (KAFKA + "counter_ttl: 99999999999999999999 days\n", "job.yaml:3: counter_ttl: "),
    (KAFKA + "counter_shards: 99999999999\n", "job.yaml:3: counter_shards: "),
    (KAFKA + "counter_shards: '²'\n", "job.yaml:3: counter_shards: "),  # was a ValueError
    (KAFKA + "source:\n  max_records_per_task: false\n",          # was "no limit"
     "job.yaml:4: source.max_records_per_task: "),
    *[(KAFKA + f"source:\n  starting_offsets: {bad}\n", "job.yaml:4: source.starting_offsets: ")
      for bad in ("sometimes", "{0: abc}", "'{\"x\": 1}'", "{0: -3}", "{0: true}", "[0]")],
    (KAFKA + "rules: []\n", "job.yaml:3: rules: "),
    (KAFKA + "trigger: 5s\ngrace: 1m\ntrigger: 6s\n", "job.yaml:5:1: "),  # the last won
    (KAFKA + "source: {planner: partition}\nsource: {group_id: l2m}\n", "job.yaml:4:1: "),
    (KAFKA + "spark: " + "[" * 100 + "]" * 100 + "\n", "job.yaml:3:71: "),  # nesting > 64
    (KAFKA + "trigger: 5s\x07\n", "job.yaml:3:12: "),                # was job.yaml:1:1
])
def test_every_value_is_checked_with_its_position(tmp_path, text, where):
    assert config_error(tmp_path, text).startswith(where)


def test_valid_starting_offsets(tmp_path):
    path = tmp_path / "job.yaml"
    for written, spec in [("earliest", "earliest"), ("{0: 5, 1: -1}", '{"0": 5, "1": -1}'),
                          ("'{\"logs\": {\"0\": -2}}'", '{"logs": {"0": -2}}')]:
        path.write_text(f"{KAFKA}source: {{starting_offsets: {written}}}\n")
        assert load_config(path).source.starting_offsets == spec


def test_merge_keys_work_as_in_yaml_safe_load(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("kafka: &client\n  bootstrap.servers: x:1\n  client.id: l2m\n"
                    "sink_kafka:\n  <<: *client\n  client.id: l2m-sink\n  acks: all\n")
    cfg = load_config(path)
    assert cfg.sink_kafka == {"bootstrap.servers": "x:1", "client.id": "l2m-sink", "acks": "all"}


def test_a_plain_equals_sign_is_a_string(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA + "  sasl.oauthbearer.config: =\n")
    assert load_config(path).kafka["sasl.oauthbearer.config"] == "="


@pytest.mark.parametrize(("broken", "where"), [
    (f"  ? [{SECRET}]\n  : 1\n", "job.yaml:3:5: "),                # was PyYAML's own message
    (f"  sasl.password: *{SECRET}\n", "job.yaml:3:18: "),          # an undefined alias
    (f"  sasl.password: !{SECRET}\n", "job.yaml:3:18: "),          # a tag, to YAML
    (f"  sasl.password: !!{SECRET} x\n", "job.yaml:3:18: "),
    (f"  sasl.password: &a x\n  sasl.username: *{SECRET}\n", "job.yaml:4:18: "),
    ("  <<: 5\n", "job.yaml:3:7: "),                                # a merge of a scalar
])
def test_yaml_names_that_may_be_secrets_are_never_printed(tmp_path, broken, where):
    message = config_error(tmp_path, KAFKA + broken)
    assert message.startswith(where)
    assert SECRET not in message


def test_a_setting_typed_without_its_colon_is_not_printed(tmp_path):
    # in a flow mapping `sasl.password s3cret` is a key without a value
    message = config_error(tmp_path, f"kafka: {{bootstrap.servers: 'x:1', "
                                     f"sasl.password {SECRET}}}\n")
    assert message.startswith("job.yaml:1: kafka") and SECRET not in message
