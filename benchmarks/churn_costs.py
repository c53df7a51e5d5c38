"""Where a new series' time goes (issue 58, 1): the churn scenario's burst taken apart.

    python -m benchmarks.churn_costs --code DIR --out DIR [--burst 250000] [--pyspy]
                                     [--instrument]

Input: a copy of the code to measure (``--code``: a tree with ``l2m/`` and ``benchmarks/``,
e.g. ``git archive HEAD`` plus the built scanner) — never the checkout, whose state code may
be mid-edit. The run imports everything from it (``PYTHONPATH``, which Spark's Python workers
inherit). One uncapped job of :func:`benchmarks.churn.run_mode`: warm-up, a steady batch, a
trickle batch, ``--bursts`` bursts of ``--burst`` logs with fresh ids, a trickle batch.

Output, into ``--out`` (``costs.json``), around every measured batch:

* CPU seconds of the Spark JVM (and of its busiest threads, by name), of the Python workers
  (every process below l2m's fork server), of the driver and of the broker (``/proc``);
* with ``--instrument`` (a second copy of ``--code`` with the state processor's calls
  wrapped, in ``OUT/code``): per state call (``handleInputRows`` / ``handleExpiredTimer``) its
  wall and thread-CPU time, rows, and the state requests it made — ``MapIO``'s pipelined gets
  and puts and pyspark's own calls by kind, with the time spent sending them and waiting for
  their answers — one JSON line per call in ``OUT/calls/<pid>.jsonl``;
* with ``--pyspy``: ``py-spy record --subprocesses --native`` of the fork server during the
  burst batch, as collapsed stacks (``OUT/burst.pyspy.txt``);
* Spark's event log (``OUT/events``): each stage's tasks' run and CPU time, shuffle records.

No figure is graded; benchmarks/README.md ("How is state stored?") reads them."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")

# Appended to the copy's l2m/state/processor.py by --instrument: counts and times the state
# requests of each call, written per call (the workers are long-lived; nothing at exit).
INSTRUMENT = r'''

# --- benchmarks/churn_costs.py --instrument (a measuring copy, never the checkout) ---
import json as _cc_json
import os as _cc_os
import time as _cc_time

from pyspark.sql.streaming import stateful_processor_api_client as _cc_api

from l2m.state import mapio as _cc_mapio

_CC_OUT = _cc_os.environ.get("L2M_CHURN_CALLS", "/tmp/churn-calls")
_CC = {"recv": 0, "recv_s": 0.0, "send_s": 0.0, "single": {}, "get": 0, "put": 0,
       "get_s": 0.0, "put_s": 0.0, "get_bytes": 0, "put_calls": 0, "get_calls": 0}
_cc_send = _cc_api.StatefulProcessorApiClient._send_proto_message


def _cc_kind(message):
    parts = []
    while True:
        inner = [(f, v) for f, v in message.ListFields() if f.message_type is not None]
        if not inner:
            return ".".join(parts)
        field, message = inner[0]
        parts.append(field.name)


def _cc_timed(receive):
    def timed(self, *args, **kwargs):
        started = _cc_time.perf_counter()
        try:
            return receive(self, *args, **kwargs)
        finally:
            _CC["recv"] += 1
            _CC["recv_s"] += _cc_time.perf_counter() - started

    return timed


def _cc_timed_send(self, message, *args, **kwargs):
    try:
        from pyspark.sql.streaming.proto.StateMessage_pb2 import StateRequest

        kind = _cc_kind(StateRequest.FromString(message))
    except Exception as e:  # measuring must not break the call
        kind = f"unparsed {type(e).__name__}"
    _CC["single"][kind] = _CC["single"].get(kind, 0) + 1
    started = _cc_time.perf_counter()
    try:
        return _cc_send(self, message, *args, **kwargs)
    finally:
        _CC["send_s"] += _cc_time.perf_counter() - started


for _cc_name in dir(_cc_api.StatefulProcessorApiClient):
    if _cc_name.startswith("_receive_proto_message"):
        setattr(_cc_api.StatefulProcessorApiClient, _cc_name,
                _cc_timed(getattr(_cc_api.StatefulProcessorApiClient, _cc_name)))
_cc_api.StatefulProcessorApiClient._send_proto_message = _cc_timed_send
_cc_get = _cc_mapio.MapIO.get
_cc_put = _cc_mapio.MapIO.put


def _cc_timed_get(self, keys):
    started = _cc_time.perf_counter()
    out = _cc_get(self, keys)
    _CC["get_s"] += _cc_time.perf_counter() - started
    _CC["get"] += len(keys)
    _CC["get_calls"] += 1
    return out


def _cc_timed_put(self, entries):
    started = _cc_time.perf_counter()
    _cc_put(self, entries)
    _CC["put_s"] += _cc_time.perf_counter() - started
    _CC["put"] += len(entries)
    _CC["put_calls"] += 1


_cc_mapio.MapIO.get = _cc_timed_get
_cc_mapio.MapIO.put = _cc_timed_put


def _cc_wrap(name):
    original = getattr(MetricProcessor, name)

    def call(self, key, *args):
        before = _cc_json.loads(_cc_json.dumps(_CC))
        wall, cpu = _cc_time.perf_counter(), _cc_time.thread_time()
        frames = list(original(self, key, *args))
        line = {"call": name, "pid": _cc_os.getpid(), "key": [int(key[0]), int(key[1])],
                "end": _cc_time.time(), "wall_s": _cc_time.perf_counter() - wall,
                "cpu_s": _cc_time.thread_time() - cpu,
                "rows_out": sum(len(f) for f in frames)}
        for k, v in _CC.items():
            if k == "single":
                line[k] = {kind: n - before[k].get(kind, 0) for kind, n in v.items()
                           if n != before[k].get(kind, 0)}
            else:
                line[k] = v - before[k]
        _cc_os.makedirs(_CC_OUT, exist_ok=True)
        with open(_cc_os.path.join(_CC_OUT, f"{_cc_os.getpid()}.jsonl"), "a") as f:
            f.write(_cc_json.dumps(line) + "\n")
        return iter(frames)

    setattr(MetricProcessor, name, call)


_cc_wrap("handleInputRows")
_cc_wrap("handleExpiredTimer")
'''


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads); 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name (names as the kernel keeps them: 15 characters) of a
    process."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def children() -> dict[int, list[int]]:
    """Each process's children, from ``/proc``."""
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(stat.parent.name))
    return out


