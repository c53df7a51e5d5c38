"""Spark's Python worker daemon (``pyspark.daemon``), started without the zipped copies of
pyspark and py4j that Spark puts first on every worker's ``PYTHONPATH``.

A pip-installed pyspark ships ``pyspark/python/lib/pyspark.zip`` and Spark prepends it, so
every forked worker imports pyspark from the zip: source compiled on each import (zips get
no bytecode cache), and each task's ``importlib.invalidate_caches()`` re-reads the zip's
directory. Profiles of the streaming job put about 15% of all Python CPU there. The
installed package is the same code; this daemon imports it with cached bytecode. Set with
``spark.python.daemon.module`` (:mod:`l2m.runtime.session`)."""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import sys


def _without_bundled_zips() -> None:
    bundled = [p for p in sys.path if os.path.basename(p) == "pyspark.zip"
               or (os.path.basename(p).startswith("py4j-") and p.endswith("-src.zip"))]
    if not bundled:
        return
    kept = [p for p in sys.path if p not in bundled]
    saved = sys.path[:]
    sys.path[:] = kept
    for path in bundled:
        sys.path_importer_cache.pop(path, None)
    importlib.invalidate_caches()
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("py4j") is None:
        sys.path[:] = saved  # no installed copy: the zips are all there is


_without_bundled_zips()

# What every worker needs, imported before the workers fork (and by l2m's fork server before
# it forks the daemon): l2m's stages with pandas, pyarrow, orjson and confluent-kafka, and
# pyarrow.acero, which pyarrow's group_by imports on first use (30 ms).
STAGES = ("pyarrow.acero", "l2m.batch.backfill", "l2m.engine.readtask", "l2m.engine.streamtask",
          "l2m.kafka.sink", "l2m.kafka.source", "l2m.state.format2", "l2m.state.processor")


def preload() -> None:
    """Import :data:`STAGES`; one that fails is imported on demand by the worker needing it."""
    for name in STAGES:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def main() -> None:
    """Run Spark's worker daemon with l2m's stages pre-imported and frozen."""
    from pyspark.daemon import manager

    # Its own process group: a signal sent to the driver's group (SIGTERM for a graceful
    # stop, SIGINT from a terminal) must not kill the workers of the batch being finished.
    # The daemon still exits when its JVM does (it watches its stdin).
    os.setpgrp()
    # Workers are forked from this daemon: what it has imported, every worker has for free.
    # l2m's stages cost each new worker ~0.65 s of imports otherwise — on every restart's
    # first batch, once per worker.
    preload()
    # pyspark runs a full gc.collect() in a reused worker after every task: ~20 ms over the
    # modules alone, 29% of all Python worker CPU in a drain. Frozen here, before the
    # workers fork, they are never scanned again (and their pages stay shared).
    gc.freeze()
    manager()


if __name__ == "__main__":
    main()
