"""Shared fixtures: one local Spark session for the whole test run (sessions are slow to
start), created only when a test needs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from l2m.session import build_session

    session = build_session("local[2]", "l2m-tests", {"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()
