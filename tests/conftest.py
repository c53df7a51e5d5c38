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
    from l2m.streaming import STREAMING_CONF, register

    session = build_session("local[2]", "l2m-tests",
                            {**STREAMING_CONF, "spark.sql.shuffle.partitions": "4"})
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """One embedded broker (tansu, in memory) for the whole run; tests use fresh topics."""
    from l2m.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded
