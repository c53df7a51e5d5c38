"""The driver JVM's options for class-data sharing: a start of ``l2m run`` maps the classes an
earlier run loaded from an archive instead of loading and verifying them from Spark's jars.

Input: the Java binary and Spark's jars (their identity names the archive), the
``L2M_JVM_CACHE`` environment variable (a folder; ``off`` disables; default
``$XDG_CACHE_HOME/l2m/jvm`` or ``~/.cache/l2m/jvm``). Output: the JVM options that use the
archive (:func:`java_options`, read by :mod:`l2m.runtime.session`) and where the archive is.
Building it is :mod:`l2m.dev.jvmarchive`'s job (a training run of the whole job, so it sits
above the runtime).

Measured here (2 cores, Java 17): session start 7.5 s → 3.9 s, the first Spark job 3.8 s →
1.8 s; the archive is about 150 MB."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
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
    """What an archive is only valid for: this Java binary, the JDK's own base archive and
    this set of Spark jars. A dynamic archive records the base archive it was made on top of
    and is refused (silently: :data:`QUIET`) once that changes — and a JDK's base archive is
    rewritten in place, by a package's post-install step or ``java -Xshare:dump``, with the
    binary unchanged. Without the base in the name, one such rewrite left every later start
    without an archive (the Spark session's start 2.4 → 4 s)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    home = java.parent.parent
    bases = [path for path in (home / "lib" / "server" / "classes.jsa",
                               home / "lib" / "server" / "classes_nocoops.jsa")
             if path.is_file()]
    digest = hashlib.sha256()
    for path in (java, *bases, *sorted(jars.glob("*.jar"))):
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


def lock_file(path: Path) -> Path:
    return path.with_suffix(".lock")


def locked(path: Path) -> bool:
    """Another live process is building this archive."""
    try:
        pid = int(lock_file(path).read_text().strip() or "0")
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
