"""Fixtures of the integration tier: the driver JVM's class-data archive, built once before
the first test; the embedded broker (tansu, in memory), one for the whole run — tests use fresh
topics (tests/support/kafka_helpers.py); a Prometheus per test that receives remote write."""

from __future__ import annotations

import subprocess
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, USER_JVM_CACHE
from tests.integration.test_prometheus import free_port, wait_for
from tests.support.tools import tool
from tests.support.web import get


@pytest.fixture(scope="session", autouse=True)
def jvm_archive() -> Iterator[Path | None]:
    """The driver JVM's class-data archive (l2m/runtime/jvm.py), for every JVM this tier
    starts — each `l2m run` a test starts, the shared session: built once, before the first
    test (a minute of one core; kept in .tools/jvm, named for this Java and Spark, so a later
    run reuses it), each start then about 5 s shorter, and the same for every test.
    ``L2M_JVM_CACHE=off`` keeps the plain JVM, a folder puts the archive there. Its path, or
    ``None`` when off or it could not be built (then off: a continuous ``l2m run`` would
    otherwise start building one beside each test)."""
    from l2m.dev import jvmarchive
    from l2m.runtime import jvm

    with pytest.MonkeyPatch.context() as env:
        env.setenv(jvm.ENV, USER_JVM_CACHE or str(ROOT / ".tools" / "jvm"))
        path = jvm.archive()
        if path is not None and not path.is_file():
            deadline = time.monotonic() + 600
            while jvm.locked(path) and time.monotonic() < deadline:  # another run builds it
                time.sleep(1)
            if not path.is_file():
                jvmarchive.build(path)
        if path is None or not path.is_file():
            env.setenv(jvm.ENV, "off")
            path = None
        yield path


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """One embedded broker (tansu, in memory) for the whole run; tests use fresh topics."""
    from l2m.dev.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded


def _ready(base: str) -> bool:
    try:
        return get(f"{base}/-/ready")[0] == 200
    except urllib.error.URLError:  # not listening yet
        return False


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    """A Prometheus with the remote-write receiver and a 30-minute out-of-order window (the
    one docs/prometheus.md asks for); its base URL."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    # It scrapes itself every second: its own counters of refused samples are checked.
    config.write_text("global: {scrape_interval: 1s}\n"
                      "storage: {tsdb: {out_of_order_time_window: 30m}}\n"
                      f"scrape_configs: [{{job_name: self, static_configs: "
                      f"[{{targets: ['127.0.0.1:{port}']}}]}}]\n")
    process = subprocess.Popen(
        [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         "--web.enable-remote-write-receiver", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(base), 60, "Prometheus ready")
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
