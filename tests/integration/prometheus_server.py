"""A real Prometheus (Debian's 2.42, tools/prometheus.sh) for the integration tests: started
with the remote-write receiver and the 30-minute out-of-order window docs/prometheus.md asks
for (2.42 applies it to floats only), optionally scraping itself every second (its own
counters of refused samples are then queryable), plus whatever flags a test adds
(``--enable-feature=native-histograms``); and a raw remote-write POST without retries."""

from __future__ import annotations

import contextlib
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from l2m.remotewrite.encode import HEADERS
from tests.integration.test_prometheus import free_port, wait_for
from tests.support.tools import tool
from tests.support.web import get

NATIVE_HISTOGRAMS = "--enable-feature=native-histograms"


def ready(base: str) -> bool:
    """Whether the Prometheus at ``base`` answers ready (False while it is not listening)."""
    try:
        return get(f"{base}/-/ready")[0] == 200
    except urllib.error.URLError:
        return False


class PrometheusServer:
    """One Prometheus over a data directory in ``tmp``, which outlives :meth:`stop` (a test
    may restart it with other flags on the same data); :attr:`base` is its URL."""

    def __init__(self, tmp: Path, scrape_self: bool = False) -> None:
        self.tmp, self.port = tmp, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        scrape = (f"global: {{scrape_interval: 1s}}\nscrape_configs: [{{job_name: self, "
                  f"static_configs: [{{targets: ['127.0.0.1:{self.port}']}}]}}]\n"
                  if scrape_self else "global: {scrape_interval: 1m}\n")
        (tmp / "prometheus.yml").write_text(
            scrape + "storage: {tsdb: {out_of_order_time_window: 30m}}\n")

    def start(self, *flags: str) -> None:
        """Start it with ``flags`` besides the receiver's, and wait until it is ready."""
        self.process = subprocess.Popen(
            [tool("prometheus"), f"--config.file={self.tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.tmp / 'tsdb'}", "--web.enable-remote-write-receiver",
             f"--web.listen-address=127.0.0.1:{self.port}", *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: ready(self.base), 60, "Prometheus ready")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


@contextlib.contextmanager
def running_prometheus(tmp: Path, *flags: str, scrape_self: bool = False) -> Iterator[str]:
    """A Prometheus started with ``flags`` while the block runs: its base URL."""
    server = PrometheusServer(tmp, scrape_self)
    try:
        server.start(*flags)
        yield server.base
    finally:
        server.stop()


def post_write(base: str, data: bytes) -> tuple[int, str]:
    """One remote-write POST of ``data`` (a snappy-compressed WriteRequest), no retries (the
    client retries a 5xx): the status and the answer's text."""
    request = urllib.request.Request(f"{base}/api/v1/write", data=data, method="POST",
                                     headers=dict(HEADERS))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
