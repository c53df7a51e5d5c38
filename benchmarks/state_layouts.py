"""State layouts for issue 21: what a micro-batch costs when it touches some series of a state
holding many more, for the layouts pyspark's stateful Python operators allow.

    python -m benchmarks.state_layouts [--live 0,1000000] [--touched 2000,250000]
                                       [--layouts tws_map,tws_map_ttl,apws_blob,tws_delta]
                                       [--sub-shards 64] [--batches 3] [--warmup 1]
                                       [--quick] [--out DIR]

Each layout is a streaming query in ``local[2]`` (2 shuffle partitions) with the RocksDB state
store and changelog checkpointing, fed by a parquet file source (one file per micro-batch) and
writing to a no-op sink. Rows are (shard, series, value) over :data:`SHARDS` shards; a series'
aggregate is (count, sum).

* ``tws_map``: ``transformWithStateInPandas`` keyed by shard, one MapState series → (count,
  sum); one ``getValue`` + one ``updateValue`` per touched series.
* ``tws_map_ttl``: the same with a MapState TTL (time mode ProcessingTime) of :data:`TTL_MS`,
  long enough that nothing expires during the run: the price of the TTL index alone.
* ``apws_blob``: ``applyInPandasWithState`` keyed by (shard, sub-shard), sub-shard = hash of
  the series mod ``--sub-shards``, one pickled blob of all its series per key: today's layout
  (a blob per shard) generalised.
* ``tws_delta``: ``transformWithStateInPandas`` keyed by (shard, sub-shard) with
  ``--delta-sub-shards``, a ValueState base blob and a small ValueState delta folded into the
  base once it holds more than :data:`FOLD` series.

For every live count (``--live``) the state is preloaded with that many series (blind writes,
not measured), then for every touched count (``--touched``) ``--warmup`` + ``--batches``
micro-batches each touch that many random live series (``live = 0``: series never seen, so the
state grows). Per point: the batch time (progress ``durationMs.triggerExecution``, median of
the measured batches), the changelog bytes a batch writes (new ``*.changelog`` files under the
checkpoint's ``state/``), the state rows and the peak RSS of the layout's process tree (driver,
JVM, Python workers; cumulative over that layout's run). Each layout runs in a process of its
own, so one layout's JVM heap does not count in the next one's RSS.

Prints a table; writes ``state_layouts.json`` and ``state_layouts.png`` into ``--out`` (default
``./bench-results`` in the working directory, never the checkout); names the machine. Not part
of ``python -m benchmarks``. ``--quick`` takes about 80 s on 2 cores; the full profile has not
been timed as one run, but expect tens of minutes (preloading 1,000,000 series runs at ≈ 35,000
series/s, a 250,000-series batch of ``tws_map`` takes ≈ 15 s, of ``tws_map_ttl`` ≈ 20 s)."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from benchmarks.__main__ import machine

LAYOUTS = ("tws_map", "tws_map_ttl", "apws_blob", "tws_delta")
SHARDS = 8
TTL_MS = 3_600_000  # an hour: no preloaded series expires during a run
FOLD = 64  # tws_delta: series in the delta before it is folded into the base
LOAD_CHUNK = 500_000  # series per preload micro-batch: one parquet file, bounded memory
FRESH = 10**8  # live = 0: touched series are drawn from [FRESH, 2 * FRESH), above any preload
SCHEMA = "shard int, series string, value double"
OUTPUT = "series string, count long, sum double"
AGGREGATE = "count long, sum double"
QUICK = {"live": [0, 20_000], "touched": [2_000]}


def series_name(i: int) -> str:
    """The series id of index ``i``; fixed width, so every layout stores the same key bytes."""
    return f"s{i:09d}"


# Preload rows carry value = NaN: the processors then write (1, 0.0) without reading first,
# which loads state several times faster than a read-merge-write; measured rows never do.
def _preload(pdf: pd.DataFrame) -> bool:
    return bool(pdf["value"].isna().all())


def _per_series(pdf: pd.DataFrame) -> Iterator[tuple[str, int, float]]:
    g = pdf.groupby("series", sort=False)["value"].agg(["count", "sum"])
    return zip(g.index.tolist(), g["count"].tolist(), g["sum"].tolist(), strict=True)


class MapLayout(StatefulProcessor):
    """``tws_map`` / ``tws_map_ttl``: one MapState series → (count, sum) per shard."""

    def __init__(self, ttl_ms: int | None = None) -> None:
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.agg = handle.getMapState("agg", "series string", AGGREGATE, self.ttl_ms)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        for pdf in rows:
            if _preload(pdf):
                for s in pdf["series"].tolist():
                    self.agg.updateValue((s,), (1, 0.0))
                continue
            out = []
            for s, c, v in _per_series(pdf):
                old = self.agg.getValue((s,))
                if old is not None:
                    c, v = c + old[0], v + old[1]
                self.agg.updateValue((s,), (c, v))
                out.append((s, c, v))
            yield pd.DataFrame(out, columns=["series", "count", "sum"])

    def close(self) -> None:
        pass


def _decode(blob: bytes | None) -> tuple[list[str], list[int], list[float]]:
    if blob is None:
        return [], [], []
    names, counts, sums = pickle.loads(blob)
    return list(names), list(counts), list(sums)


def _encode(names: list[str], counts: list[int], sums: list[float]) -> bytes:
    # As l2m's blobs: numpy columns, not a list of tuples, so decoding is one copy per column.
    return pickle.dumps((names, np.asarray(counts, np.int64), np.asarray(sums)), protocol=5)


class _Blob:
    """The series of one blob: names with their counts and sums, and where each name is."""

    def __init__(self, blob: bytes | None) -> None:
        self.names, self.counts, self.sums = _decode(blob)
        self.pos = {s: i for i, s in enumerate(self.names)}

    def get(self, s: str) -> tuple[int, float]:
        i = self.pos.get(s)
        return (0, 0.0) if i is None else (int(self.counts[i]), float(self.sums[i]))

    def add(self, s: str, count: int, total: float) -> tuple[int, float]:
        """Add to a series (a new one is appended); its new count and sum."""
        i = self.pos.get(s)
        if i is None:
            self.pos[s] = len(self.names)
            self.names.append(s)
            self.counts.append(count)
            self.sums.append(total)
            return count, total
        self.counts[i] += count
        self.sums[i] += total
        return self.counts[i], self.sums[i]

    def encode(self) -> bytes:
        return _encode(self.names, self.counts, self.sums)


def blob_layout(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame],
                state: GroupState) -> Iterator[pd.DataFrame]:
    """``apws_blob``: every series of one (shard, sub-shard) in one blob, decoded and rewritten
    whenever the key is touched."""
    blob = _Blob(state.get[0] if state.exists else None)
    out = []
    for pdf in pdfs:
        if _preload(pdf):
            for s in pdf["series"].tolist():
                blob.add(s, 1, 0.0)
            continue
        for s, c, v in _per_series(pdf):
            out.append((s, *blob.add(s, c, v)))
    state.update((blob.encode(),))
    if out:
        yield pd.DataFrame(out, columns=["series", "count", "sum"])


class DeltaLayout(StatefulProcessor):
    """``tws_delta``: per (shard, sub-shard) a base blob rewritten only when the delta (a small
    dict of the series touched since) outgrows :data:`FOLD` series."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.base = handle.getValueState("base", "b binary")
        self.delta = handle.getValueState("delta", "d binary")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        base = self.base.get()
        blob = _Blob(base[0] if base is not None else None)
        stored = self.delta.get()
        delta: dict[str, tuple[int, float]] = pickle.loads(stored[0]) if stored else {}
        out, preloaded = [], False
        for pdf in rows:
            if _preload(pdf):
                preloaded = True
                delta.update((s, (1, 0.0)) for s in pdf["series"].tolist())
                continue
            for s, c, v in _per_series(pdf):
                dc, dv = delta.get(s, (0, 0.0))
                delta[s] = (dc + c, dv + v)
                bc, bv = blob.get(s)
                out.append((s, bc + dc + c, bv + dv + v))
        # A preload folds at once: its delta would otherwise hold every preloaded series.
        if preloaded or len(delta) > FOLD:
            for s, (dc, dv) in delta.items():
                blob.add(s, dc, dv)
            self.base.update((blob.encode(),))
            self.delta.clear()
        else:
            self.delta.update((pickle.dumps(delta, protocol=5),))
        if out:
            yield pd.DataFrame(out, columns=["series", "count", "sum"])

    def close(self) -> None:
        pass