def below(pid: int, tree: dict[int, list[int]]) -> list[int]:
    """Every descendant of ``pid``."""
    out, todo = [], list(tree.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Watch:
    """The observer of :func:`benchmarks.churn.run_mode`: CPU per process group around each
    measured batch, py-spy during the burst."""

    def __init__(self, out: Path, pyspy: bool) -> None:
        self.out, self.pyspy = out, pyspy
        self.batches: list[dict[str, Any]] = []
        self._before: dict[str, Any] = {}
        self._spy: subprocess.Popen[bytes] | None = None
        self.bursts = 0

    def pids(self) -> dict[str, Any]:
        tree = children()
        me = os.getpid()
        mine = below(me, tree)
        java = [p for p in mine if "java" in cmdline(p).split(" ")[0]]
        # The fork server the session started (a child of this process) forks every worker.
        fork = [p for p in tree.get(me, []) if "l2m.runtime.forkserver" in cmdline(p)]
        if not fork:
            # Not always this process's child (seen once, 2026-12-02): any fork server below
            # it whose parent is not one.
            servers = {p for p in mine if "l2m.runtime.forkserver" in cmdline(p)}
            fork = [p for p in servers if not any(p in tree.get(s, []) for s in servers)]
        broker = [p for p in mine if "tansu" in cmdline(p)]
        workers = [w for f in fork for w in [f, *below(f, tree)]]
        return {"jvm": java, "forkserver": fork, "workers": workers, "broker": broker}

    def snapshot(self) -> dict[str, Any]:
        pids = self.pids()
        return {"at": time.time(), "driver": cpu_s(os.getpid()),
                "jvm": sum(cpu_s(p) for p in pids["jvm"]),
                "jvm_threads": {n: c for p in pids["jvm"] for n, c in thread_cpu(p).items()},
                "python_workers": {p: cpu_s(p) for p in pids["workers"]},
                "broker": sum(cpu_s(p) for p in pids["broker"]), "pids": pids}

    def __call__(self, mode: str, kind: str, when: str) -> None:
        if when == "before":
            self._before = self.snapshot()
            if kind == "burst":
                self.bursts += 1
            if self.pyspy and kind == "burst" and self._before["pids"]["forkserver"]:
                fork = self._before["pids"]["forkserver"][0]
                py_spy = Path(sys.executable).parent / "py-spy"
                self._spy = subprocess.Popen(
                    [str(py_spy), "record", "--pid", str(fork), "--subprocesses", "--native",
                     "--rate", "50", "--format", "raw", "-o",
                     str(self.out / f"burst-{self.bursts}.pyspy.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            return
        after = self.snapshot()
        if self._spy is not None:
            self._spy.send_signal(signal.SIGINT)
            self._spy.wait(120)
            self._spy = None
        b = self._before
        threads = {n: round(c - b["jvm_threads"].get(n, 0.0), 2)
                   for n, c in after["jvm_threads"].items()}
        workers = {str(p): round(c - b["python_workers"].get(p, 0.0), 2)
                   for p, c in after["python_workers"].items()
                   if c - b["python_workers"].get(p, 0.0) > 0}
        self.batches.append({
            "mode": mode, "kind": kind, "start": b["at"], "end": after["at"],
            "wall_s": round(after["at"] - b["at"], 2),
            "driver_cpu_s": round(after["driver"] - b["driver"], 2),
            "jvm_cpu_s": round(after["jvm"] - b["jvm"], 2),
            "jvm_threads_cpu_s": dict(sorted(((n, c) for n, c in threads.items() if c >= 0.05),
                                             key=lambda t: -t[1])),
            "python_workers_cpu_s": round(sum(workers.values()), 2),
            "python_workers": workers,
            "broker_cpu_s": round(after["broker"] - b["broker"], 2)})


def instrumented(code: Path, out: Path) -> Path:
    """A copy of ``code`` with :data:`INSTRUMENT` appended to its state processor."""
    dst = out / "code"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(code, dst, symlinks=True)
    for folder, _dirs, files in os.walk(dst):  # a snapshot may be read-only
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    with (dst / "l2m" / "state" / "processor.py").open("a") as f:
        f.write(INSTRUMENT)
    return dst


def stages(events: Path) -> list[dict[str, Any]]:
    """Per stage of Spark's event log: its batch, tasks, summed task run and CPU time (ms),
    shuffle records read and written, input records, and the SQL metrics' sums."""
    files = sorted(p for p in events.rglob("*") if p.is_file() and
                   not p.name.startswith((".", "appstatus")))
    batch_of: dict[int, str] = {}
    out: dict[int, dict[str, Any]] = {}
    for path in files:
        for line in path.read_text().splitlines():
            e = json.loads(line)
            kind = e.get("Event")
            if kind == "SparkListenerJobStart":
                batch = (e.get("Properties") or {}).get("streaming.sql.batchId", "")
                for sid in e.get("Stage IDs", []):
                    batch_of[sid] = batch
            elif kind == "SparkListenerTaskEnd":
                sid = e["Stage ID"]
                m = e.get("Task Metrics") or {}
                s = out.setdefault(sid, {"stage": sid, "batch": batch_of.get(sid, ""),
                                         "tasks": 0, "run_ms": 0, "cpu_ms": 0.0,
                                         "shuffle_read_records": 0,
                                         "shuffle_write_records": 0, "input_records": 0,
                                         "task_run_ms": [], "metrics": {}})
                s["tasks"] += 1
                s["run_ms"] += m.get("Executor Run Time", 0)
                s["task_run_ms"].append(m.get("Executor Run Time", 0))
                s["cpu_ms"] += m.get("Executor CPU Time", 0) / 1e6
                s["shuffle_read_records"] += (m.get("Shuffle Read Metrics") or {}).get(
                    "Total Records Read", 0)
                s["shuffle_write_records"] += (m.get("Shuffle Write Metrics") or {}).get(
                    "Shuffle Records Written", 0)
                s["input_records"] += (m.get("Input Metrics") or {}).get("Records Read", 0)
                write = m.get("Shuffle Write Metrics") or {}
                read = m.get("Shuffle Read Metrics") or {}
                s["shuffle_write_ms"] = s.get("shuffle_write_ms", 0) + \
                    write.get("Shuffle Write Time", 0) / 1e6
                s["shuffle_write_bytes"] = s.get("shuffle_write_bytes", 0) + \
                    write.get("Shuffle Bytes Written", 0)
                s["fetch_wait_ms"] = s.get("fetch_wait_ms", 0) + read.get("Fetch Wait Time", 0)
                for acc in (e.get("Task Info") or {}).get("Accumulables", []):
                    name, value = acc.get("Name"), acc.get("Update")
                    if name and not name.startswith("internal.") and \
                            isinstance(value, (int, float, str)):
                        try:
                            number = float(value)
                        except ValueError:
                            continue
                        s["metrics"][name] = s["metrics"].get(name, 0) + number
            elif kind == "SparkListenerStageCompleted":
                info = e["Stage Info"]
                s = out.setdefault(info["Stage ID"], {"stage": info["Stage ID"], "tasks": 0,
                                                      "metrics": {}})
                s["name"] = info.get("Stage Name", "")
                s["batch"] = batch_of.get(info["Stage ID"], s.get("batch", ""))
    return [out[k] for k in sorted(out)]


# py-spy's collapsed stacks sorted into what a worker was doing: the first rule that matches
# a stack (its frames joined by ";") names it.
TASKS = (("state", ("transform_with_state", "l2m/state/")),
         ("sink", ("l2m/kafka/sink", "l2m/kafka/producer")),
         ("read", ("l2m/engine/", "l2m/kafka/", "l2m/streaming/")))
STATE_PARTS = (
    ("state requests: waiting for the JVM", ("_receive_proto_message",), ("recv (", "read (",
                                                                          "poll (")),
    ("state requests: Python (build, send, parse)", ("l2m/state/mapio.py",
                                                     "stateful_processor_api_client"), ()),
    ("decode: partials in (pyspark's frames, l2m's packs)", (
        "generate_data_batches", "load_stream", "l2m/state/rows.py", "l2m/engine/ipc.py"), ()),
    ("decode: stored entries", ("load_value", "load_entry"), ()),
    ("encode: stored entries", ("dump_value", "dump_entry"), ()),
    ("encode: samples out", ("samples_frame", "l2m/state/output.py", "conversion.py",
                             "dump_stream", "l2m/engine/samples.py"), ()),
    ("processor logic", ("l2m/state/", "l2m/engine/admission"), ()),
)


def classify(stack: str) -> tuple[str, str]:
    """(task, part) of one collapsed stack of a worker."""
    frames = stack.split(";")
    leaf = frames[-1]
    task = next((name for name, marks in TASKS if any(m in stack for m in marks)), "idle/other")
    if task != "state":
        waiting = any(w in leaf for w in ("recv (", "read (", "poll (", "select ("))
        return task, "waiting (socket)" if waiting else "working"
    # the innermost frame that names a part decides, so a decode under the processor's
    # call counts as decode
    for frame in reversed(frames):
        for part, marks, leaves in STATE_PARTS:
            if any(m in frame for m in marks) and (not leaves or any(x in leaf for x in leaves)):
                return task, part
    return task, "pyspark worker, other"


def profile_table(path: Path) -> dict[str, dict[str, int]]:
    """Samples per (task, part) of a ``py-spy record --format raw`` file."""
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        task, part = classify(stack)
        out.setdefault(task, {})
        out[task][part] = out[task].get(part, 0) + int(count)
    return out


def calls_summary(calls: Path, start: float, end: float) -> dict[str, Any]:
    """The instrumented state calls that ended within [start, end]: their sums."""
    total: dict[str, Any] = {"calls": 0, "single": {}}
    for path in calls.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            c = json.loads(line)
            if not start <= c["end"] <= end:
                continue
            total["calls"] += 1
            for k, v in c.items():
                if k == "single":
                    for kind, n in v.items():
                        total["single"][kind] = total["single"].get(kind, 0) + n
                elif isinstance(v, (int, float)) and k not in ("pid", "end"):
                    total[k] = total.get(k, 0) + v
    return total


def report(out: Path) -> list[str]:
    """A run's bursts taken apart (lines of text): per new series, µs."""
    r = json.loads((out / "costs.json").read_text())
    lines: list[str] = []
    bursts = [s for s in r["steps"] if s["kind"] == "burst"]
    batches = [b for b in r["batches"] if b["kind"] == "burst"]
    for n, (burst, batch) in enumerate(zip(bursts, batches, strict=True), 1):
        lines += burst_report(out, r, n, burst, batch)
    return lines


def burst_report(out: Path, r: dict[str, Any], n: int, burst: dict[str, Any],
                 batch: dict[str, Any]) -> list[str]:
    """One burst of a run taken apart (:func:`report`)."""
    made = sum(burst["new_series"].values())
    ids = {str(i) for i in burst.get("batch_ids", [])}

    def per(seconds: float) -> str:
        return f"{seconds * 1e6 / made:,.1f} µs"

    lines = [f"{out}: burst {n}, {burst['logs']:,} logs, {made:,} new series, batch "
             f"{burst['batch_ms']:,} ms ({per(burst['batch_ms'] / 1000)} per new series); "
             f"load {r['loadavg']}",
             f"CPU over the burst ({batch['wall_s']} s wall): JVM {batch['jvm_cpu_s']} s "
             f"({per(batch['jvm_cpu_s'])}), Python workers {batch['python_workers_cpu_s']} s "
             f"({per(batch['python_workers_cpu_s'])}), driver {batch['driver_cpu_s']} s, "
             f"broker {batch['broker_cpu_s']} s",
             "JVM threads, CPU s: " + ", ".join(f"{n}: {c}" for n, c in
                                                list(batch["jvm_threads_cpu_s"].items())[:8]),
             f"burst progress durations: {burst['durations']}"]
    for s in r["stages"]:
        if s.get("batch") not in ids:
            continue
        lines.append(
            f"stage {s['stage']} ({s.get('name', '')[:50]}): {s['tasks']} tasks, run "
            f"{s.get('run_ms', 0):,} ms ({per(s.get('run_ms', 0) / 1000)}), JVM task-thread CPU "
            f"{s.get('cpu_ms', 0):,.0f} ms, shuffle written {s.get('shuffle_write_records', 0):,}"
            f" rows / {s.get('shuffle_write_bytes', 0) / 2**20:,.1f} MiB in "
            f"{s.get('shuffle_write_ms', 0):,.0f} ms, read {s.get('shuffle_read_records', 0):,}"
            f" rows (fetch wait {s.get('fetch_wait_ms', 0):,} ms), task run ms "
            f"{sorted(s.get('task_run_ms', []), reverse=True)[:6]}")
        top = sorted(((k, v) for k, v in s["metrics"].items() if "time" in k.lower()),
                     key=lambda kv: -kv[1])[:8]
        if top:
            lines.append("  time metrics: " + ", ".join(f"{k}: {v:,.0f}" for k, v in top))
    calls = out / "calls"
    if calls.is_dir():
        c = calls_summary(calls, batch["start"], batch["end"])
        if c["calls"]:
            lines.append(
                f"state calls: {c['calls']}, wall {c['wall_s']:.2f} s ({per(c['wall_s'])}), "
                f"thread CPU {c['cpu_s']:.2f} s ({per(c['cpu_s'])}); requests answered "
                f"{c['recv']:,} ({c['recv'] / made:.2f} per new series), waiting for answers "
                f"{c['recv_s']:.2f} s ({per(c['recv_s'])}; "
                f"{c['recv_s'] * 1e6 / max(c['recv'], 1):,.1f} µs a request), sending "
                f"{c['send_s']:.2f} s; MapIO gets {c['get']:,} in {c['get_calls']:,} calls "
                f"({c['get_s']:.2f} s), puts {c['put']:,} in {c['put_calls']:,} calls "
                f"({c['put_s']:.2f} s); pyspark's own calls {c['single']}")
    spy = out / f"burst-{n}.pyspy.txt"
    if spy.exists():
        table = profile_table(spy)
        total = sum(sum(v.values()) for v in table.values())
        lines.append(f"py-spy samples of every Python worker over the burst (50 Hz): {total:,}")
        for task, parts in table.items():
            n = sum(parts.values())
            lines.append(f"  {task}: {n:,} — " + ", ".join(
                f"{p} {v:,}" for p, v in sorted(parts.items(), key=lambda kv: -kv[1])))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.churn_costs")
    ap.add_argument("--code", required=True, help="a copy of the code to measure")
    ap.add_argument("--out", required=True)
    ap.add_argument("--burst", type=int, default=250_000)
    ap.add_argument("--bursts", type=int, default=2,
                    help="the first finds the id rules small (series inside their entry), "
                         "the second one entry per series")
    ap.add_argument("--trigger-ms", type=int, default=10_000)
    ap.add_argument("--pyspy", action="store_true")
    ap.add_argument("--instrument", action="store_true")
    ap.add_argument("--report", action="store_true", help="only print --out's report")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    if args.report:
        print("\n".join(report(out)))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if "L2M_CHURN_CODE" in os.environ:
        code = Path(os.environ["L2M_CHURN_CODE"])
    else:
        code = Path(args.code).resolve()
        if args.instrument:
            code = instrumented(code, out)
        # Again in a process importing everything from the copy (Spark's workers inherit it).
        env = {**os.environ, "PYTHONPATH": str(code), "L2M_CHURN_CODE": str(code),
               "L2M_CHURN_CALLS": str(out / "calls")}
        return subprocess.run([sys.executable, "-m", "benchmarks.churn_costs",
                               *(argv or sys.argv[1:])], cwd=code, env=env,
                              check=False).returncode
    from benchmarks.churn import run_mode
    from l2m.config.job import JobConfig
    from l2m.dev.broker import EmbeddedBroker
    from l2m.runtime.runner import session_for

    events = out / "events"
    events.mkdir(exist_ok=True)
    watch = Watch(out, args.pyspy)
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        spark = session_for(JobConfig(master="local[2]", checkpoint=f"{tmp}/ck",
                                      spark={"spark.sql.shuffle.partitions": "2",
                                             "spark.eventLog.enabled": "true",
                                             "spark.eventLog.compress": "false",
                                             "spark.eventLog.rolling.enabled": "false",
                                             "spark.eventLog.dir": f"file://{events}"}))
        steps = run_mode(spark, broker.bootstrap, Path(tmp), "uncapped", args.burst,
                         args.bursts, 1,
                         args.trigger_ms, True, watch)
        spark.stop()
    result = {"code": str(code), "burst": args.burst, "steps": steps, "batches": watch.batches,
              "stages": stages(events), "loadavg": Path("/proc/loadavg").read_text().strip()}
    (out / "costs.json").write_text(json.dumps(result, indent=2))
    for b in watch.batches:
        print(f"{b['kind']:<7} wall {b['wall_s']:>6} s: JVM {b['jvm_cpu_s']} CPU-s, Python "
              f"workers {b['python_workers_cpu_s']}, driver {b['driver_cpu_s']}, broker "
              f"{b['broker_cpu_s']}")
    print("\n".join(report(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
