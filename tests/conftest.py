"""Shared fixtures and the test tiers.

Tests are tiered like the package: ``tests/unit`` (no JVM, no broker: must run in seconds),
``tests/spark`` (the one shared local Spark session), ``tests/integration`` (the embedded
broker, real Prometheus tools, whole ``l2m`` processes); ``tests/support`` holds the reference
evaluator and helpers. Each test gets its folder's marker (``-m unit``, ``-m spark``,
``-m integration``), and a unit test that asks for the Spark session or the broker is an
error, not a slow test (markers: pyproject.toml). One local Spark session serves the whole
run (sessions are slow to start), created only when a test needs it; each tier's own fixtures
are in its folder's conftest.py."""

from __future__ import annotations

import functools
import operator
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What the user set (a folder, or off), before the default below hides it: the integration
# tier builds its archive there (tests/integration/conftest.py).
USER_JVM_CACHE = os.environ.get("L2M_JVM_CACHE")
# Every `l2m run` a test starts would otherwise build the JVM class-data archive beside it
# (45-70 s of a core, l2m/runtime/jvm.py), and later runs would start faster than earlier
# ones: the unit and spark tiers alone run on a plain JVM (tests/spark/test_jvmcache.py checks
# the archive on its own); the integration tier builds it before its first test and turns it
# on for the rest of the run.
os.environ.setdefault("L2M_JVM_CACHE", "off")

TIERS = ("unit", "spark", "integration")
# The order the tiers run in. The unit tier first: it needs no JVM, and meanwhile the child
# pytest (tests/support/background.py) builds the JVM class-data archive the integration
# tier waits for (33 s of waiting when integration ran first, alphabetically); the spark tier
# last, on the session an integration test started with the archive.
RUN_ORDER = ("unit", "integration", "spark")
# What a unit test may not use: each starts a JVM or a broker.
HEAVY_FIXTURES = ("spark", "broker", "stream_test")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # `-m unit` (any -m naming tiers alone) selects nothing in another tier's folder: left
    # unread, its modules (pandas, pyspark, the harness: ~1.5 s of a core) are not imported.
    if collection_path.parent == ROOT / "tests" and collection_path.name in TIERS:
        selected = _selected_tiers(config.option.markexpr or "")
        if selected is not None and collection_path.name not in selected:
            return True
    return None


@functools.cache
def _selected_tiers(markexpr: str) -> frozenset[str] | None:
    """The tiers ``-m markexpr`` selects, or None when it names anything but tiers (then
    which tests it selects is known only once they are collected)."""
    names = set(re.findall(r"[^\s()]+", markexpr)) - {"and", "or", "not"}
    if not names or not names <= set(TIERS):
        return None
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)
    return frozenset(tier for tier in TIERS
                     if expression.evaluate(functools.partial(operator.eq, tier)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in tests/unit, tests/spark or "
                                    "tests/integration")
        item.add_marker(getattr(pytest.mark, tier))
        heavy = [f for f in HEAVY_FIXTURES if f in getattr(item, "fixturenames", ())]
        if tier == "unit" and heavy:
            raise pytest.UsageError(f"{item.nodeid} is a unit test but uses {', '.join(heavy)}: "
                                    "move it to tests/spark or tests/integration")
    items.sort(key=lambda item: RUN_ORDER.index(
        Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]))  # stable: files keep order


def pytest_collection_finish(session: pytest.Session) -> None:
    # The slowest self-contained files run in a child pytest beside the rest (their waits
    # overlap the suite's): tests/support/background.py.
    if not session.config.option.collectonly:
        from tests.support.background import move_to_child

        move_to_child(session.items, USER_JVM_CACHE)


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
