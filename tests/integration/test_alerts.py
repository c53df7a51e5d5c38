"""The monitoring files in k8s/monitoring (no JVM, a few seconds): the Prometheus rules pass
``promtool check rules`` and their unit tests (``promtool test rules``); every metric the rules
and the Grafana dashboard query is in the contract (docs/metrics.md), is ``up`` or is one of the
recording rules; the PrometheusRule holds exactly the rules file's groups and fits the fields
of prometheus-operator's CRD; every alert is labelled and annotated; the dashboard is a
Grafana dashboard whose every panel queries a datasource; ``kubectl kustomize`` builds it all."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "k8s" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DOCS = ROOT / "docs" / "metrics.md"


def run(*cmd: str, cwd: Path = MONITORING) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def groups() -> list[dict[str, Any]]:
    return yaml.safe_load(ALERTS.read_text())["groups"]


def rules() -> list[dict[str, Any]]:
    return [rule for group in groups() for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "dashboard.json").read_text())


# -- the contract ------------------------------------------------------------------------------

def documented() -> dict[str, str]:
    """Metric name → type (counter, gauge, histogram) from docs/metrics.md's tables. A cell
    ``\\`l2m_x_max\\` / \\`_mean\\``` names l2m_x_max and l2m_x_mean."""
    metrics: dict[str, str] = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`l2m_"):
            continue
        kind = cells[1].split(",")[0].strip()
        assert kind in {"counter", "gauge", "histogram"}, line
        previous = ""
        for name in re.findall(r"`([a-z0-9_]+)`", cells[0]):
            if name.startswith("_"):
                name = previous.rsplit("_", 1)[0] + name
            metrics[name] = kind
            previous = name
    return metrics


def exposed_names(metrics: dict[str, str]) -> set[str]:
    """The series names those metrics are exposed as."""
    names = set()
    for name, kind in metrics.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "counter":
            names |= {name, name.removesuffix("_total") + "_created"}
        else:
            names.add(name)
    return names


def test_the_contract_is_parsed() -> None:
    metrics = documented()
    assert metrics["l2m_batch_duration_seconds"] == "histogram"
    assert metrics["l2m_input_logs_total"] == "counter"
    assert metrics["l2m_batch_executor_records_mean"] == "gauge"
    assert metrics["l2m_batch_executor_tasks_mean"] == "gauge"
    assert len(metrics) > 35


# -- PromQL names ------------------------------------------------------------------------------

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    aggregations, keywords, label names (in braces and grouping clauses), durations, or parts
    of strings and numbers. Grafana's variables sit in strings and ranges."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ",
                  text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def test_metric_names_are_found() -> None:
    assert metric_names(
        'sum by (namespace, job) (rate(l2m_late_logs_total{pod=~"$pod"}[$__rate_interval]))'
        ' / ignoring (reason) group_left up{job="l2m"} > 1e9 and x offset 10m'
        ' or histogram_quantile(0.5, sum by (le) (rate(a:b_bucket[5m])))'
    ) == {"l2m_late_logs_total", "up", "x", "a:b_bucket"}


def dashboard_exprs() -> Iterator[str]:
    board = dashboard()
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(selector, label): the selector is PromQL.
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["definition"])
            assert inner, variable["definition"]
            yield inner.group(1)


def test_every_metric_queried_is_in_the_contract() -> None:
    known = exposed_names(documented()) | {"up"} | {r["record"] for r in rules() if "record" in r}
    used = {}
    for rule in rules():
        for name in metric_names(str(rule["expr"])):
            used.setdefault(name, f"alerts.yaml: {rule.get('alert') or rule.get('record')}")
    for expr in dashboard_exprs():
        for name in metric_names(expr):
            used.setdefault(name, f"dashboard.json: {expr}")
    unknown = {name: where for name, where in used.items() if name not in known}
    assert not unknown, f"not in docs/metrics.md, not up, not a recording rule: {unknown}"
    # Only the driver's own l2m_ metrics (and up), never Spark's (namespace l2m, "l2m_driver_…").
    assert all(n == "up" or n.startswith(("l2m_", "l2m:")) or ":l2m_" in n for n in used)


def recorded_telemetry() -> Any:
    """The driver's metrics (in process, no JVM) after a recorded batch, a sink failure and a
    restart: every family has samples."""
    from l2m.runtime.sparkstatus import ExecutorLoad
    from l2m.runtime.telemetry import Telemetry
    from l2m.state.tally import (
        InputCount,
        LateCount,
        MatchCount,
        RefusedCount,
        SampleCount,
        SeriesCount,
    )
    from tests.unit.runtime.test_telemetry import CFG, PROGRESS, RULES, counts

    t = Telemetry(CFG, RULES)
    t.started(counts(100, 10, {MatchCount("a"): 60},
                     {InputCount("ok"): 48, InputCount("malformed"): 2, LateCount(): 3,
                      SeriesCount("a", 0, -1): 4},
                     {RefusedCount("a", "acme", "rule"): 2, SampleCount("a"): 5}))
    t.batch(PROGRESS, {"1": ExecutorLoad(3, 1000), "2": ExecutorLoad(1, 500)}, registered=2)
    t.failed_batch("SINK")
    t.restarted("SINK")
    from l2m.runtime.reload import ReloadStatus

    t.reload = ReloadStatus(version="0123456789abcdef", loaded_at=1.7e9, rules=2, successes=1,
                            failures=1, last_ok=False, last_at=1.7e9)  # live rules: refused
    return t


def recorded_delivery() -> Any:
    """``l2m deliver``'s metrics (in process, no broker) after an endpoint sent, was refused,
    retried, skipped and dropped corrections: every family has samples."""
    from dataclasses import dataclass, field

    from l2m.remotewrite.outbox import NOT_FINAL, Tally
    from l2m.runtime.delivermetrics import DeliveryTelemetry

    @dataclass
    class Loop:
        name: str
        tally: Tally = field(default_factory=Tally)
        ready: bool = True

        def healthy(self) -> bool:
            return True

    loop = Loop("mimir")
    loop.tally.accept(100)
    loop.tally.refuse("too_old", "acme", 2)
    loop.tally.skip(NOT_FINAL, 3)
    loop.tally.correct("cpu")
    loop.tally.answered(204, 1_700_000_000.0)
    loop.tally.answered(400, 1_700_000_000.0)
    loop.tally.retried()
    loop.tally.auth_failed()
    loop.tally.failed("RuntimeError")
    loop.tally.set_lag(5)
    return DeliveryTelemetry([loop], top=20)


def test_the_driver_exposes_every_metric_queried() -> None:
    """Beyond the document: the names (and the labels grouped by) are what the driver's
    /metrics really says, after a batch, a restart and a sink failure — and, for the remote
    write metrics, what l2m deliver's says."""
    from prometheus_client import generate_latest

    t = recorded_telemetry()
    exposition = generate_latest(t.registry).decode() + \
        generate_latest(recorded_delivery().registry).decode()
    series = {line.split("{")[0].split(" ")[0]: line for line in exposition.splitlines()
              if line and not line.startswith("#")}
    recorded = {r["record"] for r in rules() if "record" in r}
    used = set()
    for expr in [str(r["expr"]) for r in rules()] + list(dashboard_exprs()):
        used |= metric_names(expr)
    assert not {n for n in used - recorded - {"up"} if n not in series}
    for name, label in [("l2m_source_lag_records", "topic"),
                        ("l2m_source_lag_records", "partition"),
                        ("l2m_input_logs_total", "status"), ("l2m_dead_letters_total", "reason"),
                        ("l2m_query_restarts_total", "code"), ("l2m_rule_matches_total", "rule"),
                        ("l2m_rule_series", "rule"), ("l2m_executor_batch_records", "executor"),
                        ("l2m_account_series", "account"),
                        ("l2m_account_series_refused_total", "account"),
                        ("l2m_series_refused_total", "limit"),
                        ("l2m_build_info", "version"),
                        ("l2m_remote_write_samples_refused_total", "tenant"),
                        ("l2m_remote_write_samples_refused_total", "reason"),
                        ("l2m_remote_write_samples_skipped_total", "reason"),
                        ("l2m_remote_write_corrections_dropped_total", "rule"),
                        ("l2m_remote_write_requests_total", "outcome"),
                        ("l2m_remote_write_errors_total", "error"),
                        ("l2m_remote_write_lag_records", "endpoint")]:
        assert f'{label}="' in series[name], (name, label)


