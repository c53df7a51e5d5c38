"""`l2m load`'s arguments: every bad one is refused before any connection with one line,
``l2m load: … [CONFIG]``, exit 2 (argparse's own errors too); good ones become the load's
spec, with the client settings and topics of --config."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from l2m.cli import _load_plan, build_parser, main
from l2m.dev.skew import Skew

GOOD = ["--bootstrap", "127.0.0.1:9092", "--rate", "100", "--logs", "50"]
SKEW = "expected uniform, hot:SHARE (0 < SHARE < 1) or zipf:S (0 < S <= 100)"


@pytest.mark.parametrize("argv, line", [
    ([], "the following arguments are required: --rate"),
    (["--rate", "10", "--bootstrap", "a:1"], "one of the arguments --duration --logs is required"),
    (["--rate", "0", "--logs", "5"],
     "--rate: expected logs per second, above 0 and at most 10,000,000, got '0'"),
    (["--rate", "fast", "--logs", "5"],
     "--rate: expected logs per second, above 0 and at most 10,000,000, got 'fast'"),
    (["--rate", "nan", "--logs", "5"],
     "--rate: expected logs per second, above 0 and at most 10,000,000, got 'nan'"),
    (["--rate", "inf", "--logs", "5"],
     "--rate: expected logs per second, above 0 and at most 10,000,000, got 'inf'"),
    (["--rate", "1e8", "--logs", "5"],
     "--rate: expected logs per second, above 0 and at most 10,000,000, got '1e8'"),
    (["--rate", "10", "--logs", "5", "--duration", "2s"],
     "--duration: not allowed with argument --logs"),
    (["--rate", "10", "--logs", "0"], "--logs: expected a whole number of logs, at least 1, "
                                      "got '0'"),
    (["--rate", "10", "--logs", "2.5"], "--logs: expected a whole number of logs, at least 1, "
                                        "got '2.5'"),
    (["--rate", "10", "--duration", "0s"],
     "--duration: expected a duration above 0 (e.g. '20s', '5 minutes'), got '0s'"),
    (["--rate", "10", "--duration", "soon"],
     "--duration: 'soon' is not a duration (e.g. '5 seconds', '20 minutes')"),
    (["--rate", "10", "--duration", "200 years"], "--duration: '200 years' is not a duration "
                                                  "(e.g. '5 seconds', '20 minutes')"),
    (["--rate", "10", "--logs", "5"],
     "--bootstrap HOST:PORT or --config JOB.yaml is needed: where to send the logs"),
    ([*GOOD, "--bootstrap", "kafka"],
     "--bootstrap: expected HOST:PORT[,HOST:PORT...], got 'kafka'"),
    ([*GOOD, "--bootstrap", "a:1,b:99999"],
     "--bootstrap: expected HOST:PORT[,HOST:PORT...], got 'a:1,b:99999'"),
    ([*GOOD, "--topic", ""],
     "--topic: '' is not a Kafka topic name (1 to 249 letters, digits, '.', '_' or '-')"),
    ([*GOOD, "--topic", "lögs"],
     "--topic: 'lögs' is not a Kafka topic name (1 to 249 letters, digits, '.', '_' or '-')"),
    ([*GOOD, "--topic", "a\x00b"],
     "--topic: 'a\\x00b' is not a Kafka topic name (1 to 249 letters, digits, '.', '_' or '-')"),
    ([*GOOD, "--topic", "x" * 250], f"--topic: '{'x' * 250}' is not a Kafka topic name (1 to "
                                    "249 letters, digits, '.', '_' or '-')"),
    ([*GOOD, "--skew", "hot:1"], f"--skew: {SKEW}, got 'hot:1'"),
    ([*GOOD, "--skew", "zipf:0"], f"--skew: {SKEW}, got 'zipf:0'"),
    ([*GOOD, "--skew", "hotspot"], f"--skew: {SKEW}, got 'hotspot'"),
    ([*GOOD, "--partitions", "0"],
     "--partitions: expected a whole number of partitions, at least 1, got '0'"),
    ([*GOOD, "--accounts", "-1"],
     "--accounts: expected a whole number of accounts from 0 to 1,000,000, got '-1'"),
    ([*GOOD, "--late-share", "1.5"], "--late-share: expected a share from 0 to 1, got '1.5'"),
    ([*GOOD, "--malformed-share", "-0.1"],
     "--malformed-share: expected a share from 0 to 1, got '-0.1'"),
    ([*GOOD, "--late-share", "0.6", "--malformed-share", "0.5"],
     "--late-share and --malformed-share add up to more than 1"),
    ([*GOOD, "--processes", "0"],
     "--processes: expected a whole number of processes from 1 to 64, got '0'"),
    ([*GOOD, "--processes", "65"],
     "--processes: expected a whole number of processes from 1 to 64, got '65'"),
    (["--bootstrap", "a:1", "--rate", "10", "--logs", "3", "--processes", "4"],
     "--processes 4: more processes than the 3 log(s) to send"),
    ([*GOOD, "--seed", "-1"], "--seed: expected a whole number from 0 to 4294967295, got '-1'"),
    ([*GOOD, "--watch"], "--watch needs the metrics topic (--watch TOPIC), or --config whose "
                         "topics.metrics it reads"),
    ([*GOOD, "--watch", "metrics topic"], "--watch: 'metrics topic' is not a Kafka topic name "
                                          "(1 to 249 letters, digits, '.', '_' or '-')"),
    ([*GOOD, "--prometheus", "ftp://prom"],
     "--prometheus: 'ftp://prom' is not an http(s) URL with a host"),
    ([*GOOD, "--prometheus", "http://"], "--prometheus: 'http://' is not an http(s) URL with "
                                         "a host"),
    ([*GOOD, "--plot", "/no/such/folder/load.png"],
     "--plot: no directory '/no/such/folder' to write 'load.png' in"),
    ([*GOOD, "--skew=uniform", "--verbose"], "unrecognized arguments: --verbose"),
    ([*GOOD, "--drain", "0s"],
     "--drain: expected a duration above 0 (e.g. '20s', '5 minutes'), got '0s'"),
    ([*GOOD, "--config", "/no/such/job.yaml"],
     "/no/such/job.yaml: cannot read: No such file or directory"),
])
def test_a_bad_argument_is_one_line_and_exit_2(argv: list[str], line: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"l2m load: {line} [CONFIG]\n"


def test_plot_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["load", *GOOD, "--plot", "load.png"]) == 2
    assert capsys.readouterr().err == ("l2m load: --plot needs matplotlib: "
                                       "pip install 'l2m[bench]' [CONFIG]\n")


def parsed(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["load", *argv])


def test_good_arguments_make_the_spec() -> None:
    spec, sink, watch = _load_plan(parsed([
        "--bootstrap", "k1:9092, k2:9093", "--rate", "2000", "--duration", "20s",
        "--skew", "hot:0.7", "--partitions", "3", "--accounts", "40", "--late-share", "0.1",
        "--malformed-share", "0.01", "--processes", "2", "--seed", "9", "--watch", "m"]))
    assert spec.kafka == {"bootstrap.servers": "k1:9092,k2:9093"}
    assert sink == spec.kafka
    assert (spec.topic, spec.rate, spec.duration_s, spec.logs, spec.total) == (
        "logs", 2000.0, 20.0, None, 40_000)
    assert (spec.skew, spec.partitions, spec.accounts, spec.late_share, spec.malformed_share,
            spec.processes, spec.seed) == (Skew("hot", hot_share=0.7), 3, 40, 0.1, 0.01, 2, 9)
    assert watch == "m"
    spec, _, watch = _load_plan(parsed(GOOD))
    assert (spec.skew, spec.logs, spec.processes, watch) == (Skew(), 50, 1, None)


def test_config_gives_client_settings_and_topics(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("kafka:\n  bootstrap.servers: broker:9093\n  security.protocol: SASL_SSL\n"
                   "  sasl.mechanism: PLAIN\n  sasl.username: load\n  sasl.password: s3cret\n"
                   "sink_kafka: {bootstrap.servers: other:9094}\n"
                   "topics: {logs: in-logs, metrics: out-metrics}\n")
    spec, sink, watch = _load_plan(parsed(["--config", str(job), "--rate", "5", "--logs", "5",
                                           "--watch"]))
    assert spec.kafka["sasl.password"] == "s3cret"
    assert spec.kafka["bootstrap.servers"] == "broker:9093"
    assert sink["bootstrap.servers"] == "other:9094"  # the metrics side, as l2m run's sink
    assert (spec.topic, watch) == ("in-logs", "out-metrics")
    spec, _, _ = _load_plan(parsed(["--config", str(job), "--bootstrap", "local:1",
                                    "--topic", "t", "--rate", "5", "--logs", "5"]))
    assert (spec.kafka["bootstrap.servers"], spec.topic) == ("local:1", "t")


def test_a_bad_config_is_one_line_without_its_secrets(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("kafka:\n  bootstrap.servers: broker:9093\n  sasl.password: [s3cret]\n")
    assert main(["load", "--config", str(job), "--rate", "5", "--logs", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("l2m load: ") and err.endswith(" [CONFIG]\n")
    assert err.count("\n") == 1 and "s3cret" not in err


def test_a_run_prints_the_report_and_a_failed_delivery_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from l2m.dev import loadgen

    given = []

    def fake_run(spec: loadgen.LoadSpec, progress: object = None) -> loadgen.LoadSummary:
        given.append(spec)
        return loadgen.LoadSummary("logs", 100.0, 2, 1, Skew(), 1_800_000_000.0, 0.5,
                                   50 - failed, failed, [25, 25],
                                   [(1_800_000_000.0, 0), (1_800_000_000.5, 50)])

    monkeypatch.setattr(loadgen, "run_load", fake_run)
    failed = 0
    assert main(["load", *GOOD, "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert (doc["sent"], doc["partition_counts"], doc["watch"]) == (50, [25, 25], None)
    assert err.startswith("l2m load: 100 logs/s, 50 logs → topic logs on 127.0.0.1:9092, "
                          "skew uniform, 1 process(es)\n")
    assert given[0].total == 50
    failed = 3
    assert main(["load", *GOOD]) == 1
    assert capsys.readouterr().err.endswith(
        "l2m load: 3 log(s) were not delivered to Kafka\n")


def test_the_drain_is_a_duration_above_zero():
    from l2m.cli import build_parser

    args = build_parser().parse_args(["load", "--bootstrap", "127.0.0.1:9092", "--rate", "10",
                                      "--logs", "5", "--drain", "15s"])
    assert args.drain == 15.0
    assert build_parser().parse_args(["load", "--bootstrap", "127.0.0.1:9092", "--rate", "10",
                                      "--logs", "5"]).drain == 60.0
