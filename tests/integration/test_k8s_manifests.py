"""The Kubernetes deployment in k8s/ (no JVM, no cluster, no container runtime; seconds):
``kubectl kustomize`` builds both overlays and the operator variant; every built-in object
passes ``kubernetes-validate --strict`` for the Kubernetes version of the kubectl in use (1.32)
and the newest the package knows, pod templates included; the custom resources fit the
schemas in k8s/schemas; the ConfigMaps hold exactly rules/ and topology/kubernetes.yaml; the
configuration loads with l2m's own loader in the driver pod's file layout with the environment
the pod gets, and uses no variable the pod does not set; the driver Deployment keeps its
promises (one replica, Recreate, the grace period, probes on l2m's endpoints, a restricted
securityContext, the config path); the executor pod template mounts the checkpoint where the
driver does; a rule change renames the rules ConfigMap (and so rolls the driver); the image's
Dockerfile lints clean and each of its install scripts runs here; the `l2m load` Job
(k8s/load) validates the same way, reads Kafka as the driver does and leaves the rules alone."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from l2m.cli import build_parser
from l2m.config.job import JobConfig
from l2m.config.loader import load_config
from l2m.rules.loader import is_rule_file, load_rules
from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
SCRIPTS = K8S / "scripts"
SCHEMAS = K8S / "schemas"
CONFIG = ROOT / "topology" / "kubernetes.yaml"
RULES = ROOT / "rules"
BUILDS = {"dev": K8S / "overlays" / "dev", "prod": K8S / "overlays" / "prod",
          "operator": K8S / "operator"}
# Not a deployment of the job: the `l2m load` Job run next to one (docs/load-testing.md).
LOAD = K8S / "load"
DEPLOYMENTS = ("dev", "prod")
# The Kubernetes versions the built-in objects are validated for: the kubectl here and in CI
# (1.32), and the newest kubernetes-validate ships schemas for.
K8S_VERSIONS = sorted({"1.32.0", kubernetes_validate.latest_version()})
CUSTOM = {"SparkApplication": "sparkapplication", "PodMonitor": "podmonitor",
          "PrometheusRule": "prometheusrule"}
CONFIG_PATH = "/etc/l2m/topology/kubernetes.yaml"
ENTRYPOINT = "/opt/l2m/bin/spark-entrypoint.sh"
UID = 185
# l2m/runtime/runner.py, Runner._shutdown: how long a graceful stop waits for the batch in flight.
L2M_STOP_DEADLINE_S = 120
# Fake values for what the API server fills in.
POD_NAME, POD_IP = "l2m-driver-5d8f7c9b4-x2x7q", "10.1.2.3"


# -- building -----------------------------------------------------------------------------------

def kustomize(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run([tool("kubectl"), "kustomize", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {path}:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@functools.cache
def built(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(kustomize(LOAD if name == "load" else BUILDS[name]))


def objects(name: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in built(name) if o["kind"] == kind]


def one(name: str, kind: str, prefix: str | None = None) -> dict[str, Any]:
    found = [o for o in objects(name, kind)
             if prefix is None or o["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, f"{name}: {len(found)} {kind} {prefix or ''}"
    return found[0]


# ConfigMaps named as generated, without a hash suffix: the rules, updated in place (live).
FIXED_NAMES = {"l2m-rules"}


def configmap(name: str, generator: str) -> dict[str, Any]:
    suffix = "" if generator in FIXED_NAMES else "-[a-z0-9]{10}"
    found = [o for o in objects(name, "ConfigMap")
             if re.fullmatch(rf"{generator}{suffix}", o["metadata"]["name"])]
    assert len(found) == 1, f"{name}: the ConfigMap {generator}" + \
        ("" if generator in FIXED_NAMES else " (with its hash suffix)")
    return found[0]


def driver(name: str) -> dict[str, Any]:
    """The driver pod as the build describes it: its spec, container, arguments, namespace."""
    if name == "operator":
        app = one(name, "SparkApplication")
        spec = app["spec"]["driverSpec"]["podTemplateSpec"]["spec"]
        container = spec["containers"][0]
        return {"spec": spec, "container": container, "args": app["spec"]["driverArgs"],
                "namespace": app["metadata"]["namespace"],
                "labels": app["spec"]["driverSpec"]["podTemplateSpec"]["metadata"]["labels"]}
    deployment = one(name, "Deployment", "l2m-driver")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "l2m"]
    return {"spec": spec, "container": container, "args": container["args"],
            "namespace": deployment["metadata"]["namespace"],
            "labels": deployment["spec"]["template"]["metadata"]["labels"]}


def env_sources(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# Secret values the kubelet would set that must have a shape (a URL is checked at load);
# the others are "secret:<name>/<key>".
SECRET_VALUES = {("l2m-remote-write", "url"): "https://tsdb.example/api/v1/push"}


def pod_env(name: str, pod: dict[str, Any] | None = None) -> dict[str, str]:
    """The driver container's (or ``pod``'s) environment as the kubelet would set it (fake pod
    name, IP, secret values)."""
    d = pod or driver(name)
    env: dict[str, str] = {}
    for var, source in env_sources(d["container"]).items():
        if "value" in source:
            env[var] = source["value"]
            continue
        ref = source["valueFrom"]
        if "fieldRef" in ref:
            env[var] = {"metadata.name": POD_NAME, "metadata.namespace": d["namespace"],
                        "status.podIP": POD_IP}[ref["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in ref:
            secret = (ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"])
            env[var] = SECRET_VALUES.get(secret, f"secret:{secret[0]}/{secret[1]}")
        else:
            raise AssertionError(f"{name}: env {var}: unexpected source {ref}")
    return env


def executor_template(name: str) -> dict[str, Any]:
    data = configmap(name, "l2m-executor-template")["data"]
    assert set(data) == {"pod-template.yaml"}
    return yaml.safe_load(data["pod-template.yaml"])


def config_vars() -> set[str]:
    """The environment variables topology/kubernetes.yaml uses in its values (what l2m's
    loader expands with os.path.expandvars: ``${VAR}`` and ``$VAR``)."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.update(a or b for a, b in re.findall(
                r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(yaml.safe_load(CONFIG.read_text()))
    return found


# -- the driver pod's files, as the kubelet lays them out ----------------------------------------

