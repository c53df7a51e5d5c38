"""External tools the tests run: Prometheus and promtool (installed by
``tools/prometheus.sh``, part of the README's test command), kubectl."""

from __future__ import annotations

import shutil
import subprocess
import sys
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
