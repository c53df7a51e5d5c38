"""Shared fixtures: one local Spark session for the whole test run (sessions are slow to
start), created only when a test needs it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Every `l2m run` a test starts would otherwise build the JVM class-data archive beside it
# (45 s of a core, l2m/runtime/jvm.py), and later runs would start faster than earlier ones:
# tests run on a plain JVM, and tests/test_jvmcache.py checks the archive on its own.
os.environ.setdefault("L2M_JVM_CACHE", "off")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from l2m.runtime.session import build_session
    from l2m.streaming.job import register, streaming_conf

    # Tests keep their checkpoints in temporary folders: a local disk, as on a laptop.
    session = build_session("local[2]", "l2m-tests",
                            {**streaming_conf("/tmp"), "spark.sql.shuffle.partitions": "4"})
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """One embedded broker (tansu, in memory) for the whole run; tests use fresh topics."""
    from l2m.dev.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded


@pytest.fixture
def stream_test(spark: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """A factory of in-memory streaming harnesses (:class:`tests.streamtest.StreamTest`):
    ``stream_test(rules, **options)``, each on its own folder under ``tmp_path``. Their queries
    are stopped at teardown, so a failed test never leaves the job's query running (its name
    is fixed: the next test's query could not start)."""
    from tests.streamtest import StreamTest

    made: list[StreamTest] = []

    def make(rules: Any, **options: Any) -> StreamTest:
        harness = StreamTest(spark, rules, tmp_path / f"stream{len(made)}", **options)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.stop()
