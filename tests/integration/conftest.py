"""Fixtures of the integration tier: the driver JVM's class-data archive, built once before
the first test; the embedded broker (tansu, in memory), one for the whole run — tests use fresh
topics (tests/support/kafka_helpers.py); a Prometheus per test that receives remote write."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, USER_JVM_CACHE
from tests.integration.prometheus_server import running_prometheus


@pytest.fixture(scope="session", autouse=True)
def jvm_archive() -> Iterator[Path | None]:
    """The driver JVM's class-data archive (l2m/runtime/jvm.py), for every JVM this tier
    starts — each `l2m run` a test starts, the shared session: built once, before the first
    test (a minute of one core; kept in .tools/jvm, named for this Java and Spark, so a later
    run reuses it), each start then about 5 s shorter, and the same for every test.
    ``L2M_JVM_CACHE=off`` keeps the plain JVM, a folder puts the archive there. Its path, or
    ``None`` when off or it could not be built (then off: a continuous ``l2m run`` would
    otherwise start building one beside each test)."""
    from l2m.dev import jvmarchive
    from l2m.runtime import jvm

    with pytest.MonkeyPatch.context() as env:
        env.setenv(jvm.ENV, USER_JVM_CACHE or str(ROOT / ".tools" / "jvm"))
        path = jvm.archive()
        if path is not None and not path.is_file():
            deadline = time.monotonic() + 600
            while jvm.locked(path) and time.monotonic() < deadline:  # another run builds it
                time.sleep(1)
            if not path.is_file():
                jvmarchive.build(path)
        if path is None or not path.is_file():
            env.setenv(jvm.ENV, "off")
            path = None
        yield path


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """One embedded broker (tansu, in memory) for the whole run; tests use fresh topics."""
    from l2m.dev.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    """A Prometheus with the remote-write receiver and a 30-minute out-of-order window (the
    one docs/prometheus.md asks for); its base URL."""
    # It scrapes itself every second: its own counters of refused samples are checked.
    with running_prometheus(tmp_path, scrape_self=True) as base:
        yield base
