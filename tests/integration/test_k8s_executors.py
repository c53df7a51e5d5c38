"""`l2m run` on Kubernetes, the driver's side: started with a ``k8s://`` master against a
recording stand-in for the API server (tests/support/k8s_apiserver.py), the executor pods it asks
for carry what the manifests promise — the image, the executor pod template (labels, accounts,
securityContext, volumes), the cpu and memory the configuration sizes, the ownerReference to the
driver pod — as many as configured; and everything it asks the API server is allowed by the driver's
Role. No pod ever runs: the executors never register, the first batch waits for them, and the test
stops l2m once it does (SIGTERM, as the kubelet sends it, which waits for that batch; then a second
one, which stops it now): Spark deletes what it created. About 25 s: Spark's start waits 1 s, not
its 30 s, for executors to register, and the JVM maps the class-data archive the image builds
(here the integration tier's, tests/integration/conftest.py).

Every expected value comes from the dev overlay as ``kubectl kustomize`` builds it: its
ConfigMaps are the driver's files (the configuration, the rules, the executor pod template,
written under a folder that stands for the pod's /), its Deployment's environment the
variables they use. Only what cannot be the cluster's changes: the master (the stand-in), Kafka
(the embedded broker, no SASL), fresh topics, the monitoring port, the paths of the
checkpoint and the pod template (under that folder), and how long Spark's start waits for
executors that never come (``spark.scheduler.maxRegisteredResourcesWaitingTime``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from l2m.config.job import JobConfig
from l2m.config.loader import load_config
from l2m.streaming.job import QUERY
from tests.support.k8s_apiserver import ApiServer, Request
from tests.support.kafka_helpers import fresh_topics
from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "k8s" / "overlays" / "dev"
POD_NAME, POD_IP = "l2m-driver-5d8f7c9b4-x2x7q", "127.0.0.1"
START_TIMEOUT_S = 120


@dataclass
class Run:
    api: ApiServer
    build: list[dict[str, Any]]
    env: dict[str, str]        # the driver container's environment, as the Deployment sets it
    cfg: JobConfig             # the configuration as the driver loaded it
    template: dict[str, Any]   # the executor pod template the manifests ship
    started: bool              # the pods were asked for, the query ran its first batch
    returncode: int | None     # l2m's exit code after SIGTERM (None: killed)
    held: bool                 # the first SIGTERM waited for the batch in flight
    stderr: str

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in self.build if o["kind"] == kind
                    and re.fullmatch(rf"{name}(-[a-z0-9]{{10}})?", o["metadata"]["name"])]
        return found

    @property
    def container(self) -> dict[str, Any]:
        spec = self.one("Deployment", "l2m-driver")["spec"]["template"]["spec"]
        (found,) = [c for c in spec["containers"] if c["name"] == "l2m"]
        return found

    @property
    def pods(self) -> list[dict[str, Any]]:
        return self.api.created("pods")


def pod_layout(build: list[dict[str, Any]], root: Path) -> None:
    """The driver container's ConfigMap mounts under ``root`` (a subPath: that key's file)."""
    (deployment,) = [o for o in build if o["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "l2m"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    maps = {o["metadata"]["name"]: o["data"] for o in build if o["kind"] == "ConfigMap"}
    for mount in container["volumeMounts"]:
        if "configMap" not in volumes[mount["name"]]:
            continue
        data = maps[volumes[mount["name"]]["configMap"]["name"]]
        target = root / mount["mountPath"].lstrip("/")
        files = {target: data[mount["subPath"]]} if "subPath" in mount else \
            {target / key: text for key, text in data.items()}
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def container_env(deployment: dict[str, Any]) -> dict[str, str]:
    """The l2m container's environment as the kubelet sets it (the pod's name and IP are
    made up, secrets are not needed here)."""
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "l2m"]
    fields = {"metadata.name": POD_NAME, "metadata.namespace":
              deployment["metadata"]["namespace"], "status.podIP": POD_IP}
    env = {}
    for e in container["env"]:
        ref = e.get("valueFrom", {})
        env[e["name"]] = e["value"] if "value" in e else \
            fields[ref["fieldRef"]["fieldPath"]] if "fieldRef" in ref else "unused-secret"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ready(port: int | None) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def stop(proc: subprocess.Popen[bytes]) -> tuple[int | None, bool]:
    """SIGTERM to l2m (the container's main process, as the kubelet sends it). Its graceful
    stop lets the batch in flight finish, and here that batch waits for executors that never
    register (l2m would give up after 120 s): a second SIGTERM, after 5 s, stops it now (as a
    second Ctrl-C does). SIGKILL last; then whatever is left of the process group (the JVM,
    Python workers). The exit code (None: killed) and whether the first SIGTERM was held."""
    try:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=5), False
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30), True
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            return None, True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def run(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("k8s-executors")
    done = subprocess.run([tool("kubectl"), "kustomize", str(DEV)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    build = [d for d in yaml.safe_load_all(done.stdout) if d]
    (deployment,) = [o for o in build if o["kind"] == "Deployment"]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "l2m"]
    root = tmp / "pod"
    pod_layout(build, root)
    config = root / container["args"][container["args"].index("--config") + 1].lstrip("/")
    job = yaml.safe_load(config.read_text())
    template_file = job["spark"]["spark.kubernetes.executor.podTemplateFile"]
    template = yaml.safe_load((root / template_file.lstrip("/")).read_text())

    env = container_env(deployment)
    api = ApiServer(env["L2M_NAMESPACE"], env["L2M_POD_NAME"])
    # As on a cluster: the driver pod runs but is not Ready until its query runs (the
    # readiness probe asks /readyz).
    api.driver["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    topics = fresh_topics(broker.bootstrap, partitions=2).topics
    job["spark"]["master"] = f"k8s://{api.url}"
    job["spark"]["spark.kubernetes.executor.podTemplateFile"] = str(root) + template_file
    job["kafka"] = {k: v for k, v in job["kafka"].items() if not k.startswith(("sasl.", "ssl."))}
    job["topics"] = {"logs": topics.logs, "metrics": topics.metrics,
                     "dead_letters": topics.dead_letters}
    job["monitoring"] = {"port": free_port(), "host": "127.0.0.1"}
    # No executor registers here: Spark's start would wait its default 30 s for them.
    job["spark"]["spark.scheduler.maxRegisteredResourcesWaitingTime"] = "1s"
    config.write_text(yaml.safe_dump(job, sort_keys=False))
    here = {"L2M_KAFKA_BOOTSTRAP": broker.bootstrap, "L2M_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT",
            "L2M_CHECKPOINT": str(root) + env["L2M_CHECKPOINT"],
            "HOME": str(root) + env["HOME"],
            "L2M_JVM_CACHE": os.environ.get("L2M_JVM_CACHE", "off")}
    (root / env["HOME"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    proc_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("L2M_", "KUBE", "SPARK_", "PYSPARK_"))}
    proc_env.update(env | here)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in (env | here).items():
            mp.setenv(key, value)
        cfg = load_config(config)

    instances = int(cfg.spark["spark.executor.instances"])
    log = tmp / "stderr.txt"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                                env=proc_env, cwd=root, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    try:
        # Until the pods are asked for, the query runs (/readyz: after Spark's start, which
        # waits up to 30 s for executors to register; a SIGTERM before is ignored) and its
        # first batch is planned (its offsets written), waiting for executors.
        first_batch = Path(cfg.checkpoint) / QUERY / "offsets" / "0"
        deadline = time.monotonic() + START_TIMEOUT_S
        started = False
        while time.monotonic() < deadline and proc.poll() is None and not started:
            started = api.wait_for(lambda: len(api.created("pods")) >= instances, 1.0) \
                and ready(cfg.monitoring.port) and first_batch.exists()
            time.sleep(0 if started else 0.5)
        returncode, held = stop(proc)
    finally:
        if proc.poll() is None:
            stop(proc)
        api.close()
    yield Run(api, build, env, cfg, template, started, returncode, held,
              log.read_text(errors="replace"))


def test_it_asks_for_the_configured_number_of_executors(run: Run) -> None:
    assert run.cfg.master.startswith("k8s://")
    assert run.cfg.spark.get("spark.dynamicAllocation.enabled", "false") == "false"
    instances = int(run.cfg.spark["spark.executor.instances"])
    assert instances == int(run.env["L2M_EXECUTOR_INSTANCES"]) > 0
    assert len(run.pods) == instances, run.stderr[-3000:]
    ids = sorted(int(p["metadata"]["labels"]["spark-exec-id"]) for p in run.pods)
    assert ids == list(range(1, instances + 1))


def test_the_executor_pods_are_the_template_with_the_drivers_image(run: Run) -> None:
    template, cfg = run.template, run.cfg
    (template_container,) = template["spec"]["containers"]
    image = run.container["image"]
    assert image == run.env["L2M_IMAGE"] == cfg.spark["spark.kubernetes.container.image"]
    apps = {p["metadata"]["labels"]["spark-app-selector"] for p in run.pods}
    assert len(apps) == 1
    for pod in run.pods:
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"].items() >= {**template["metadata"]["labels"],
                                          "spark-role": "executor"}.items()
        # The template's pod settings, as written: account, token, service links, grace
        # period, the restricted securityContext.
        for key, value in template["spec"].items():
            if key not in ("containers", "volumes"):
                assert spec[key] == value, key
        assert spec["serviceAccountName"] == \
            cfg.spark["spark.kubernetes.authenticate.executor.serviceAccountName"]
        # The template's volumes, unchanged (dev: /tmp and the checkpoint claim).
        volumes = {v["name"]: v for v in spec["volumes"]}
        for volume in template["spec"]["volumes"]:
            assert volumes[volume["name"]] == volume
        (container,) = spec["containers"]
        assert container["name"] == template_container["name"]
        assert container["image"] == image
        assert container["imagePullPolicy"] == \
            cfg.spark["spark.kubernetes.container.image.pullPolicy"]
        assert container["command"] == template_container["command"]
        assert container["args"] == ["executor"]
        assert container["securityContext"] == template_container["securityContext"]
        for mount in template_container["volumeMounts"]:
            assert mount in container["volumeMounts"]
        # The checkpoint where the driver has it (dev: the claim at L2M_CHECKPOINT).
        (checkpoint,) = [m for m in container["volumeMounts"]
                         if m["mountPath"] == run.env["L2M_CHECKPOINT"]]
        assert "persistentVolumeClaim" in volumes[checkpoint["name"]]
        env = {e["name"]: e.get("value") for e in container["env"]}
        for e in template_container["env"]:
            assert env[e["name"]] == e["value"]
        # Executors connect to the driver pod's IP on its fixed RPC port, and listen on the
        # block manager port the NetworkPolicy opens.
        assert env["SPARK_DRIVER_URL"] == \
            f"spark://CoarseGrainedScheduler@{POD_IP}:{cfg.spark['spark.driver.port']}"
        assert env["SPARK_APPLICATION_ID"] in apps
        # Python workers run the driver's interpreter, at the same path in the same image.
        assert env["L2M_PYTHON"] == sys.executable
        assert {p["containerPort"] for p in container.get("ports", [])} == \
            {int(cfg.spark["spark.blockManager.port"])}


def mib(size: str) -> int:
    """A Spark memory size (``2g``, ``512m``; no unit: MiB) in MiB."""
    number, unit = re.fullmatch(r"(\d+)([mgt]?)b?", size.lower()).groups()
    return int(number) * 1024 ** "mgt".index(unit or "m")


def test_the_executor_pods_are_sized_as_configured(run: Run) -> None:
    cfg, template = run.cfg, run.template
    (template_container,) = template["spec"]["containers"]
    memory = mib(cfg.spark["spark.executor.memory"]) + \
        mib(cfg.spark["spark.executor.memoryOverhead"])
    for pod in run.pods:
        (container,) = pod["spec"]["containers"]
        resources = container["resources"]
        assert resources["requests"]["cpu"] == \
            cfg.spark["spark.kubernetes.executor.request.cores"]
        limit = cfg.spark.get("spark.kubernetes.executor.limit.cores")
        assert resources["limits"].get("cpu") == limit
        assert resources["requests"]["memory"] == resources["limits"]["memory"] == f"{memory}Mi"
        for part in ("requests", "limits"):
            assert resources[part].items() >= template_container["resources"][part].items()
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SPARK_EXECUTOR_CORES"] == cfg.spark["spark.executor.cores"]
        assert mib(env["SPARK_EXECUTOR_MEMORY"]) == mib(cfg.spark["spark.executor.memory"])


def test_the_executors_belong_to_the_driver_pod(run: Run) -> None:
    driver = run.api.driver["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": POD_NAME, "uid": driver["uid"],
             "controller": True}
    (configmap,) = run.api.created("configmaps")
    for obj in [*run.pods, configmap]:
        (reference,) = obj["metadata"]["ownerReferences"]
        assert reference.items() >= owner.items()
    # The executors' Spark configuration: the ConfigMap created for them, mounted.
    for pod in run.pods:
        names = {v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v}
        assert configmap["metadata"]["name"] in names


def role_verb(request: Request) -> tuple[str, str]:
    """The RBAC resource and verb a request needs."""
    found = re.fullmatch(r"/api/v1/namespaces/[^/]+/([^/]+)(?:/([^/]+))?(?:/([^/]+))?",
                         request.path)
    assert found, f"not a namespaced core API request: {request.method} {request.path}"
    resource, name, sub = found.groups()
    if sub:
        resource = f"{resource}/{sub}"
    if request.method == "GET":
        verb = "get" if name else "watch" if request.query.get("watch") else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}[request.method]
    return resource, verb


def test_it_does_not_wait_for_the_driver_pod_to_be_ready(run: Run) -> None:
    # The driver pod is Ready only once the query runs; Spark's executor allocator would wait
    # 1 s for it first and log "ERROR Utils: Uncaught exception … KubernetesClientTimeoutException:
    # Timed out waiting for [1000] milliseconds for [Pod]" on every start.
    assert run.cfg.spark["spark.kubernetes.driver.service.publishNotReadyAddresses"] == "true"
    assert run.started, run.stderr[-3000:]
    assert "KubernetesClientTimeoutException" not in run.stderr, run.stderr[-3000:]
    assert "Uncaught exception" not in run.stderr, run.stderr[-3000:]


def test_the_driver_does_only_what_its_role_allows(run: Run) -> None:
    namespace = run.env["L2M_NAMESPACE"]
    assert namespace == run.one("Deployment", "l2m-driver")["metadata"]["namespace"]
    allowed = {(resource, verb) for rule in run.one("Role", "l2m-driver")["rules"]
               if rule["apiGroups"] == [""]
               for resource in rule["resources"] for verb in rule["verbs"]}
    used = set()
    for request in run.api.requests:
        assert request.path.startswith(f"/api/v1/namespaces/{namespace}/"), request
        used.add(role_verb(request))
        # Nothing the stand-in does not know (it answers those 404).
        assert request.status < 400, request
    assert used <= allowed, f"not in the Role: {sorted(used - allowed)}"
    assert {("pods", "get"), ("pods", "create"), ("configmaps", "create")} <= used


def test_a_sigterm_stops_it_and_spark_deletes_its_executors(run: Run) -> None:
    # The graceful stop waits for the batch in flight (here: forever, no executor comes); the
    # second SIGTERM stops it now. Either way Spark stops and deletes what it created.
    assert run.started, run.stderr[-3000:]
    assert "SIGTERM received" in run.stderr
    assert run.held
    assert run.returncode == 130, run.stderr[-3000:]
    assert "l2m: interrupted" in run.stderr
    app = run.pods[0]["metadata"]["labels"]["spark-app-selector"]
    deleted = {role_verb(r)[0]: r.query.get("labelSelector", "") for r in run.api.requests
               if role_verb(r)[1] == "deletecollection"}
    assert {f"spark-app-selector={app}", "spark-role=executor"} <= \
        set(deleted["pods"].split(","))
    assert f"spark-app-selector={app}" in deleted["configmaps"].split(",")
