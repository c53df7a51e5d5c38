"""Entry point ``python -m l2m.daemon``: Spark's Python worker daemon
(:mod:`l2m.runtime.daemon`). Kept under this name for Spark configurations and images that
name it (``spark.python.daemon.module``); l2m itself now sets ``l2m.runtime.daemon``.

Importing :mod:`l2m.runtime.daemon` first takes Spark's zipped pyspark off the path, before
anything imports pyspark."""

from __future__ import annotations

from l2m.runtime.daemon import main

if __name__ == "__main__":
    main()
