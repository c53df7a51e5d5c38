"""The driver JVM's class-data archive (l2m/runtime/jvm.py): where it lives, when it is used,
and that a damaged one is never put in place (a truncated archive crashes the JVM)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from l2m.dev import jvmarchive
from l2m.runtime import jvm as jvmcache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(jvmcache.ENV, str(tmp_path / "jvm"))
    monkeypatch.delenv(jvmcache.DUMP_ENV, raising=False)
    return tmp_path / "jvm"


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_the_cache_can_be_switched_off(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvmcache.ENV, value)
    monkeypatch.delenv(jvmcache.DUMP_ENV, raising=False)
    assert jvmcache.cache_dir() is None and jvmcache.archive() is None
    assert jvmcache.java_options() == ""
    assert jvmarchive.build_in_background() is False


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(jvmcache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert jvmcache.cache_dir() == tmp_path / "l2m" / "jvm"


def test_the_archive_is_named_for_this_java_and_spark(cache: Path) -> None:
    import pyspark

    path = jvmcache.archive()
    assert path is not None and path.parent == cache
    assert path.name.startswith(f"spark-{pyspark.__version__}-") and path.suffix == ".jsa"
    assert jvmcache.archive() == path  # stable between calls


def test_a_rewritten_base_archive_names_a_new_archive(cache: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A JDK's post-install step (or `java -Xshare:dump`) rewrites its base archive in place;
    # the JVM then refuses every dynamic archive made on the old one, without a word.
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_bytes(b"java")
    base = home / "lib" / "server" / "classes.jsa"
    base.write_bytes(b"base")
    monkeypatch.setattr(jvmcache, "_java", lambda: java)
    first = jvmcache.archive()
    base.write_bytes(b"rewritten base")
    os.utime(base, (1_800_000_000, 1_800_000_000))
    second = jvmcache.archive()
    assert first is not None and second is not None and first != second
    assert jvmcache.archive() == second


def test_options_map_an_existing_archive_only(cache: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert jvmcache.java_options() == ""  # none yet: a plain start
    path = jvmcache.archive()
    assert path is not None
    cache.mkdir(parents=True)
    path.write_bytes(b"x")
    assert jvmcache.java_options() == f"-XX:SharedArchiveFile={path} {jvmcache.QUIET}"
    monkeypatch.setenv(jvmcache.DUMP_ENV, "/tmp/out.jsa")  # the training process writes one
    assert jvmcache.java_options() == f"-XX:ArchiveClassesAtExit=/tmp/out.jsa {jvmcache.QUIET}"


def test_a_build_in_progress_is_not_started_twice(cache: Path) -> None:
    path = jvmcache.archive()
    assert path is not None
    cache.mkdir(parents=True)
    lock = path.with_suffix(".lock")
    lock.write_text(str(os.getpid()))  # a live builder
    assert jvmarchive.build_in_background() is False
    assert jvmarchive.build(path) is False
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(str(dead.pid))  # its builder died: the lock is stale
    assert not jvmcache.locked(path)


def test_a_truncated_archive_does_not_pass_the_check(tmp_path: Path) -> None:
    java = jvmcache._java()
    if java is None:
        pytest.fail("Java 17 is required (see README)")
    whole = tmp_path / "whole.jsa"
    subprocess.run([str(java), f"-XX:ArchiveClassesAtExit={whole}", jvmcache.QUIET, "-version"],
                   check=True, capture_output=True, timeout=120)
    assert whole.stat().st_size > 10_000
    assert jvmcache.loads(whole)
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert not jvmcache.loads(cut)


def test_old_archives_are_pruned(tmp_path: Path) -> None:
    for age, name in enumerate(["spark-a.jsa", "spark-b.jsa", "spark-c.jsa"]):
        path = tmp_path / name
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))  # a newest, c oldest
    (tmp_path / "notes.txt").write_text("kept")
    jvmarchive._prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "spark-a.jsa",
                                                          "spark-b.jsa"]