def build(source: DataFrame, layout: str, sub_shards: int, delta_sub_shards: int) -> DataFrame:
    """The stateful part of ``layout``'s query over the rows of ``source``."""
    if layout in ("tws_map", "tws_map_ttl"):
        ttl = TTL_MS if layout == "tws_map_ttl" else None
        return source.groupBy("shard").transformWithStateInPandas(
            MapLayout(ttl), OUTPUT, "Update", "ProcessingTime" if ttl else "None")
    if layout == "apws_blob":
        keyed = source.withColumn("sub", F.pmod(F.hash("series"), F.lit(sub_shards)))
        return keyed.groupBy("shard", "sub").applyInPandasWithState(
            blob_layout, OUTPUT, "blob binary", "update", GroupStateTimeout.NoTimeout)
    if layout == "tws_delta":
        keyed = source.withColumn("sub", F.pmod(F.hash("series"), F.lit(delta_sub_shards)))
        return keyed.groupBy("shard", "sub").transformWithStateInPandas(
            DeltaLayout(), OUTPUT, "Update", "None")
    raise ValueError(f"unknown layout {layout!r}")


def session() -> SparkSession:
    """A ``local[2]`` session with the RocksDB store and changelog checkpointing, whose Python
    workers run this interpreter (they need pandas and pyarrow)."""
    from l2m.runtime.session import log4j_config

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to loopback" warning
    # pyspark's own applyInPandasWithState worker concatenates empty frames on every call,
    # which pandas warns about each time: noise between the figures, not ours to fix.
    quiet = "ignore:The behavior of DataFrame concatenation:FutureWarning"
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"),
                                                          quiet]))
    conf = {
        "spark.pyspark.python": sys.executable,
        # The 10,000,000-series preloads were run with this heap; RocksDB itself is off-heap.
        "spark.driver.memory": "8g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j_config()}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.adaptive.enabled": "false",  # Spark disables it for stateful queries anyway
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # One micro-batch per file we drop, none in between to muddy the per-batch figures.
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    }
    builder = SparkSession.builder.master("local[2]").appName("state-layouts")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # MapState's getValue of a missing key logs one WARN per miss in the JVM: thousands a batch.
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (Linux ``/proc``; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
            children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            pass
        stack.extend(children.get(pid, []))
    return total


class PeakRss(threading.Thread):
    """Samples :func:`tree_rss` of this process twice a second; ``peak`` is the largest."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.peak = max(self.peak, tree_rss(os.getpid()))


def files(folder: Path) -> dict[str, int]:
    """Every file below ``folder`` with its size."""
    out = {}
    for parent, _dirs, found in os.walk(folder):
        for name in found:
            path = os.path.join(parent, name)
            with contextlib.suppress(OSError):  # RocksDB's maintenance removed it meanwhile
                out[path] = os.path.getsize(path)
    return out


class Stream:
    """One query of ``layout`` on a checkpoint of its own, fed one parquet file per
    micro-batch through :meth:`batch`."""

    def __init__(self, spark: SparkSession, folder: Path, layout: str, sub_shards: int,
                 delta_sub_shards: int) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        self.folder, self.input = folder, folder / "input"
        self.state = folder / "checkpoint" / "state"
        self.input.mkdir(parents=True)
        self.files, self.seen = 0, -1
        source = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1) \
            .parquet(str(self.input))
        self.query: StreamingQuery = (
            build(source, layout, sub_shards, delta_sub_shards)
            .writeStream.format("noop").outputMode("update")
            .option("checkpointLocation", str(folder / "checkpoint")).start())

    def batch(self, index: np.ndarray, value: np.ndarray) -> dict[str, Any]:
        """Run one micro-batch of the series ``index`` with ``value``; its figures."""
        before = files(self.state)
        table = pa.table({"shard": pa.array(index % SHARDS, pa.int32()),
                          "series": pa.array([series_name(i) for i in index.tolist()],
                                             pa.string()),
                          "value": pa.array(value, pa.float64())})
        self.files += 1
        staged = self.folder / "staged.parquet"
        pq.write_table(table, staged)
        # A rename, so the source never lists a half-written file.
        staged.rename(self.input / f"part-{self.files:06d}.parquet")
        self.query.processAllAvailable()
        progress = self._progress()
        after = files(self.state)
        operators = progress.get("stateOperators") or []
        return {"trigger_s": progress["durationMs"]["triggerExecution"] / 1000,
                "add_batch_s": progress["durationMs"].get("addBatch", 0) / 1000,
                "rows": progress["numInputRows"],
                "changelog_bytes": sum(size for path, size in after.items()
                                       if path not in before and path.endswith(".changelog")),
                "other_state_bytes": sum(size - before.get(path, 0)
                                         for path, size in after.items()
                                         if not path.endswith(".changelog")
                                         and size > before.get(path, 0)),
                "state_rows": sum(int(o.get("numRowsTotal", 0)) for o in operators)}

    def _progress(self, timeout_s: float = 60) -> dict[str, Any]:
        # processAllAvailable can return a moment before the batch's progress is recorded.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            new = [p for p in self.query.recentProgress
                   if p["batchId"] > self.seen and p["numInputRows"]]
            if new:
                self.seen = new[-1]["batchId"]
                return new[-1]
            time.sleep(0.05)
        raise TimeoutError(f"no progress for micro-batch {self.seen + 1} in {timeout_s} s")

    def stop(self) -> None:
        self.query.stop()


def preload(stream: Stream, start: int, stop: int, layout: str) -> dict[str, Any]:
    """Write series ``start`` … ``stop - 1`` blindly (not measured beyond its rate)."""
    started = time.monotonic()
    for lo in range(start, stop, LOAD_CHUNK):
        index = np.arange(lo, min(stop, lo + LOAD_CHUNK))
        stream.batch(index, np.full(len(index), np.nan))
    seconds = time.monotonic() - started
    if stop > start:
        print(f"{layout}: preloaded {stop:,} series in {seconds:.1f} s "
              f"({(stop - start) / seconds:,.0f}/s)", file=sys.stderr, flush=True)
    return {"preload_s": round(seconds, 1)}


def measure(stream: Stream, layout: str, live: int, touched: int, batches: int, warmup: int,
            rss: PeakRss) -> dict[str, Any]:
    """``warmup`` + ``batches`` micro-batches touching ``touched`` random live series each (new
    ones when ``live`` is 0); medians of the measured ones."""
    rng = np.random.default_rng(live + touched)
    runs = []
    for b in range(warmup + batches):
        if live:
            index = rng.choice(live, size=touched, replace=False)
        else:
            index = rng.choice(FRESH, size=touched, replace=False) + FRESH
        run = stream.batch(index, rng.random(touched))
        print(f"{layout}: live {live:,}, touched {touched:,}, batch {b} "
              f"({'warm-up' if b < warmup else 'measured'}): {run['trigger_s']:.3f} s, "
              f"changelog {run['changelog_bytes']:,} B", file=sys.stderr, flush=True)
        if b >= warmup:
            runs.append(run)
    changelog = statistics.median(r["changelog_bytes"] for r in runs)
    return {"layout": layout, "live": live, "touched": touched,
            "batch_s": round(statistics.median(r["trigger_s"] for r in runs), 3),
            "batch_runs_s": [round(r["trigger_s"], 3) for r in runs],
            "add_batch_s": round(statistics.median(r["add_batch_s"] for r in runs), 3),
            "changelog_bytes": int(changelog),
            "changelog_bytes_per_touched": round(changelog / touched, 1),
            "other_state_bytes": int(statistics.median(r["other_state_bytes"] for r in runs)),
            "state_rows": runs[-1]["state_rows"], "peak_rss_bytes": rss.peak or None}


def run_layout(layout: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (live, touched) point of one layout, in this process's own Spark session."""
    from pyspark import cloudpickle

    # In a spawned process this module is ``__mp_main__``, which Python workers cannot import:
    # ship the processors by value instead of by reference.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark = session()
    rss = PeakRss()
    rss.start()
    points: list[dict[str, Any]] = []
    shared: Stream | None = None  # live > 0: one query, preloaded level by level
    loaded = 0
    with tempfile.TemporaryDirectory(prefix="state-layouts-") as tmp:
        try:
            for live in sorted(set(opts["live"])):
                touched = [t for t in opts["touched"] if not live or t <= live]
                if not touched:
                    continue
                if live == 0:
                    # Measuring on empty state adds series: a query of its own.
                    stream = Stream(spark, Path(tmp) / "empty", layout, opts["sub_shards"],
                                    opts["delta_sub_shards"])
                    extra: dict[str, Any] = {"preload_s": 0.0}
                else:
                    if shared is None:
                        shared = Stream(spark, Path(tmp) / "live", layout, opts["sub_shards"],
                                        opts["delta_sub_shards"])
                    stream = shared
                    extra = preload(shared, loaded, live, layout)
                    loaded = live
                for t in touched:
                    points.append({**measure(stream, layout, live, t, opts["batches"],
                                             opts["warmup"], rss), **extra})
                if stream is not shared:
                    stream.stop()
        finally:
            if shared is not None:
                shared.stop()
            rss.done.set()
            spark.stop()
    return points


def table(result: dict[str, Any]) -> str:
    """The results as a fixed-width text table."""
    rows = [f"{'layout':<12} {'live':>10} {'touched':>8} {'batch s':>8} {'runs s':<22} "
            f"{'changelog B':>12} {'B/touched':>9} {'state rows':>10} {'RSS GiB':>7}"]
    for p in result["points"]:
        if "error" in p:
            rows.append(f"{p['layout']:<12} failed: {p['error']}")
            continue
        runs = ", ".join(f"{s:.2f}" for s in p["batch_runs_s"])
        rss = f"{p['peak_rss_bytes'] / 2**30:.2f}" if p["peak_rss_bytes"] else "n/a"
        rows.append(f"{p['layout']:<12} {p['live']:>10,} {p['touched']:>8,} "
                    f"{p['batch_s']:>8.3f} {runs:<22} {p['changelog_bytes']:>12,} "
                    f"{p['changelog_bytes_per_touched']:>9,.1f} {p['state_rows']:>10,} "
                    f"{rss:>7}")
    return "\n".join(rows)


def plot(result: dict[str, Any], path: Path) -> None:
    """Batch time and changelog bytes per (live, touched) point, one bar per layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in result["points"] if "error" not in p]
    cases = sorted({(p["live"], p["touched"]) for p in points})
    layouts = [name for name in result["layouts"] if any(p["layout"] == name for p in points)]
    width = 0.8 / max(1, len(layouts))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for k, name in enumerate(layouts):
        at = {(p["live"], p["touched"]): p for p in points if p["layout"] == name}
        xs = [i + (k - (len(layouts) - 1) / 2) * width for i, c in enumerate(cases) if c in at]
        left.bar(xs, [at[c]["batch_s"] for c in cases if c in at], width, label=name)
        right.bar(xs, [at[c]["changelog_bytes"] / 1024 for c in cases if c in at], width,
                  label=name)
    labels = [f"{live:,} live\n{touched:,} touched" for live, touched in cases]
    for ax in (left, right):
        ax.set_xticks(range(len(cases)), labels)
    left.legend()  # the same colours on the right, where a legend would cover the tall bars
    left.set_ylabel("micro-batch duration, s (median)")
    left.set_title("Batch time")
    # Blobs rewrite whole keys (MB) where MapState writes the touched entries (KB): log scale.
    right.set_yscale("log")
    right.set_ylim(bottom=1)  # bars from 1 KiB, so their heights compare on the log scale
    right.set_ylabel("changelog written per batch, KiB")
    right.set_title("Checkpoint bytes")
    m = result["machine"]
    fig.suptitle(f"State layouts: local[2], RocksDB + changelog, {SHARDS} shards; "
                 f"{m['cpus']} cores, pyspark {m['pyspark']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ints(text: str) -> list[int]:
    """A comma-separated list of counts (``1_000_000`` allowed)."""
    return [int(x) for x in text.split(",") if x.strip()]


def layout_list(text: str) -> list[str]:
    """A comma-separated list of layouts from :data:`LAYOUTS`."""
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in LAYOUTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown layout(s) {', '.join(unknown)}; "
                                         f"choose from {', '.join(LAYOUTS)}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.state_layouts")
    ap.add_argument("--live", type=ints, default=[0, 1_000_000],
                    help="live series preloaded, comma-separated (default 0,1000000)")
    ap.add_argument("--touched", type=ints, default=[2_000, 250_000],
                    help="series touched per micro-batch, comma-separated (default "
                         "2000,250000; a count above a non-zero live count is skipped)")
    ap.add_argument("--layouts", type=layout_list, default=list(LAYOUTS),
                    help=f"comma-separated, of {','.join(LAYOUTS)} (default: all)")
    ap.add_argument("--sub-shards", type=int, default=64, help="apws_blob's keys per shard")
    ap.add_argument("--delta-sub-shards", type=int, default=512,
                    help="tws_delta's keys per shard")
    ap.add_argument("--batches", type=int, default=3, help="measured micro-batches per point")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured micro-batches first")
    ap.add_argument("--quick", action="store_true",
                    help="live 0,20000, touched 2000: a few minutes")
    ap.add_argument("--out", default=None, help="results folder (default ./bench-results)")
    args = ap.parse_args(argv)
    if args.quick:
        args.live, args.touched = QUICK["live"], QUICK["touched"]
    out = Path(args.out) if args.out else Path.cwd() / "bench-results"
    out.mkdir(parents=True, exist_ok=True)
    opts = {"live": args.live, "touched": args.touched, "sub_shards": args.sub_shards,
            "delta_sub_shards": args.delta_sub_shards, "batches": args.batches,
            "warmup": args.warmup}
    started = time.monotonic()
    result: dict[str, Any] = {"machine": machine(), "master": "local[2]", "shuffle_partitions": 2,
                              "shards": SHARDS, "ttl_ms": TTL_MS, "fold": FOLD,
                              "layouts": args.layouts, **opts, "points": []}
    for layout in args.layouts:
        # A fresh process (and JVM) per layout: its RSS and RocksDB are its own.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            try:
                result["points"] += pool.submit(run_layout, layout, opts).result()
            except Exception as e:  # one layout failing should not lose the others' figures
                print(f"{layout}: failed: {e!r}", file=sys.stderr)
                result["points"].append({"layout": layout, "error": repr(e)})
    result["seconds"] = round(time.monotonic() - started, 1)
    (out / "state_layouts.json").write_text(json.dumps(result, indent=2))
    plot(result, out / "state_layouts.png")
    print(table(result))
    print(f"({result['machine']['cpus']} cores, {result['seconds']} s; results in {out})")
    return 1 if any("error" in p for p in result["points"]) else 0


if __name__ == "__main__":
    sys.exit(main())
