"""`l2m demo`, the README's first command: broker, generator, job and live view, end to end."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_shows_metrics_and_stops_by_itself():
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "demo", "--duration", "25",
                          "--rate", "100", "--rows", "10"],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    stopped = re.search(r"l2m demo: stopped; (\d+) logs produced, (\d+) samples received, "
                        r"(\d+) dead letters", res.stdout)
    assert stopped, res.stdout[-2000:]
    produced, samples = int(stopped.group(1)), int(stopped.group(2))
    assert produced > 1000 and samples > 0
    assert re.search(r"^\w+_total\s.+\scounter\s", res.stdout, re.M)  # the final table