def materialize(name: str, root: Path, pod: dict[str, Any] | None = None) -> None:
    """Write the driver container's (or ``pod``'s) ConfigMap mounts under ``root``: a subPath
    mount is a plain file; a whole-volume mount is the kubelet's layout (the keys in a
    timestamped folder, ``..data`` a symlink to it, each key a symlink through ``..data``)."""
    d = pod or driver(name)
    volumes = {v["name"]: v for v in d["spec"]["volumes"]}
    maps = {o["metadata"]["name"]: o for o in objects(name, "ConfigMap")}
    for mount in d["container"]["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" not in volume:
            continue
        data = maps[volume["configMap"]["name"]]["data"]
        target = root / mount["mountPath"].lstrip("/")
        if "subPath" in mount:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[mount["subPath"]])
            continue
        stamp = target / "..2026_01_01_00_00_00.000000001"
        stamp.mkdir(parents=True)
        for key, text in data.items():
            (stamp / key).write_text(text)
        (target / "..data").symlink_to(stamp.name)
        for key in data:
            (target / key).symlink_to(f"..data/{key}")


@pytest.fixture
def driver_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A function setting the driver pod's environment of a build (and nothing else that the
    configuration uses)."""
    def apply(name: str) -> dict[str, str]:
        for var in config_vars() | {v for v in os.environ if v.startswith("L2M_")}:
            monkeypatch.delenv(var, raising=False)
        env = pod_env(name)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        return env

    yield apply


def load_in_pod(name: str, root: Path) -> JobConfig:
    materialize(name, root)
    return load_config(root / CONFIG_PATH.lstrip("/"))


# -- the build and the validation ---------------------------------------------------------------

def test_the_configmap_sources_are_in_sync() -> None:
    """k8s/base/common/config holds byte-identical copies of rules/ and the configuration."""
    done = subprocess.run([str(SCRIPTS / "sync-config.sh"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_it_builds_with_no_flags(name: str) -> None:
    kinds = {o["kind"] for o in built(name)}
    common = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy",
              "PodDisruptionBudget", "PodMonitor"}
    assert common <= kinds
    if name == "operator":
        assert {"SparkApplication", "PersistentVolumeClaim"} <= kinds
        assert "Deployment" not in kinds
    else:
        assert {"Namespace", "Deployment", "Service"} <= kinds
        assert ("PersistentVolumeClaim" in kinds) == (name == "dev")
    assert "Secret" not in kinds, "no secret values are shipped"


def pod_templates(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Pod specs inside other objects, as built-in objects to validate."""
    yield "executor template", executor_template(name)
    for app in objects(name, "SparkApplication"):
        for part in ("driverSpec", "executorSpec"):
            if part in app["spec"]:
                yield f"SparkApplication {part}", {
                    "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": part.lower()},
                    "template": app["spec"][part]["podTemplateSpec"]}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_built_in_objects_validate_strictly(name: str, version: str) -> None:
    problems: list[str] = []
    checked = 0
    candidates = [(f"{o['kind']} {o['metadata']['name']}", o) for o in built(name)
                  if o["kind"] not in CUSTOM]
    for where, obj in [*candidates, *pod_templates(name)]:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{where}: neither a built-in kind nor one of k8s/schemas")
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{where}: {invalid(exc)}")
    assert not problems, f"{name}, Kubernetes {version}:\n" + "\n".join(problems)
    assert checked >= 10


def invalid(exc: jsonschema.ValidationError) -> str:
    """Where and what, without the schema jsonschema would print."""
    return f"{'.'.join(map(str, exc.absolute_path)) or '(top)'}: {exc.message}"


def schema(kind: str) -> dict[str, Any]:
    data = json.loads((SCHEMAS / f"{CUSTOM[kind]}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(data)
    assert "Source: github.com/" in data["$comment"], "each schema says where it came from"
    return data


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_custom_resources_fit_their_crd_schemas(name: str) -> None:
    found = [o for o in built(name) if o["kind"] in CUSTOM]
    assert {o["kind"] for o in found} >= ({"PodMonitor", "SparkApplication"}
                                          if name == "operator" else {"PodMonitor"})
    for obj in found:
        jsonschema.validate(obj, schema(obj["kind"]))


def test_the_prometheus_rule_fits_its_crd_schema() -> None:
    rule = yaml.safe_load((K8S / "monitoring" / "prometheusrule.yaml").read_text())
    jsonschema.validate(rule, schema("PrometheusRule"))


def test_the_schemas_refuse_what_the_crds_would() -> None:
    """A typo'd field and a wrong enum are caught, so the schemas are strict enough to matter."""
    app = one("operator", "SparkApplication")
    bad = json.loads(json.dumps(app))
    bad["spec"]["applicationTolerations"]["restartConfig"]["restartPolicy"] = "Forever"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("SparkApplication"))
    bad = json.loads(json.dumps(app))
    bad["spec"]["sparkconf"] = {}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("SparkApplication"))
    monitor = json.loads(json.dumps(one("dev", "PodMonitor")))
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, schema("PodMonitor"))