def test_the_dashboard_shows_the_whole_contract() -> None:
    used = set()
    for expr in dashboard_exprs():
        used |= metric_names(expr)
    missing = {name for name in documented()
               if not any(n == name or n.startswith(name + "_") for n in used)}
    assert missing == {"l2m_last_batch_id"}, missing


# -- promtool ----------------------------------------------------------------------------------

def test_promtool_checks_the_rules() -> None:
    out = run(tool("promtool"), "check", "rules", str(ALERTS))
    assert "SUCCESS" in out


def test_promtool_unit_tests_pass() -> None:
    out = run(tool("promtool"), "test", "rules", "alerts.test.yaml")
    assert "SUCCESS" in out


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load((MONITORING / "alerts.test.yaml").read_text())["tests"]
    fired, quiet = set(), set()
    for group in tests:
        for case in group.get("alert_rule_test", []):
            if case["exp_alerts"]:
                fired.add(case["alertname"])
                for expected in case["exp_alerts"]:
                    assert set(expected["exp_annotations"]) == {
                        "summary", "description", "runbook_url"}, case["alertname"]
                    assert expected["exp_labels"]["severity"], case["alertname"]
            else:
                quiet.add(case["alertname"])
    names = {a["alert"] for a in alerts()}
    assert fired == names
    assert quiet == names


def test_dashboard_queries_are_promql(tmp_path: Path) -> None:
    """Grafana's variables replaced by what they stand for, every dashboard query parses
    (as the expression of a recording rule, which promtool checks)."""
    exprs = []
    for expr in dashboard_exprs():
        expr = expr.replace("$__rate_interval", "5m").replace("$namespace", ".*")
        exprs.append(expr.replace("$pod", ".*"))
    assert all("$" not in e for e in exprs)
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump({"groups": [{
        "name": "dashboard",
        "rules": [{"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)],
    }]}))
    run(tool("promtool"), "check", "rules", "--lint=none", str(tmp_path / "dashboard-rules.yaml"))


# -- the alerts ---------------------------------------------------------------------------------

def test_every_alert_has_a_severity_summary_description_and_runbook() -> None:
    for alert in alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning"}, name
        assert set(alert["annotations"]) == {"summary", "description", "runbook_url"}, name
        assert alert["annotations"]["runbook_url"] == \
            f"docs/kubernetes.md#alert-{name.lower()}", name
        assert alert.get("for"), name


def test_the_alerts_the_issue_asks_for() -> None:
    names = {a["alert"] for a in alerts()}
    assert names == {
        "L2mDriverDown", "L2mDriverAbsent", "L2mNoProgress", "L2mLagGrowing",
        "L2mBatchSlowerThanTrigger", "L2mDeadLetterRateHigh", "L2mLateLogsDropped",
        "L2mExecutorsBelowMinimum", "L2mExecutorImbalance", "L2mQueryRestarting",
        "L2mSinkFailing", "L2mTenantOverSeriesLimit", "L2mRemoteWriteStalled",
        "L2mRemoteWriteRefused", "L2mRemoteWriteCorrectionsDropped",
        "L2mRulesReloadRefused", "L2mDeliverDown", "L2mRemoteWriteAuthFailing"}


# -- PrometheusRule -----------------------------------------------------------------------------

# The fields this PrometheusRule uses, as prometheus-operator's CRD (monitoring.coreos.com_
# prometheusrules.yaml, operator 0.82) defines them; unknown fields are refused, as a strict
# validation would.
DURATION = (r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
            r"(([0-9]+)ms)?)$")
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name"], "additionalProperties": False,
                     "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                                    "labels": STRINGS, "annotations": STRINGS}},
        "spec": {"type": "object", "additionalProperties": False, "properties": {"groups": {
            "type": "array",
            "items": {"type": "object", "required": ["name"], "additionalProperties": False,
                      "properties": {
                          "name": {"type": "string", "minLength": 1},
                          "interval": {"type": "string", "pattern": DURATION},
                          "rules": {"type": "array", "items": {
                              "type": "object", "required": ["expr"],
                              "additionalProperties": False,
                              "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                              "properties": {
                                  "alert": {"type": "string"},
                                  "record": {"type": "string"},
                                  "expr": {"type": ["string", "integer"]},
                                  "for": {"type": "string", "pattern": DURATION},
                                  "labels": STRINGS,
                                  "annotations": STRINGS}}}}}}}},
    },
}


def prometheus_rule() -> dict[str, Any]:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())


def test_the_prometheus_rule_holds_exactly_the_rules_file() -> None:
    rule = prometheus_rule()
    assert rule["spec"]["groups"] == groups()
    jsonschema.validate(rule, PROMETHEUS_RULE)
    assert rule["metadata"]["labels"]["release"] == "prometheus"


def test_generated_files_are_up_to_date() -> None:
    run(sys.executable, str(MONITORING / "render.py"), "--check")


# -- Grafana ------------------------------------------------------------------------------------

def test_the_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert 36 <= board["schemaVersion"] <= 41
    assert board["uid"] == "l2m"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "pod"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Throughput", "Batches", "Kafka lag", "Executor balance",
                    "Event time", "Late and dead-lettered logs", "Failures and restarts",
                    "State", "Rules", "Tenants", "Remote write"]
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, \
            panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"] and target["refId"], panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            selected = [m for m in re.finditer(r"\bl2m_\w+|\bup\b", target["expr"])]
            # Every metric selection is narrowed by the namespace and pod variables.
            for m in selected:
                rest = target["expr"][m.end():]
                assert rest.startswith("{") and '$namespace' in rest.split("}")[0] \
                    and "$pod" in rest.split("}")[0], (panel["title"], target["expr"])


def test_no_panels_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]


# -- kustomize ----------------------------------------------------------------------------------

def test_kustomize_builds_the_rule_and_the_dashboard_config_map() -> None:
    built = list(yaml.safe_load_all(run(tool("kubectl"), "kustomize", str(MONITORING))))
    kinds = {doc["kind"]: doc for doc in built}
    assert set(kinds) == {"PrometheusRule", "ConfigMap"}
    assert kinds["PrometheusRule"] == prometheus_rule()
    config_map = kinds["ConfigMap"]
    assert config_map["metadata"]["name"] == "l2m-grafana-dashboard"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["l2m.json"]) == dashboard()


def test_the_config_map_validates() -> None:
    import kubernetes_validate

    built = [doc for doc in yaml.safe_load_all(run(tool("kubectl"), "kustomize",
                                                   str(MONITORING)))
             if doc["kind"] == "ConfigMap"]
    assert built
    for doc in built:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


# -- a real Prometheus ---------------------------------------------------------------------------

def test_a_real_prometheus_loads_the_rules_and_answers_every_dashboard_query(
        tmp_path: Path) -> None:
    """The driver's endpoint (in process, fed a recorded batch: no JVM) scraped by a real
    Prometheus every second with job="l2m", and l2m deliver's (recorded tallies) with
    job="l2m-deliver", the rules loaded: every rule evaluates without error, and every
    dashboard query (Grafana's variables filled in) returns series."""
    import socket
    import time
    import urllib.parse
    import urllib.request

    from l2m.runtime.endpoint import Endpoint

    def get(base: str, path: str, **params: str) -> Any:
        url = f"{base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())["data"]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        prom_port = s.getsockname()[1]
    t = recorded_telemetry()
    with Endpoint(t, "127.0.0.1", 0) as endpoint, \
            Endpoint(recorded_delivery(), "127.0.0.1", 0) as delivery:
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": "l2m", "static_configs": [
                    {"targets": [f"127.0.0.1:{endpoint.port}"]}]},
                {"job_name": "l2m-deliver", "static_configs": [
                    {"targets": [f"127.0.0.1:{delivery.port}"]}]}]}))
        prometheus = subprocess.Popen(
            [tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{prom_port}"
        try:
            deadline = time.monotonic() + 60
            while True:  # two scrapes (for rates), and the rules evaluated on them
                try:
                    scrapes = get(base, "/api/v1/query",
                                  query="count_over_time(up[1m])")["result"]
                    recorded = get(base, "/api/v1/query",
                                   query="namespace_job_topic:l2m_source_lag_records:sum"
                                   )["result"]
                except OSError:
                    scrapes, recorded = [], []
                if len(scrapes) == 2 and recorded and \
                        all(float(x["value"][1]) >= 2 for x in scrapes):
                    break
                assert time.monotonic() < deadline, "Prometheus did not scrape and evaluate"
                time.sleep(0.2)
            evaluated = [r for g in get(base, "/api/v1/rules")["groups"] for r in g["rules"]]
            assert len(evaluated) == len(rules())
            assert all(r["health"] == "ok" for r in evaluated), \
                [(r["name"], r.get("lastError")) for r in evaluated if r["health"] != "ok"]
            empty = []
            for expr in dashboard_exprs():
                expr = (expr.replace("$__rate_interval", "1m").replace("$namespace", ".*")
                        .replace("$pod", ".*"))
                if not get(base, "/api/v1/query", query=expr)["result"]:
                    empty.append(expr)
            assert not empty
            # The recording rules hold what they say, on the driver's own series.
            assert [(x["metric"], x["value"][1]) for x in recorded] == [
                ({"__name__": "namespace_job_topic:l2m_source_lag_records:sum", "job": "l2m",
                  "topic": "logs"}, "200")]
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=30)
