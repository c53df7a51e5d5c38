"""The application's wiring (l2m.runtime.app), with the runner and delivery replaced (no JVM,
no broker): which collaborators ``l2m run`` gets and in which order, what ``l2m deliver``
hands on, and the runner's observer — the driver's metrics when the job serves them, else one
that ignores everything."""

from __future__ import annotations

import inspect
import io
from pathlib import Path
from typing import Any, ClassVar

import pytest

from l2m import cli
from l2m.config.job import JobConfig, MonitoringConfig, Topics
from l2m.runtime import app, runner
from l2m.runtime.reload import RuleWatcher
from l2m.runtime.telemetry import RunObserver, Telemetry
from tests.support.configs import KAFKA

ROOT = Path(__file__).resolve().parents[3]


class FakeRunner:
    """The runner's surface app.run_job uses, recording each call."""

    made: ClassVar[list[FakeRunner]] = []

    def __init__(self, cfg: JobConfig, rules: Any, once: bool = False,
                 watcher: RuleWatcher | None = None, rules_status: Any = None,
                 telemetry: RunObserver | None = None) -> None:
        self.cfg, self.rules, self.once = cfg, rules, once
        self.watcher, self.rules_status, self.telemetry = watcher, rules_status, telemetry
        self.spark = None
        self.calls: list[str] = []
        FakeRunner.made.append(self)

    def install_signals(self) -> None:
        self.calls.append("signals")

    def start(self) -> None:
        self.calls.append("start")

    def wait(self, duration: float | None = None) -> int:
        self.calls.append(f"wait {duration}")
        return 3

    def closed(self) -> None:
        self.calls.append("closed")


@pytest.fixture
def fake_runner(monkeypatch) -> type[FakeRunner]:
    FakeRunner.made = []
    monkeypatch.setattr(runner, "Runner", FakeRunner)
    return FakeRunner


def _cfg(port: int | None = None) -> JobConfig:
    return JobConfig(kafka={"bootstrap.servers": "b:9092"}, topics=Topics(logs="logs"),
                     rules=(str(ROOT / "rules"),), checkpoint="/nowhere",
                     monitoring=MonitoringConfig(port=port, host="127.0.0.1"))


@pytest.mark.parametrize("once", [True, False])
def test_run_without_a_port_gets_an_observer_that_ignores_everything(fake_runner, once):
    out = io.StringIO()
    calls: list[str] = []
    code = app.run_job(_cfg(), app.RunOptions(once=once, duration=5.0, out=out,
                                              prepare_next_start=lambda: calls.append("next")))
    (made,) = fake_runner.made
    assert code == 3
    assert type(made.telemetry) is RunObserver
    assert made.once is once
    assert made.rules_status is not None and made.rules_status.last_ok
    assert (made.watcher is None) is once  # live rules only for a continuous run
    # --once prepares the next start after the run (it would take a core from it), a
    # continuous run as soon as its query runs.
    assert made.calls == ["signals", "start", "wait 5.0", "closed"]
    assert calls == ["next"]
    line = out.getvalue().splitlines()[-1]
    enabled = sum(r.enabled for r in made.rules)
    assert line == (f"l2m run: {enabled} rules, topic logs on b:9092, checkpoint "
                    "/nowhere" + (" (once)" if once else ""))


def test_run_with_a_port_hands_its_metrics_to_the_runner_and_the_watcher(fake_runner):
    out = io.StringIO()
    assert app.run_job(_cfg(port=0), app.RunOptions(out=out)) == 3
    (made,) = fake_runner.made
    telemetry = made.telemetry
    assert isinstance(telemetry, Telemetry)
    # One status for the runner, the watcher and /metrics (no assignment after the fact).
    assert telemetry.reload is made.rules_status is made.watcher.status
    assert made.watcher.on_change is not None
    assert ", metrics on :" in out.getvalue()
    ruleset = app.job_rules(_cfg())
    made.watcher.on_change(ruleset)
    assert telemetry.rules == [r.id for r in ruleset.enabled]


def test_the_prepared_next_start_comes_before_the_wait_when_continuous(fake_runner,
                                                                     monkeypatch):
    order: list[str] = []

    class Ordered(FakeRunner):
        def wait(self, duration: float | None = None) -> int:
            order.append("wait")
            return 0

    monkeypatch.setattr(runner, "Runner", Ordered)
    for once in (False, True):
        order.clear()
        app.run_job(_cfg(), app.RunOptions(once=once, out=io.StringIO(),
                                           prepare_next_start=lambda: order.append("next")))
        assert order == (["wait", "next"] if once else ["next", "wait"])


def test_the_command_line_dispatches_run_with_its_arguments(fake_runner, tmp_path, monkeypatch):
    seen: list[tuple[JobConfig, app.RunOptions]] = []
    monkeypatch.setattr(app, "run_job", lambda cfg, options: seen.append((cfg, options)) or 0)
    path = tmp_path / "job.yaml"
    path.write_text(f"{KAFKA}rules: [{ROOT / 'rules'}]\n")
    assert cli.main(["run", "--config", str(path), "--once", "--duration", "7",
                     "--bootstrap", "other:1"]) == 0
    ((cfg, options),) = seen
    assert cfg.kafka["bootstrap.servers"] == "other:1"
    assert (options.once, options.duration) == (True, 7.0)
    assert options.prepare_next_start is not None


def test_deliver_hands_on_the_rules_and_once(monkeypatch):
    from l2m.runtime import deliver

    seen: list[dict[str, Any]] = []

    def fake(cfg, once=False, stop=None, rules=()):
        seen.append({"once": once, "rules": len(rules), "stop": stop.is_set()})
        raise KeyboardInterrupt  # Ctrl-C: a clean end

    monkeypatch.setattr(deliver, "deliver", fake)
    out = io.StringIO()
    assert app.deliver_job(_cfg(), once=True, out=out) == 0
    assert seen == [{"once": True, "rules": len(app.job_rules(_cfg()).rules), "stop": False}]
    assert out.getvalue() == "l2m deliver: topic metrics on b:9092 → no endpoints (once)\n"


def test_telemetry_overrides_every_observer_call():
    hooks = {name for name, value in vars(RunObserver).items()
             if inspect.isfunction(value)}
    assert hooks == {"started", "tick", "batch", "failed_batch", "restarted", "failed_job",
                     "stopping"}
    assert all(vars(Telemetry).get(name) is not None for name in hooks)
    assert (RunObserver.per_executor, Telemetry.per_executor) == (False, True)


def test_a_runner_made_without_telemetry_observes_nothing():
    made = runner.Runner(JobConfig(), [], out=None)
    assert type(made.telemetry) is RunObserver
    assert runner.Runner(JobConfig(), [], out=None).telemetry is not made.telemetry
