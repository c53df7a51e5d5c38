"""Fixtures of the integration tier: the embedded broker (tansu, in memory), one for the
whole run; tests use fresh topics (tests/support/kafka_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """One embedded broker (tansu, in memory) for the whole run; tests use fresh topics."""
    from l2m.dev.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded
