"""Class-data sharing for the driver JVM: a start of ``l2m run`` maps the classes an earlier
run loaded from an archive instead of loading and verifying them from Spark's jars.

Input: the Java binary and Spark's jars (their identity names the archive), the
``L2M_JVM_CACHE`` environment variable (a folder; ``off`` disables; default
``$XDG_CACHE_HOME/l2m/jvm`` or ``~/.cache/l2m/jvm``). Output: the JVM options that use the
archive (:func:`java_options`), and the archive itself, built by a short training job — a
``--once`` run of two rules through an embedded broker — in a detached, low-priority process
(:func:`build_in_background`, started by ``l2m run`` once its query runs) or at image build
time (``python -m l2m.runtime.jvm``).

Measured here (2 cores, Java 17): session start 7.5 s → 3.9 s, the first Spark job 3.8 s →
1.8 s; the archive is about 150 MB. Java 17 has no ``-XX:+AutoCreateSharedArchive`` (19+),
and a truncated archive crashes the JVM (SIGBUS) instead of being ignored, so an archive only
ever reaches its final name whole: written under a temporary name by a JVM that exited
normally, checked by starting a JVM on it, then renamed. A stale archive (another Java or
Spark) simply has another name (the two newest archives are kept, older ones deleted); one the
JVM cannot use is ignored silently."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "L2M_JVM_CACHE"
# Set by the training process for its own session: write the archive there at exit.
DUMP_ENV = "L2M_JVM_ARCHIVE_OUT"
KEEP = 2  # archives kept in the folder: this install's and one other (e.g. a second venv)
QUIET = "-Xlog:cds*=off"  # an unusable archive is not worth a warning on every start


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def _identity() -> str | None:
    """What an archive is only valid for: this Java binary and this set of Spark jars."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    digest = hashlib.sha256()
    for path in (java, *sorted(jars.glob("*.jar"))):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{int(stat.st_mtime)}\n".encode())
    return f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}"


def cache_dir() -> Path | None:
    """The archive folder, or ``None`` when caching is off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("off", "0", "false", "no"):
        return None
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "l2m" / "jvm"


def archive() -> Path | None:
    """Where this Java + Spark's archive is (or would be); ``None`` when caching is off."""
    folder = cache_dir()
    identity = _identity() if folder is not None else None
    return folder / f"{identity}.jsa" if folder is not None and identity else None


def java_options() -> str:
    """Options for the driver JVM: dump the archive (in the training process), map it when
    it exists, else nothing."""
    out = os.environ.get(DUMP_ENV)
    if out:
        return f"-XX:ArchiveClassesAtExit={out} {QUIET}"
    path = archive()
    if path is not None and path.is_file():
        return f"-XX:SharedArchiveFile={path} {QUIET}"
    return ""


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
    if not os.access(path.parent, os.W_OK) or _locked(path):
        return False
    log = path.with_suffix(".log")
    with contextlib.suppress(OSError), open(log, "wb") as out:
        subprocess.Popen([sys.executable, "-m", "l2m.runtime.jvm", "--background"],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
        return True
    return False


def _lock(path: Path) -> Path:
    return path.with_suffix(".lock")


def _locked(path: Path) -> bool:
    """Another live process is building this archive."""
    try:
        pid = int(_lock(path).read_text().strip() or "0")
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def loads(path: Path) -> bool:
    """A JVM starts with this archive mapped. A truncated one kills the JVM (SIGBUS) instead
    of being ignored, so no archive takes its final name without passing this."""
    java = _java()
    if java is None:
        return False
    with tempfile.TemporaryDirectory() as scratch:  # where a crash writes its hs_err file
        check = subprocess.run([str(java), f"-XX:SharedArchiveFile={path}", QUIET,
                                f"-XX:ErrorFile={scratch}/hs_err.log", "-version"],
                               capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                               cwd=scratch)
    return check.returncode == 0


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
    lock = _lock(path)
    if _locked(path):
        return False
    lock.write_text(str(os.getpid()))
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    try:
        env = {**os.environ, DUMP_ENV: str(tmp)}
        started = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "l2m.runtime.jvm", "--train"], env=env,
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
        if proc is not None:  # the JVM writes the archive as it exits: wait for it
            gateway.shutdown()
            with contextlib.suppress(OSError):
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
