"""Restart paths of ``l2m run`` as an operator meets them: a batch planned but not committed
(what a crash leaves) is replayed; SIGTERM to the whole process group of an idle job stops it
cleanly; a checkpoint of another state format is refused before Spark starts."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from l2m.config.loader import load_config
from l2m.rules.loader import load_rules
from l2m.runtime.runner import Runner
from tests.integration.test_streaming import generated
from tests.support.kafka_helpers import consume_all, fresh_topics, job_yaml, latest_samples, produce

ROOT = Path(__file__).resolve().parents[2]


def write_config(t, tmp: Path, trigger: str = "5 seconds",  # type: ignore[no-untyped-def]
                 max_records_per_trigger: int = 0) -> Path:
    extra = [f"source: {{max_records_per_trigger: {max_records_per_trigger}}}"] \
        if max_records_per_trigger else []
    return job_yaml(t, tmp, f"trigger: {trigger}", *extra)


def run(config: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(config),
                           *extra], capture_output=True, text=True, timeout=timeout)


def input_total(t) -> float:  # type: ignore[no-untyped-def]
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    return sum(s["value"] for s in samples if s["rule"] == "l2m-input"
               and s["labels"]["status"] == "ok")


def test_a_batch_planned_but_not_committed_is_replayed_exactly(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    config = write_config(t, tmp_path, max_records_per_trigger=100)
    produce(t.bootstrap, t.topics.logs, generated(200, seed=51), t.partitions)
    # the first run in this process (the shared session: faster), the replay as a user runs it
    cfg = load_config(config)
    first = Runner(cfg, load_rules(cfg.rules).rules, once=True, out=io.StringIO(), spark=spark)
    first.start()
    assert first.wait(poll=0.5) == 0  # two batches of about 100
    commits = tmp_path / "checkpoint" / "metrics" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    assert last >= 1
    # what kill -9 between the sink and the commit leaves: no commit file (nor its checksum)
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    res = run(config, "--once")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert f"batch {last:>5}" in res.stderr and "lag        ?" in res.stderr
    assert input_total(t) == 200.0


def test_sigterm_to_the_process_group_of_an_idle_job_exits_zero(broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=1)
    config = write_config(t, tmp_path, trigger="1 second")
    produce(t.bootstrap, t.topics.logs, generated(50, seed=52), t.partitions)
    job = subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    deadline = time.monotonic() + 120
    committed = tmp_path / "checkpoint" / "metrics" / "commits" / "0"
    while not committed.exists() and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.5)
    time.sleep(3)  # idle: nothing more to read
    os.killpg(job.pid, signal.SIGTERM)  # as a terminal or a supervisor signals a group
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    assert "SIGTERM received" in err and "Traceback" not in err


def group_members(pgid: int) -> dict[int, str]:
    """The processes of a process group, by pid, with their command names."""
    members = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:
            members[int(stat.parent.name)] = name
    return members


def test_sigterm_while_spark_starts_is_not_lost(broker, tmp_path):
    """A roll-out can stop a driver that is still starting (on Kubernetes it waits up to 30 s
    for executors): SIGTERM to the group while the JVM starts stops l2m, not the JVM alone."""
    t = fresh_topics(broker.bootstrap, partitions=1)
    config = write_config(t, tmp_path, trigger="1 second")
    job = subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    deadline = time.monotonic() + 60
    while "java" not in group_members(job.pid).values() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "java" in group_members(job.pid).values(), "the JVM never started"
    time.sleep(0.5)  # the JVM is up, the session is not
    os.killpg(job.pid, signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    assert "SIGTERM received" in err and "Traceback" not in err
    deadline = time.monotonic() + 10
    while group_members(job.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(job.pid) == {}, "processes outlived the driver"


def test_a_checkpoint_of_another_state_format_is_refused_with_its_code(tmp_path):
    t = type("T", (), {"bootstrap": "127.0.0.1:1", "topics": type(
        "Topics", (), {"logs": "l", "metrics": "m", "dead_letters": "d"})()})()
    config = write_config(t, tmp_path)
    old = tmp_path / "checkpoint" / "metrics" / "offsets"
    old.mkdir(parents=True)  # a checkpoint written before state format versions
    res = run(config, "--once", timeout=60)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith("l2m: error [STATE_FORMAT]: ")
    assert "format 0" in res.stderr and "Upgrading" in res.stderr
    assert "Traceback" not in res.stderr
    (tmp_path / "checkpoint" / "l2m.json").write_text(json.dumps({"state_format": 99}))
    res = run(config, "--once", timeout=60)
    assert res.returncode == 1 and "holds state format 99" in res.stderr


def test_sigterm_during_a_batch_delivers_and_commits_that_batch_before_exit(broker, tmp_path):
    """As Kubernetes stops the driver (SIGTERM to l2m, the container's main process): the
    batch in flight when the signal comes finishes — its samples on the metrics topic, its
    commit written — and l2m exits 0."""
    t = fresh_topics(broker.bootstrap, partitions=2)
    config = write_config(t, tmp_path, trigger="1 second", max_records_per_trigger=400)
    produce(t.bootstrap, t.topics.logs, generated(2000, seed=53), t.partitions)
    job = subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    query = tmp_path / "checkpoint" / "metrics"
    in_flight = None
    deadline = time.monotonic() + 180
    while in_flight is None and time.monotonic() < deadline and job.poll() is None:
        planned = {int(p.name) for p in (query / "offsets").glob("[0-9]*")}
        done = {int(p.name) for p in (query / "commits").glob("[0-9]*")}
        # A later batch (not the first, whose start-up dominates): planned, not committed.
        in_flight = next((b for b in sorted(planned - done) if b >= 1), None)
        time.sleep(0.02)
    assert in_flight is not None, "no batch was seen in flight"
    os.kill(job.pid, signal.SIGTERM)  # to l2m alone, as the kubelet signals PID 1
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    assert "SIGTERM received" in err and "Traceback" not in err
    assert (query / "commits" / str(in_flight)).exists()
    assert f"batch {in_flight:>5}" in err
    # Every record read up to the end of that batch is in the samples on the topic.
    last = max(int(p.name) for p in (query / "commits").glob("[0-9]*"))
    end = json.loads((query / "offsets" / str(last)).read_text().splitlines()[-1])
    read = sum(int(o) for o in end["partitions"].values())
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    assert sum(s["value"] for s in samples if s["rule"] == "l2m-input") == read
    assert read < 2000 + t.partitions  # it did stop in the middle
