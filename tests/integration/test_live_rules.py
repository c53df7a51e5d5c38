"""Live rule changes (issue 23): ``l2m run`` as a user runs it, against the real broker, while
its rule folder changes — added, refused, mended, asked again by SIGHUP — and what the metrics
topic holds equals ``l2m backfill`` run segment by segment with the rules of each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from l2m.rules.loader import load_text
from tests.integration.test_prometheus import free_port
from tests.integration.test_streaming import backfill_samples, generated
from tests.support.kafka_helpers import (
    consume_all,
    fresh_topics,
    job_yaml,
    latest_samples,
    produce,
)
from tests.support.tools import l2m_run, stop
from tests.support.topic_reader import TopicReader
from tests.support.web import post

FIRST = """\
rules:
  - {id: all, name: logs_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
"""
ADDED = """\
rules:
  - {id: errors, name: errors_total, kind: counter, query: "level:error", aggregation: count,
     group_by: [service]}
"""
BROKEN = """\
rules:
  - {id: broken, name: broken_total, kind: counter, query: "level:(error", aggregation: count}
"""


def _wait(what: str, check: Callable[[], bool], log: Path, proc: subprocess.Popen[bytes],
          timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s\n" + \
            log.read_text()[-3000:]
        time.sleep(0.3)


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("l2m_rules"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_rules_change_while_the_job_runs(spark, broker, tmp_path, request):
    t = fresh_topics(broker.bootstrap, partitions=2)
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "first.yaml").write_text(FIRST)
    port = free_port()
    # A short recheck: the `--once` run below, right after a continuous one, waits for the
    # timers that run set (a recheck ahead at most).
    config = job_yaml(t, tmp_path, f"rules: [{folder}]", "trigger: 1 second",
                      "rules_poll: 300 ms", "recheck: 2 seconds",
                      f"monitoring: {{port: {port}, host: 127.0.0.1}}")
    log = tmp_path / "stderr.txt"
    segments = [generated(300, seed=51), generated(300, seed=52), generated(300, seed=53)]

    reader = TopicReader(t.bootstrap, t.topics.metrics)
    request.addfinalizer(reader.close)

    def total(rule: str, polled: bool = True) -> float:
        """The rule's total on the metrics topic: polled, what arrived so far; else all of it
        (2 s of silence)."""
        records = reader.read() if polled else consume_all(t.bootstrap, t.topics.metrics)
        return sum(s["value"] for s in latest_samples(records) if s["rule"] == rule)

    with l2m_run(config, log) as proc:
        produce(t.bootstrap, t.topics.logs, segments[0], t.partitions)
        _wait("the first segment counted", lambda: total("all") == 300, log, proc)
        before = _metrics(port)
        assert before["l2m_rules_reloads_total{result=\"success\"}"] == 0

        # Added while running: it counts from the next batch, the job never stops.
        (folder / "added.yaml").write_text(ADDED)
        _wait("the reload", lambda: "rules reloaded: 2 rules" in log.read_text(), log,
              proc)
        produce(t.bootstrap, t.topics.logs, segments[1], t.partitions)
        _wait("the second segment counted", lambda: total("all") == 600, log, proc)

        # A set that does not validate is refused whole, with its position; the job goes
        # on with the last good set.
        (folder / "broken.yaml").write_text(BROKEN)
        _wait("the refusal", lambda: "rules not reloaded" in log.read_text(), log, proc)
        # On demand over HTTP (loopback only): the answer waits for the outcome.
        status, answer = post(f"http://127.0.0.1:{port}/-/reload")
        assert status == 422 and f"{folder / 'broken.yaml'}:2:" in answer, answer
        refused = _metrics(port)
        assert refused["l2m_rules_last_reload_successful"] == 0
        assert refused["l2m_rules_reloads_total{result=\"failure\"}"] == 2
        produce(t.bootstrap, t.topics.logs, segments[2], t.partitions)
        _wait("the third segment counted", lambda: total("all") == 900, log, proc)

        # Mended: good again — the set that runs (its version unchanged). SIGHUP reloads
        # on demand, files changed or not.
        (folder / "broken.yaml").unlink()
        _wait("the mended reload", lambda: log.read_text().count("(unchanged)") == 1,
              log, proc)
        os.kill(proc.pid, signal.SIGHUP)
        _wait("the SIGHUP reload", lambda: log.read_text().count("(unchanged)") == 2, log,
              proc)
        after = _metrics(port)
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert f"{folder / 'broken.yaml'}:2:" in text  # the refused rule's position
    assert after["l2m_rules_last_reload_successful"] == 1
    assert after["l2m_rules_reloads_total{result=\"success\"}"] == 3
    assert after["l2m_rules_reloads_total{result=\"failure\"}"] == 2
    versions = [k for k in after if k.startswith("l2m_rules_version_info")]
    assert len(versions) == 1 and versions != [k for k in before
                                               if k.startswith("l2m_rules_version_info")]

    # A restart on files that do not validate starts on the last good set the checkpoint
    # keeps (a bad change never takes the shared job down), says so, and counts the refusal.
    (folder / "broken.yaml").write_text(BROKEN)
    restarted = tmp_path / "restart.txt"
    with l2m_run(config, restarted) as proc:
        extra = generated(100, seed=54)
        produce(t.bootstrap, t.topics.logs, extra, t.partitions)
        _wait("the fourth segment counted", lambda: total("all") == 1000, restarted, proc)
        kept = _metrics(port)
        assert stop(proc) == 0
    text = restarted.read_text()
    assert "starting with the last good rule set, version" in text, text[-3000:]
    assert f"{folder / 'broken.yaml'}:2:" in text
    assert kept["l2m_rules_last_reload_successful"] == 0
    assert [k for k in kept if k.startswith("l2m_rules_version_info")] == versions
    # `--once` alike (it exited 1): the last good set, said so; a new checkpoint has none.
    once = generated(100, seed=55)
    produce(t.bootstrap, t.topics.logs, once, t.partitions)
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(config),
                          "--once"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{folder / 'broken.yaml'}:2:" in res.stderr
    assert "fix the files: the next run applies them once they validate" in res.stderr
    assert total("all", polled=False) == 1100
    (tmp_path / "new").mkdir()
    fresh = job_yaml(t, tmp_path / "new", f"rules: [{folder}]")
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(fresh),
                          "--once"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    assert res.stderr.splitlines()[-1] == "1 error(s)", res.stderr[-3000:]
    assert f"{folder / 'broken.yaml'}:2:" in res.stderr
    segments[2] = segments[2] + extra + once

    # Segment by segment: `all` over every log, `errors` from the second segment on.
    first, _ = load_text(FIRST)
    both, _ = load_text(FIRST + ADDED.removeprefix("rules:\n"))
    expected: dict[tuple[str, str], float] = {}
    for index, (rules, lines) in enumerate(((first, segments[0]),
                                            (both, segments[1] + segments[2]))):
        (tmp_path / str(index)).mkdir()
        for s in backfill_samples(spark, rules, lines, tmp_path / str(index)):
            key = (s["rule"], str(sorted(s["labels"].items())))
            expected[key] = expected.get(key, 0) + s["value"]
    got = {(s["rule"], str(sorted(s["labels"].items()))): s["value"]
           for s in latest_samples(consume_all(t.bootstrap, t.topics.metrics))
           if s["rule"] in ("all", "errors")}
    assert got == expected