# -- the ConfigMaps -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_configmaps_hold_the_repository_files_byte_for_byte(name: str) -> None:
    rules = configmap(name, "l2m-rules")
    # The rules' unit tests (*.test.yaml) are not rules: the job never reads them.
    expected = {p.name: p.read_bytes() for p in sorted(RULES.iterdir()) if is_rule_file(p.name)}
    assert expected, "rules/ has rule files"
    assert "binaryData" not in rules
    assert {k: v.encode() for k, v in rules["data"].items()} == expected
    config = configmap(name, "l2m-config")
    assert "binaryData" not in config
    assert {k: v.encode() for k, v in config["data"].items()} == {
        "kubernetes.yaml": CONFIG.read_bytes()}
    # A ConfigMap holds at most 1 MiB.
    for cm in (rules, config):
        assert sum(len(v.encode()) for v in cm["data"].values()) < 1_000_000


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_config_loads_in_the_driver_pod(name: str, tmp_path: Path,
                                            driver_environment: Any) -> None:
    """l2m's own loader, the driver pod's mounts laid out as the kubelet does and its
    environment: the relative `../rules` finds the rules ConfigMap, every rule loads, every
    ${VAR} is set, and the values land where the manifests expect them."""
    env = driver_environment(name)
    missing = config_vars() - set(env)
    assert not missing, f"{name}: the driver pod does not set {sorted(missing)}"
    cfg = load_in_pod(name, tmp_path)

    def unexpanded(value: Any) -> bool:
        return isinstance(value, str) and "$" in value

    values = [*cfg.kafka.values(), *cfg.sink.values(), *cfg.spark.values(), cfg.master,
              *cfg.rules]
    if "://" not in env["L2M_CHECKPOINT"]:
        values.append(cfg.checkpoint)
        assert cfg.checkpoint == env["L2M_CHECKPOINT"]
    assert not [v for v in values if unexpanded(v)]
    assert cfg.rules == (str(tmp_path / "etc/l2m/rules"),)
    loaded = load_rules(cfg.rules, cfg.query_config)
    assert len(loaded.rules) == len(load_rules([str(RULES)], cfg.query_config).rules) > 0
    assert cfg.kafka["sasl.password"] == "secret:l2m-kafka/password"
    spark = cfg.spark
    assert cfg.master == "k8s://https://kubernetes.default.svc"
    assert spark["spark.kubernetes.namespace"] == driver(name)["namespace"]
    assert spark["spark.kubernetes.driver.pod.name"] == POD_NAME
    assert spark["spark.driver.host"] == POD_IP
    assert env["SPARK_LOCAL_IP"] == POD_IP
    assert spark["spark.kubernetes.container.image"] == driver(name)["container"]["image"]
    # The executor template file the configuration names is mounted in the driver.
    template = tmp_path / spark["spark.kubernetes.executor.podTemplateFile"].lstrip("/")
    assert yaml.safe_load(template.read_text()) == executor_template(name)
    # Spark 4.3 builds the executors' driver URL from the bind address unless this is off.
    if spark["spark.driver.bindAddress"] in ("0.0.0.0", "::"):
        assert spark["spark.kubernetes.executor.useDriverPodIP"] == "false"
    assert spark["spark.ui.enabled"] == spark["spark.ui.prometheus.enabled"] == "true"
    assert spark["spark.metrics.namespace"] == "l2m"
    assert spark["spark.metrics.conf.*.sink.prometheusServlet.path"] == "/metrics/prometheus"
    # Least privilege needs these (k8s/base/common/rbac.yaml).
    assert spark["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert spark["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert spark["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert spark["spark.kubernetes.authenticate.executor.serviceAccountName"] == \
        executor_template(name)["spec"]["serviceAccountName"]
    # The driver pod is Ready only once the query runs (its readiness probe is /readyz), so
    # Spark must not wait for it before asking for executors: the wait timed out and logged
    # an ERROR on every start. readinessTimeout cannot be 0; this skips it (Spark 4.3;
    # test_k8s_executors runs a not-Ready driver pod).
    assert driver(name)["container"]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spark["spark.kubernetes.driver.service.publishNotReadyAddresses"] == "true"


def test_the_prod_checkpoint_stays_an_object_store_uri(tmp_path: Path,
                                                      driver_environment: Any) -> None:
    from l2m.streaming.job import stop_file

    env = driver_environment("prod")
    assert env["L2M_CHECKPOINT"].startswith("s3a://")
    cfg = load_in_pod("prod", tmp_path)
    assert cfg.checkpoint == env["L2M_CHECKPOINT"]
    assert Path(stop_file(cfg)).is_absolute() and "s3a:" not in stop_file(cfg)


# -- the driver ---------------------------------------------------------------------------

def restricted(spec: dict[str, Any], container: dict[str, Any], where: str) -> None:
    pod = spec.get("securityContext", {})
    ctx = container.get("securityContext", {})
    assert pod.get("runAsNonRoot") is True and pod.get("runAsUser") == UID, where
    assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}, where
    assert ctx.get("allowPrivilegeEscalation") is False, where
    assert ctx.get("readOnlyRootFilesystem") is True, where
    assert ctx.get("capabilities") == {"drop": ["ALL"]}, where
    assert not ctx.get("privileged"), where
    assert ctx.get("runAsUser", UID) == UID and ctx.get("runAsNonRoot", True) is True, where
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    assert "emptyDir" in volumes[mounts["/tmp"]], f"{where}: a writable /tmp"
    assert spec.get("enableServiceLinks") is False, where


def port(container: dict[str, Any], name_or_number: str | int) -> int:
    if isinstance(name_or_number, int):
        return name_or_number
    (found,) = [p["containerPort"] for p in container["ports"] if p["name"] == name_or_number]
    return found


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_the_driver_deployment_keeps_its_promises(name: str, tmp_path: Path,
                                                  driver_environment: Any) -> None:
    deployment = one(name, "Deployment", "l2m-driver")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    d = driver(name)
    pod, container = d["spec"], d["container"]
    driver_environment(name)
    cfg = load_in_pod(name, tmp_path)
    grace = pod["terminationGracePeriodSeconds"]
    assert grace >= 2 * cfg.trigger_ms / 1000
    assert grace > L2M_STOP_DEADLINE_S, "l2m's own stop deadline, not SIGKILL, ends the wait"
    # The probes ask l2m's endpoints on its monitoring port.
    monitoring = cfg.monitoring.port
    probes = {k: container[k]["httpGet"] for k in ("startupProbe", "livenessProbe",
                                                   "readinessProbe")}
    assert {k: p["path"] for k, p in probes.items()} == {
        "startupProbe": "/readyz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    assert {port(container, p["port"]) for p in probes.values()} == {monitoring}
    start = container["startupProbe"]
    assert start["periodSeconds"] * start["failureThreshold"] >= 120, "room for Spark's start"
    restricted(pod, container, f"{name}: driver")
    # Requests and limits; the memory limit leaves room above the JVM heap.
    resources = container["resources"]
    for part in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[part]), f"{name}: {part}"
    heap = gib(cfg.spark["spark.driver.memory"])
    assert gib(resources["limits"]["memory"]) >= heap + 1
    # The configuration file it runs is the config ConfigMap's, mounted as a plain file.
    assert d["args"] == ["run", "--config", CONFIG_PATH]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == CONFIG_PATH]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mount["subPath"] == "kubernetes.yaml"
    assert volumes[mount["name"]]["configMap"]["name"] == \
        configmap(name, "l2m-config")["metadata"]["name"]
    # The downward API and the Secret.
    sources = env_sources(container)
    assert sources["L2M_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert sources["L2M_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    for var in ("L2M_POD_IP", "SPARK_LOCAL_IP"):
        assert sources[var]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert sources["L2M_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "l2m-kafka"
    assert sources["L2M_IMAGE"]["value"] == container["image"] != "l2m"
    # Spark's fixed ports are the container's and the headless Service's.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"driver-rpc": int(cfg.spark["spark.driver.port"]),
                     "blockmanager": int(cfg.spark["spark.driver.blockManager.port"]),
                     "spark-ui": int(cfg.spark["spark.ui.port"]), "metrics": monitoring}
    service = one(name, "Service", "l2m-driver")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= d["labels"].items()
    assert {p["port"] for p in service["spec"]["ports"]} == set(ports.values())
    assert spec["selector"]["matchLabels"].items() <= d["labels"].items()


def gib(quantity: str) -> float:
    units = {"Gi": 1, "G": 1e9 / 2**30, "g": 1, "Mi": 1 / 1024, "m": 1 / 1024, "M": 1e6 / 2**30}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", quantity)
    assert match, quantity
    return float(match.group(1)) * units[match.group(2)]


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_driver_account_may_do_what_spark_does_and_no_more(name: str) -> None:
    role = one(name, "Role", "l2m-driver")
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
             for r in role["rules"]}
    assert rules == {
        (("",), ("pods",)): {"create", "get", "list", "watch", "delete", "deletecollection"},
        (("",), ("configmaps",)): {"create", "deletecollection"}}
    binding = one(name, "RoleBinding", "l2m-driver")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    namespace = driver(name)["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "l2m-driver",
                                    "namespace": namespace}]
    if name == "operator":
        app = one(name, "SparkApplication")
        assert app["spec"]["sparkConf"][
            "spark.kubernetes.authenticate.driver.serviceAccountName"] == "l2m-driver"
    else:
        assert driver(name)["spec"]["serviceAccountName"] == "l2m-driver"
    executor = one(name, "ServiceAccount", "l2m-executor")
    assert executor["automountServiceAccountToken"] is False


