"""`l2m demo`, the README's first command: broker, generator, job and live view, end to end;
its output ends cleanly, whether it stops by itself or on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# What must not follow the final table: librdkafka's own log lines ("%3|…|FAIL|rdkafka#…:
# Connect to … failed: Connection refused", from a client still alive when the broker went).
NOISE = re.compile(r"Connection refused|rdkafka|^%\d\|", re.M)


def test_demo_shows_metrics_and_stops_by_itself():
    # 10 s of the job (after Spark's start; the logs flow from before it) at 200 logs/s: its
    # first batches, as many logs as 25 s at 100 had.
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "demo", "--duration", "10",
                          "--rate", "200", "--rows", "10"],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    stopped = re.search(r"l2m demo: stopped; (\d+) logs produced, (\d+) samples received, "
                        r"(\d+) dead letters", res.stdout)
    assert stopped, res.stdout[-2000:]
    produced, samples = int(stopped.group(1)), int(stopped.group(2))
    assert produced > 1000 and samples > 0
    assert re.search(r"^\w+_total\s.+\scounter\s", res.stdout, re.M)  # the final table
    assert not re.search(r"\d[eE][+-]\d", res.stdout)  # plain numbers, no 3.38615e+06
    assert not NOISE.search(res.stdout + res.stderr), (res.stdout + res.stderr)[-3000:]


def test_ctrl_c_stops_the_demo_gracefully_and_quietly(tmp_path: Path):
    """Ctrl-C as a terminal sends it: SIGINT to the demo's whole process group, once the
    job runs. The running batch finishes, the final table is printed, nothing else."""
    log = tmp_path / "demo.out"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "l2m.cli", "demo", "--rate", "100",
                                 "--rows", "10"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None \
                and len(re.findall(r"^  metrics: batch", log.read_text(), re.M)) < 3:
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "l2m: SIGINT received, finishing the current batch" in text
    # Not pyspark's own SIGINT handler (it cancels every job and raises KeyboardInterrupt).
    assert "interrupted" not in text and "SPARK_JOB_CANCELLED" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    final = text[text.rindex("SIGINT received"):]
    assert re.search(r"^\w+_total\s.+\scounter\s", final, re.M), final
    assert text.rstrip().splitlines()[-1].startswith("l2m demo: stopped;"), text[-2000:]
    assert not NOISE.search(text), text[-3000:]
