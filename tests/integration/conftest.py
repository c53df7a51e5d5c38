"""Fixtures of the integration tier: the embedded broker (tansu, in memory), one for the
whole run — tests use fresh topics (tests/support/kafka_helpers.py); a Prometheus per test that
receives remote write."""

from __future__ import annotations

import subprocess
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_prometheus import free_port, wait_for
from tests.support.tools import tool
from tests.support.web import get


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
