"""A second SIGTERM (or Ctrl-C) stops l2m now, even when its KeyboardInterrupt is swallowed
where the handler raised it: Python prints an exception raised in a finalizer (py4j's
JavaObject.__del__ talks to the JVM) and goes on, and l2m then waited out the graceful stop."""

from __future__ import annotations

import dataclasses
import gc
import io
import os
import signal
import time
from types import SimpleNamespace

import pytest

from l2m.config.job import JobConfig
from l2m.runtime.runner import Runner


class BusyQuery:
    """A query whose batch never ends (its executors never come)."""

    isActive = True
    status = {"isTriggerActive": True}  # noqa: RUF012

    def stop(self) -> None:
        raise AssertionError("a second signal does not wait for the query to stop")


class SignalsWhenCollected:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_second_signal_swallowed_by_a_finalizer_still_cuts_the_graceful_stop_short(
        tmp_path) -> None:
    cfg = dataclasses.replace(JobConfig(), checkpoint=str(tmp_path / "checkpoint"))
    runner = Runner(cfg, [], out=io.StringIO())
    runner.job = SimpleNamespace(queries=[BusyQuery()], close=lambda: None)  # type: ignore[assignment]
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        runner.install_signals()
        os.kill(os.getpid(), signal.SIGTERM)  # the first: finish the batch in flight
        assert runner._stop.is_set()
        thing = SignalsWhenCollected()
        del thing  # the second, raised inside a finalizer: reported and swallowed
        gc.collect()
        assert runner._now.is_set()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            runner._shutdown()
        assert time.monotonic() - started < 1
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
