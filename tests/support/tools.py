"""External tools the tests run: Prometheus and promtool (installed by
``tools/prometheus.sh``, part of the README's test command), kubectl; and ``l2m`` itself as a
user runs it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / ".tools" / "prometheus" / "usr" / "bin"


def tool(name: str) -> str:
    """The path of ``name`` (``prometheus``, ``promtool``, ``kubectl``): the project's
    ``.tools`` copy first, then ``PATH``. Missing is an error, never a skip: the README's test
    command installs them."""
    local = PROMETHEUS_DIR / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: run tools/prometheus.sh (Prometheus, promtool) "
                           "or install kubectl")
    return found


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``l2m ARGS…`` in a new process, as a user runs it: exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "l2m.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@contextlib.contextmanager
def l2m_run(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``l2m run --config CONFIG`` in its own process group, its stderr written to ``log``,
    while the block runs; killed with its group (SIGKILL) if the block leaves it running."""
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config",
                                 str(config)], stderr=err, stdout=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> int:
    """Send ``sig`` to the process's group, as a terminal or Kubernetes does: its exit code."""
    os.killpg(proc.pid, sig)
    return proc.wait(timeout=120)
