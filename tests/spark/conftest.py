"""Fixtures of the Spark tier: the in-memory streaming harness (no broker) on the shared
session (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def stream_test(spark: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """A factory of in-memory streaming harnesses (:class:`tests.streamtest.StreamTest`):
    ``stream_test(rules, **options)``, each on its own folder under ``tmp_path``. Their queries
    are stopped at teardown, so a failed test never leaves the job's query running (its name
    is fixed: the next test's query could not start)."""
    from tests.support.streamtest import StreamTest

    made: list[StreamTest] = []

    def make(rules: Any, **options: Any) -> StreamTest:
        harness = StreamTest(spark, rules, tmp_path / f"stream{len(made)}", **options)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.stop()
