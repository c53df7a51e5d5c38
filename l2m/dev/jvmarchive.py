"""Building the driver JVM's class-data archive (its use: :mod:`l2m.runtime.jvm`).

Input: where the archive goes (:func:`l2m.runtime.jvm.archive`). Output: the archive, built
by a short training job — a
``--once`` run of two rules through an embedded broker — in a detached, low-priority process
(:func:`build_in_background`, started by ``l2m run`` once its query runs) or at image build
time (``python -m l2m.jvmcache``, the entry point the image names).

Measured here (2 cores, Java 17): session start 7.5 s → 3.9 s, the first Spark job 3.8 s →
1.8 s; the archive is about 150 MB. Java 17 has no ``-XX:+AutoCreateSharedArchive`` (19+),
and a truncated archive crashes the JVM (SIGBUS) instead of being ignored, so an archive only
ever reaches its final name whole: written under a temporary name by a JVM that exited
normally, checked by starting a JVM on it, then renamed. A stale archive (another Java, its
base archive rewritten, or another Spark) simply has another name (the two newest archives
are kept, older ones deleted); one the JVM cannot use is ignored silently."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from l2m.runtime.jvm import DUMP_ENV, ENV, KEEP, archive, loads, lock_file, locked


def build_in_background() -> bool:
    """Start building the archive in a detached, low-priority process when there is none and
    none is being built; ``True`` when one was started."""
    path = archive()
    if path is None or path.exists():
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    if not os.access(path.parent, os.W_OK) or locked(path):
        return False
    log = path.with_suffix(".log")
    with contextlib.suppress(OSError), open(log, "wb") as out:
        subprocess.Popen([sys.executable, "-m", "l2m.dev.jvmarchive", "--background"],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
        return True
    return False


def _prune(folder: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest archives: each upgrade of Java or Spark names a new
    one (about 170 MB), and the old ones would otherwise stay forever."""
    found = sorted(folder.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[keep:]:
        old.unlink(missing_ok=True)


def build(path: Path, timeout: float = 600.0) -> bool:
    """Build the archive at ``path``: train in a child process (so its JVM has exited and
    finished writing), check the result can be mapped, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_file(path)
    if locked(path):
        return False
    lock.write_text(str(os.getpid()))
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    try:
        env = {**os.environ, DUMP_ENV: str(tmp)}
        started = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "l2m.dev.jvmarchive", "--train"], env=env,
                             timeout=timeout, stdin=subprocess.DEVNULL)
        if res.returncode != 0 or not tmp.is_file():
            print(f"l2m jvmcache: training failed ({res.returncode})", file=sys.stderr)
            return False
        if not loads(tmp):
            print("l2m jvmcache: the new archive does not load; discarded", file=sys.stderr)
            return False
        os.replace(tmp, path)
        _prune(path.parent, KEEP)
        print(f"l2m jvmcache: {path} ({path.stat().st_size / 2**20:.0f} MiB) in "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr)
        return True
    finally:
        tmp.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


def train() -> int:
    """A ``--once`` run of a counter and a gauge rule over a few logs through an embedded
    broker: the classes a real start loads. Its JVM writes the archive when it exits."""
    from pyspark import SparkContext

    from l2m.config.job import JobConfig, Topics
    from l2m.dev.broker import EmbeddedBroker, create_topics
    from l2m.dev.generator import LogGenerator
    from l2m.rules.loader import load_text
    from l2m.runtime.runner import session_for
    from l2m.streaming.job import start_job

    rules, _ = load_text(
        "rules:\n"
        "  - {id: c, name: c_total, kind: counter, query: 'service:web', aggregation: count,"
        " group_by: [service]}\n"
        "  - {id: g, name: g_avg, kind: gauge, query: '_exists_:http.status',"
        " aggregation: avg, field: http.status, group_by: [service]}\n")
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        from confluent_kafka import Producer

        topics = Topics(logs="train-logs", metrics="train-metrics", dead_letters="train-dead")
        create_topics(broker.bootstrap, [topics.logs, topics.metrics, topics.dead_letters])
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": "3"})
        for line in LogGenerator().lines(500):
            producer.produce(topics.logs, line)
        producer.flush(30)
        cfg = JobConfig(kafka={"bootstrap.servers": broker.bootstrap}, topics=topics,
                        checkpoint=str(Path(tmp) / "checkpoint"), master="local[2]",
                        spark={"spark.sql.shuffle.partitions": "2"})
        spark = session_for(cfg)
        start_job(spark, cfg, rules, once=True).query.awaitTermination()
        gateway = SparkContext._gateway
        spark.stop()
        proc = getattr(gateway, "proc", None)
        if gateway is not None and proc is not None:  # the JVM writes the archive as it exits
            gateway.shutdown()
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            proc.wait(timeout=300)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--train"]:
        return train()
    if args == ["--background"]:  # the job it was started beside comes first
        os.nice(19)
    path = archive()
    if path is None:
        print(f"l2m jvmcache: off ({ENV}) or no Java found", file=sys.stderr)
        return 1
    if path.exists():
        print(f"l2m jvmcache: {path} exists", file=sys.stderr)
        return 0
    return 0 if build(path) else 1


if __name__ == "__main__":
    sys.exit(main())