# -- the executors ------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_executor_pod_template(name: str) -> None:
    template = executor_template(name)
    labels = template["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "l2m"
    assert labels["app.kubernetes.io/component"] == "executor"
    spec = template["spec"]
    (container,) = spec["containers"]
    assert container["command"] == [ENTRYPOINT]
    assert spec["serviceAccountName"] == "l2m-executor"
    assert spec["automountServiceAccountToken"] is False
    restricted(spec, container, f"{name}: executor template")
    # The checkpoint: where the driver has it (same claim, same path), or an object store.
    checkpoint = pod_env(name)["L2M_CHECKPOINT"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    d = driver(name)
    driver_claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                     for v in d["spec"]["volumes"] if "persistentVolumeClaim" in v}
    driver_mounts = {m["mountPath"]: m["name"] for m in d["container"]["volumeMounts"]}
    if name == "prod":
        assert checkpoint.startswith("s3a://")
        assert not claims and not driver_claims
        return
    assert checkpoint.startswith("/")
    claim = claims[mounts[checkpoint]]
    assert claim == driver_claims[driver_mounts[checkpoint]]
    pvc = one(name, "PersistentVolumeClaim", claim)
    assert pvc["metadata"]["name"] == claim
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_executor_budget_drains_one_at_a_time(name: str) -> None:
    pdb = one(name, "PodDisruptionBudget", "l2m-executors")
    instances = int(pod_env(name)["L2M_EXECUTOR_INSTANCES"])
    # Pods owned by a pod (no scale subresource): only an integer minAvailable is allowed.
    assert pdb["spec"]["minAvailable"] == instances - 1
    assert "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    labels = executor_template(name)["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    budgets = objects(name, "PodDisruptionBudget")
    assert len(budgets) == 1, "no budget pins the single driver to its node"


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_network_policy_and_pod_monitor_fit_the_pods(name: str) -> None:
    d = driver(name)
    labels = d["labels"]
    template = executor_template(name)["metadata"]["labels"]
    policies = {p["metadata"]["name"]: p for p in objects(name, "NetworkPolicy")}
    spark = policies["l2m"]["spec"]
    assert spark["podSelector"]["matchLabels"].items() <= labels.items()
    assert spark["podSelector"]["matchLabels"].items() <= template.items()
    intra = [r for r in spark["ingress"]
             if r["from"] == [{"podSelector": spark["podSelector"]}]]
    assert {p["port"] for r in intra for p in r["ports"]} == {7078, 7079}
    monitoring = policies["l2m-driver-monitoring"]["spec"]
    assert monitoring["podSelector"]["matchLabels"].items() <= labels.items()
    assert {p["port"] for r in monitoring["ingress"] for p in r["ports"]} == {9464, 4040}
    (monitor,) = [m["spec"] for m in objects(name, "PodMonitor") if m["metadata"]["name"] == "l2m"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["jobLabel"] == "app.kubernetes.io/name" and labels[monitor["jobLabel"]] == "l2m"
    endpoints = {(e["port"], e["path"]) for e in monitor["podMetricsEndpoints"]}
    assert endpoints == {("metrics", "/metrics"), ("spark-ui", "/metrics/prometheus"),
                         ("spark-ui", "/metrics/executors/prometheus")}
    # Spark names its UI port spark-ui on the driver pods it creates (operator); the
    # Deployment's container declares it.
    names = {p["name"] for p in d["container"]["ports"]}
    assert "metrics" in names and (name == "operator" or "spark-ui" in names)
    jobs = [next((r["replacement"] for r in e.get("relabelings", [])
                  if r.get("targetLabel") == "job"), "l2m") for e in monitor["podMetricsEndpoints"]]
    assert len(set(jobs)) == len(jobs) and jobs[0] == "l2m", "one job per endpoint, l2m's first"


# -- rule changes are live; configuration changes roll the driver ---------------------------

def _changed_copy(tmp_path: Path, part: str) -> list[dict[str, Any]]:
    """The dev overlay rendered from a copy of the repository whose first ``part`` file
    (``rules``: a rule file; ``topology``: the configuration) changed by one comment."""
    copy = tmp_path / "repo"
    for folder in ("rules", "topology", "k8s"):
        shutil.copytree(ROOT / folder, copy / folder, symlinks=True)
    changed = sorted(p for p in (copy / "rules").iterdir()  # a rule file, not a test
                     if is_rule_file(p.name))[0] if part == "rules" \
        else copy / "topology" / "kubernetes.yaml"
    changed.write_text(changed.read_text() + "# changed\n")
    done = subprocess.run([str(copy / "k8s/scripts/sync-config.sh")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return kustomize(copy / "k8s/overlays/dev")


def _template(objects: list[dict[str, Any]], kind: str = "Deployment",
              name: str = "l2m-driver") -> Any:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found["spec"]["template"]


def test_a_rule_change_updates_the_rules_configmap_in_place_without_a_roll_out(
        tmp_path: Path) -> None:
    """Live rules (docs/kubernetes.md "Change rules"): the rules ConfigMap keeps its name,
    so a rule change is the same object with new data — the kubelet updates the mounted
    folder and the running job applies it — and no pod template changes (no roll-out)."""
    before_objects = built("dev")
    after_objects = _changed_copy(tmp_path, "rules")
    names = {o["metadata"]["name"] for o in after_objects if o["kind"] == "ConfigMap"}
    assert "l2m-rules" in names and not any(n.startswith("l2m-rules-") for n in names)
    assert names == {o["metadata"]["name"] for o in before_objects if o["kind"] == "ConfigMap"}
    rules_before = configmap("dev", "l2m-rules")
    (rules_after,) = [o for o in after_objects if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == "l2m-rules"]
    assert rules_after["data"] != rules_before["data"]
    for name in ("l2m-driver", "l2m-deliver"):
        if any(o["kind"] == "Deployment" and o["metadata"]["name"] == name
               for o in before_objects):
            assert _template(after_objects, name=name) == _template(before_objects, name=name)
    # Mounted as a folder, never through subPath (a subPath mount is not updated in place).
    spec = _template(after_objects)["spec"]
    (mount,) = [m for c in spec["containers"] for m in c.get("volumeMounts", [])
                if m["name"] == "rules"]
    assert mount["mountPath"] == "/etc/l2m/rules" and "subPath" not in mount


def test_a_configuration_change_still_rolls_the_driver(tmp_path: Path) -> None:
    after_objects = _changed_copy(tmp_path, "topology")
    old = configmap("dev", "l2m-config")["metadata"]["name"]
    (new,) = [o["metadata"]["name"] for o in after_objects if o["kind"] == "ConfigMap"
              and o["metadata"]["name"].startswith("l2m-config-")]
    assert new != old
    volumes = {v["name"]: v for v in _template(after_objects)["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == new, "a new pod template: a roll-out"


# -- the operator variant -----------------------------------------------------------------

def test_the_spark_application_runs_the_same_job() -> None:
    app = one("operator", "SparkApplication")["spec"]
    d = driver("operator")
    container = d["container"]
    assert app["driverArgs"] == driver("dev")["args"]
    assert app["pyFiles"] == "local:///opt/l2m/bin/l2m-main.py"
    # l2m picks the workers' interpreter (its wrapper): the application must not override it.
    assert "spark.pyspark.python" not in app["sparkConf"]
    assert app["sparkConf"]["spark.pyspark.driver.python"] == "/opt/l2m/venv/bin/python"
    # A driver pod not Ready until its query runs: published, and not waited for.
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert app["sparkConf"]["spark.kubernetes.driver.service.publishNotReadyAddresses"] == "true"
    assert container["command"] == [ENTRYPOINT]
    image = container["image"]
    assert image != "l2m"
    assert app["sparkConf"]["spark.kubernetes.container.image"] == image
    assert env_sources(container)["L2M_IMAGE"]["value"] == image
    instances = int(pod_env("operator")["L2M_EXECUTOR_INSTANCES"])
    assert app["applicationTolerations"]["instanceConfig"] == {
        "initExecutors": instances, "minExecutors": instances, "maxExecutors": instances}
    restart = app["applicationTolerations"]["restartConfig"]
    assert restart["restartPolicy"] == "Always"
    grace = d["spec"]["terminationGracePeriodSeconds"]
    assert grace > L2M_STOP_DEADLINE_S
    timeouts = app["applicationTolerations"]["applicationTimeoutConfig"]
    assert timeouts["forceTerminationGracePeriodMillis"] >= grace * 1000
    restricted(d["spec"], container, "operator: driver")
    # The Deployment's environment, variable for variable (the values may differ).
    assert set(env_sources(container)) == set(env_sources(driver("dev")["container"]))
    assert {c["name"] for c in d["spec"]["volumes"] if "configMap" in c} == {
        "config", "rules", "executor-template"}


# -- the image -----------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of k8s/Dockerfile, continuation lines joined."""
    lines: list[tuple[str, str]] = []
    text = re.sub(r"\\\n\s*", " ", (K8S / "Dockerfile").read_text())
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            lines.append((instruction.upper(), rest.strip()))
    return lines


def test_the_dockerfile_lints_clean() -> None:
    done = subprocess.run([str(ROOT / "tools" / "hadolint.sh"), str(K8S / "Dockerfile")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"hadolint:\n{done.stdout}\n{done.stderr}"


def test_the_dockerfile_builds_what_the_manifests_run() -> None:
    lines = dockerfile()
    final = lines[max(i for i, (ins, _) in enumerate(lines) if ins == "FROM"):]
    stages = [rest for ins, rest in lines if ins == "FROM"]
    assert len(stages) == 3 and "AS wheel" in stages[0] and "AS java" in stages[1]
    assert ("ARG", "WITH_S3A=false") in final
    last = {ins: rest for ins, rest in final}  # the last of each instruction
    assert json.loads(last["ENTRYPOINT"]) == ["l2m"]
    assert json.loads(last["CMD"]) == driver("dev")["args"]
    assert last["USER"].split(":")[0] == str(UID)
    env = " ".join(rest for ins, rest in final if ins == "ENV")
    assert "SPARK_HOME=/opt/spark" in env, "the executor entry point's default"
    # Every install step runs scripts of k8s/scripts/ and nothing else installs anything.
    for ins, rest in lines:
        if ins == "RUN":
            scripts = re.findall(r"([\w-]+\.sh)\b", rest)
            assert scripts and all((SCRIPTS / name).is_file() for name in scripts), rest
            assert not re.search(r"\b(apt-get|apk|pip|curl|wget)\b", rest), rest
        if ins == "COPY" and "--from=" not in rest:
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), source
    assert ("COPY", "k8s/scripts/spark-entrypoint.sh k8s/scripts/l2m-main.py /opt/l2m/bin/") \
        in final, "the executors' command and the operator's main resource, where they point"
    for script in SCRIPTS.iterdir():
        if script.suffix == ".sh":
            assert os.access(script, os.X_OK), f"{script} is executable"


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_its_runbook_in_the_docs() -> None:
    alerts = yaml.safe_load((K8S / "monitoring" / "alerts.yaml").read_text())
    urls = {rule["annotations"]["runbook_url"] for group in alerts["groups"]
            for rule in group["rules"] if "alert" in rule}
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    anchors = {github_anchor(line.lstrip("#")) for line in docs.splitlines()
               if line.startswith("#")}
    for url in sorted(urls):
        page, _, anchor = url.partition("#")
        assert page == "docs/kubernetes.md" and anchor in anchors, url


def run(*cmd: str, env: dict[str, str] | None = None, ok: bool = True,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if ok:
        assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_scripts_are_valid_bash() -> None:
    for script in [*sorted(SCRIPTS.glob("*.sh")), ROOT / "tools" / "hadolint.sh"]:
        run("bash", "-n", str(script))


def test_install_l2m_builds_a_wheel_with_the_executor_files(tmp_path: Path) -> None:
    had_build = (ROOT / "build").exists()
    run(str(SCRIPTS / "install-l2m.sh"), "build", str(ROOT), str(tmp_path / "wheels"),
        timeout=300)
    (wheel,) = (tmp_path / "wheels").glob("l2m-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        # Spark starts every Python worker through l2m/bin/python, executable.
        mode = z.getinfo("l2m/bin/python").external_attr >> 16
        assert mode & stat.S_IXUSR
    assert {"l2m/runtime/daemon.py", "l2m/log4j2.properties", "l2m/cli.py"} <= names
    assert any(n.startswith("l2m/engine/_scan.") and n.endswith(".so") for n in names), \
        "the log scanner, compiled for the wheel"
    assert (ROOT / "build").exists() == had_build, "built from a copy: no build/ left behind"
    plan = run(str(SCRIPTS / "install-l2m.sh"), "--print", "--spark-home", "/opt/spark",
               "install", "/wheels", "/opt/l2m/venv").stdout
    assert "-m venv /opt/l2m/venv" in plan and "pip install" in plan
    assert "ln -sfn" in plan and "/opt/spark" in plan
    compiler = run(str(SCRIPTS / "install-l2m.sh"), "--print", "compiler").stdout
    assert "apt-get install -y --no-install-recommends gcc libc6-dev" in compiler


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def test_s3a_jars_match_pysparks_hadoop() -> None:
    (api,) = pyspark_jars().glob("hadoop-client-api-*.jar")
    hadoop = api.stem.removeprefix("hadoop-client-api-")
    plan = run(str(SCRIPTS / "s3a-jars.sh"), "--print", str(pyspark_jars())).stdout.split("\n")
    urls = [line.split()[0] for line in plan if line]
    assert urls[0].endswith(f"/org/apache/hadoop/hadoop-aws/{hadoop}/hadoop-aws-{hadoop}.jar")
    if hadoop == "3.5.0":  # hadoop-project 3.5.0's <aws-java-sdk-v2.version> (HADOOP-19654)
        assert urls[1].endswith("/software/amazon/awssdk/bundle/2.35.4/bundle-2.35.4.jar")
    assert run(str(SCRIPTS / "s3a-jars.sh"), "--if", "false", "/nonexistent").returncode == 0
    unknown = run(str(SCRIPTS / "s3a-jars.sh"), "--print", "--hadoop-version", "2.7.0", "/x",
                  ok=False)
    assert unknown.returncode == 1 and "no known AWS SDK version" in unknown.stderr


def test_s3a_jars_checks_what_it_downloads(tmp_path: Path) -> None:
    """The download path, against a Maven repository on disk (file://): each jar lands only
    when its SHA-1 matches the repository's."""
    repo = tmp_path / "maven"
    plan = run(str(SCRIPTS / "s3a-jars.sh"), "--print", "--hadoop-version", "3.5.0",
               "--repo", repo.as_uri(), str(tmp_path / "jars")).stdout.split("\n")
    for line in filter(None, plan):
        url = line.split()[0]
        path = Path(url.removeprefix("file://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"jar " + path.name.encode())
        Path(f"{path}.sha1").write_text(hashlib.sha1(path.read_bytes()).hexdigest() + "\n")
    jars = tmp_path / "jars"
    run(str(SCRIPTS / "s3a-jars.sh"), "--hadoop-version", "3.5.0", "--repo", repo.as_uri(),
        str(jars))
    assert sorted(p.name for p in jars.iterdir()) == sorted(
        Path(line.split()[1]).name for line in plan if line)
    # A corrupt download is refused and leaves nothing behind.
    bad = tmp_path / "bad"
    hadoop_aws = next(repo.rglob("hadoop-aws-3.5.0.jar"))
    hadoop_aws.write_bytes(b"corrupt")
    done = run(str(SCRIPTS / "s3a-jars.sh"), "--hadoop-version", "3.5.0", "--repo",
               repo.as_uri(), str(bad), ok=False)
    assert done.returncode == 1 and "SHA-1" in done.stderr
    assert not list(bad.glob("*.jar*"))


def test_the_executor_entry_point_starts_the_executor_backend() -> None:
    env = {"PATH": os.environ["PATH"], "JAVA_HOME": "/opt/java/openjdk",
           "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@{POD_IP}:7078",
           "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "2",
           "SPARK_APPLICATION_ID": "spark-abc", "SPARK_EXECUTOR_POD_IP": "10.9.9.9",
           "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "l2m-exec-3",
           "SPARK_EXECUTOR_MEMORY": "2g", "SPARK_CONF_DIR": "/opt/spark/conf",
           "SPARK_JAVA_OPT_10": "-Dten", "SPARK_JAVA_OPT_2": "-Dtwo words",
           "SPARK_JAVA_OPT_0": "-Dzero"}
    entry = str(SCRIPTS / "spark-entrypoint.sh")
    cmd = run(entry, "--print", "executor", env=env).stdout.splitlines()
    assert cmd[:6] == ["/opt/java/openjdk/bin/java", "-Dzero", "-Dtwo words", "-Dten",
                       "-Xms2g", "-Xmx2g"]
    assert cmd[6:8] == ["-cp", "/opt/spark/conf:/opt/spark/jars/*"]
    assert cmd[8] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    flags = dict(zip(cmd[9::2], cmd[10::2], strict=True))
    assert flags == {"--driver-url": env["SPARK_DRIVER_URL"], "--executor-id": "3",
                     "--cores": "2", "--app-id": "spark-abc", "--hostname": "10.9.9.9",
                     "--resourceProfileId": "0", "--podName": "l2m-exec-3"}
    missing = run(entry, "--print", "executor", env={"PATH": os.environ["PATH"]}, ok=False)
    assert missing.returncode == 1 and "SPARK_DRIVER_URL" in missing.stderr
    submit = run(entry, "--print", "driver", "--class", "org.apache.spark.deploy.PythonRunner",
                 "local:///opt/l2m/bin/l2m-main.py", "run",
                 env={"PATH": os.environ["PATH"], "SPARK_DRIVER_BIND_ADDRESS": POD_IP}
                 ).stdout.splitlines()
    assert submit[:5] == ["/opt/spark/bin/spark-submit", "--conf",
                          f"spark.driver.bindAddress={POD_IP}", "--deploy-mode", "client"]
    assert submit[-2:] == ["local:///opt/l2m/bin/l2m-main.py", "run"]


def test_the_other_install_steps_print_their_plan(tmp_path: Path) -> None:
    plan = run(str(SCRIPTS / "jvm-cache.sh"), "--print", "/opt/l2m/jvm-cache").stdout
    assert "L2M_JVM_CACHE=/opt/l2m/jvm-cache" in plan and "-m l2m.jvmcache" in plan
    skipped = run(str(SCRIPTS / "jvm-cache.sh"), "--if", "false", str(tmp_path / "x")).stdout
    assert "skipped" in skipped and not (tmp_path / "x").exists()
    users = run(str(SCRIPTS / "add-user.sh"), "--print").stdout
    assert "--uid 185" in users and "--gid 185" in users
    main = run(sys.executable, str(SCRIPTS / "l2m-main.py"), "--help").stdout
    assert "validate" in main and "run" in main, "the operator's main resource is l2m's CLI"


def test_kubectl_is_required_not_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without kubectl the manifests tests fail, saying why (never a silent skip)."""
    monkeypatch.setenv("PATH", "/nonexistent")
    import tests.support.tools as tools

    monkeypatch.setattr(tools, "PROMETHEUS_DIR", Path("/nonexistent"))
    with pytest.raises(RuntimeError, match="kubectl"):
        tools.tool("kubectl")


def test_the_secret_example_in_the_docs_has_the_keys_the_pods_read() -> None:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    keys = {source["valueFrom"]["secretKeyRef"]["key"]
            for name in BUILDS for source in env_sources(driver(name)["container"]).values()
            if "secretKeyRef" in source.get("valueFrom", {})
            and source["valueFrom"]["secretKeyRef"]["name"] == "l2m-kafka"}
    assert keys == {"username", "password"}
    for key in keys:
        assert f"--from-literal={key}=" in docs or f"--from-file={key}=" in docs


# -- remote write (k8s/components/remote-write, enabled in prod) -------------------------------

def deliver_pod(name: str) -> dict[str, Any]:
    deployment = one(name, "Deployment", "l2m-deliver")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return {"spec": spec, "container": container, "namespace": deployment["metadata"]["namespace"],
            "deployment": deployment}


def test_the_deliver_pod_runs_l2m_deliver_on_its_own_config(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """prod enables remote write: one l2m-deliver replica (Recreate) runs `l2m deliver` on its
    own ConfigMap, which loads with the pod's environment (every ${VAR} set) and mounts; the
    receiver's URL and token come from the Secret l2m-remote-write; the rules are the driver's
    ConfigMap; dev has no delivery."""
    assert not [d for d in objects("dev", "Deployment")
                if d["metadata"]["name"].startswith("l2m-deliver")]
    pod = deliver_pod("prod")
    deployment = pod["deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert pod["container"]["args"] == ["deliver", "--config", "/etc/l2m/topology/deliver.yaml"]
    assert pod["container"]["image"] == driver("prod")["container"]["image"]
    for var in {v for v in os.environ if v.startswith("L2M_")}:
        monkeypatch.delenv(var, raising=False)
    env = pod_env("prod", pod)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    materialize("prod", tmp_path, pod)
    cfg = load_config(tmp_path / "etc/l2m/topology/deliver.yaml")
    assert "$" not in json.dumps([cfg.kafka, [e.url for e in cfg.remote_write.endpoints]])
    (endpoint,) = cfg.remote_write.endpoints
    assert endpoint.url == SECRET_VALUES["l2m-remote-write", "url"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in pod["container"]["volumeMounts"]}
    token = Path(endpoint.bearer_token_file or "")
    assert mounts[str(token.parent)]["secret"]["secretName"] == "l2m-remote-write"
    assert cfg.rules == (str(tmp_path / "etc/l2m/rules"),)
    assert mounts["/etc/l2m/rules"]["configMap"]["name"].startswith("l2m-rules")
    assert cfg.topics.metrics == yaml.safe_load(CONFIG.read_text())["topics"]["metrics"]


def test_the_deliver_pod_is_scraped_on_its_monitoring_port(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """l2m deliver serves /metrics, /healthz and /readyz on deliver.yaml's monitoring.port: the
    container declares it as the port `metrics`, probes it, the PodMonitor l2m-deliver scrapes
    it as job="l2m-deliver" (never "l2m": up{job="l2m"} is the driver's, L2mDriverDown), a
    NetworkPolicy lets Prometheus in on it, and the driver's PodMonitor does not take it."""
    pod = deliver_pod("prod")
    container = pod["container"]
    labels = pod["deployment"]["spec"]["template"]["metadata"]["labels"]
    for var in {v for v in os.environ if v.startswith("L2M_")}:
        monkeypatch.delenv(var, raising=False)
    for var, value in pod_env("prod", pod).items():
        monkeypatch.setenv(var, value)
    materialize("prod", tmp_path, pod)
    cfg = load_config(tmp_path / "etc/l2m/topology/deliver.yaml")
    assert cfg.monitoring.port is not None and cfg.monitoring.host == "0.0.0.0"
    assert port(container, "metrics") == cfg.monitoring.port
    probes = {k: container[k]["httpGet"] for k in ("livenessProbe", "readinessProbe")}
    assert {k: (p["path"], port(container, p["port"])) for k, p in probes.items()} == {
        "livenessProbe": ("/healthz", cfg.monitoring.port),
        "readinessProbe": ("/readyz", cfg.monitoring.port)}
    monitors = {m["metadata"]["name"]: m for m in objects("prod", "PodMonitor")}
    deliver = monitors["l2m-deliver"]
    assert deliver["metadata"]["labels"]["release"] == \
        monitors["l2m"]["metadata"]["labels"]["release"]
    spec = deliver["spec"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = spec["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    jobs = [r["replacement"] for r in endpoint.get("relabelings", [])
            if r.get("targetLabel") == "job"]
    assert jobs == ["l2m-deliver"]
    driver_selector = monitors["l2m"]["spec"]["selector"]["matchLabels"]
    assert not driver_selector.items() <= labels.items(), "scraped once, as l2m-deliver"
    # In the pod's namespace, and only where remote write is enabled.
    assert deliver["metadata"]["namespace"] == pod["namespace"]
    assert "l2m-deliver" not in {m["metadata"]["name"] for m in objects("dev", "PodMonitor")}
    admitted = {p["port"] for policy in objects("prod", "NetworkPolicy")
                if policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
                and "Ingress" in policy["spec"]["policyTypes"]
                for rule in policy["spec"].get("ingress", [])
                if any("namespaceSelector" in f for f in rule.get("from", []))
                for p in rule["ports"]}
    assert admitted == {cfg.monitoring.port}


# -- the load-test Job (k8s/load, docs/load-testing.md) ---------------------------------------

def load_pod() -> dict[str, Any]:
    job = one("load", "Job")
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return {"spec": spec, "container": container, "namespace": job["metadata"]["namespace"],
            "job": job, "labels": job["spec"]["template"]["metadata"]["labels"]}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_load_job_validates_strictly(version: str) -> None:
    """Built with no flags: the Job, its NetworkPolicy and the job's configuration; no
    Secret, and never the rules ConfigMap (applying a load test must not change live rules)."""
    objs = built("load")
    assert sorted((o["kind"], re.sub(r"-[a-z0-9]{10}$", "", o["metadata"]["name"]))
                  for o in objs) == [("ConfigMap", "l2m-config"), ("Job", "l2m-load"),
                                     ("NetworkPolicy", "l2m-load")]
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_load_job_reads_kafka_as_the_driver_does(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`l2m load --config` on the driver's configuration (the same ConfigMap, hash and all, in
    the dev namespace) with the driver's Kafka environment: every ${VAR} of the kafka section
    is set, the password from the Secret l2m-kafka; it runs once, as a restricted pod."""
    pod = load_pod()
    container, spec = pod["container"], pod["spec"]
    assert pod["namespace"] == driver("dev")["namespace"]
    assert container["image"] == driver("dev")["container"]["image"]
    assert container["args"][:3] == ["load", "--config", CONFIG_PATH]
    args = build_parser().parse_args(container["args"])  # as the image's `l2m` parses them
    assert args.rate > 0 and args.duration and args.watch is not None
    restricted(spec, container, "load Job")
    assert spec["restartPolicy"] == "Never" and pod["job"]["spec"]["backoffLimit"] == 0
    assert spec["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in spec["volumes"]}
    deployed = configmap("dev", "l2m-config")
    assert volumes["config"]["configMap"]["name"] == deployed["metadata"]["name"]
    (config,) = objects("load", "ConfigMap")
    assert config["data"] == deployed["data"]
    kafka_env = {k: v for k, v in env_sources(container).items() if k.startswith("L2M_KAFKA_")}
    driver_env = env_sources(driver("dev")["container"])
    assert kafka_env == {k: v for k, v in driver_env.items() if k.startswith("L2M_KAFKA_")}
    for var in config_vars() | {v for v in os.environ if v.startswith("L2M_")}:
        monkeypatch.delenv(var, raising=False)
    for var, value in pod_env("load", pod).items():
        monkeypatch.setenv(var, value)
    materialize("load", tmp_path, pod)
    cfg = load_config(tmp_path / CONFIG_PATH.lstrip("/"))
    assert "$" not in json.dumps(cfg.kafka)
    assert cfg.kafka["sasl.password"] == "secret:l2m-kafka/password"
    assert cfg.topics.logs and cfg.topics.metrics


def test_the_load_pod_may_reach_kafka_and_prometheus() -> None:
    """One of l2m's pods for the policy l2m (DNS, Kafka), plus egress to Prometheus' API for
    --prometheus; the driver's PodMonitor does not scrape it."""
    labels = load_pod()["labels"]
    policies = {p["metadata"]["name"]: p["spec"] for p in objects("dev", "NetworkPolicy")}
    assert policies["l2m"]["podSelector"]["matchLabels"].items() <= labels.items()
    kafka = {p["port"] for r in policies["l2m"]["egress"] if "to" not in r for p in r["ports"]}
    assert {9092, 9093} <= kafka
    (own,) = [p["spec"] for p in objects("load", "NetworkPolicy")]
    assert own["podSelector"]["matchLabels"].items() <= labels.items()
    assert own["policyTypes"] == ["Egress"]
    assert {p["port"] for r in own["egress"] for p in r["ports"]} == {9090}
    (monitor,) = [m["spec"] for m in objects("dev", "PodMonitor") if m["metadata"]["name"] == "l2m"]
    assert not monitor["selector"]["matchLabels"].items() <= labels.items()
