"""The tests run against the Kafka client l2m's users get: the installed confluent-kafka is at
least the floor pyproject.toml sets (a current release), and no extra pulls in a package that
would hold it below that (quixstreams, the benchmark's peer, pins confluent-kafka < 2.13: it is
installed apart, benchmarks/peer_env.py)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import confluent_kafka
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def confluent_floor() -> Version:
    (req,) = [Requirement(d) for d in PROJECT["dependencies"]
              if Requirement(d).name == "confluent-kafka"]
    (floor,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return floor


def test_the_installed_kafka_client_is_the_one_users_get() -> None:
    floor = confluent_floor()
    assert floor >= Version("2.16.1"), "keep the floor at a current release"
    installed = Version(importlib.metadata.version("confluent-kafka"))
    assert installed >= floor, (
        f"confluent-kafka {installed} is installed, pyproject.toml asks for >= {floor}: "
        "something downgraded it (pip install -e '.[test]' again, and see what pins it)")
    # The module imported is that distribution (not a copy shadowing it on the path).
    assert Version(confluent_kafka.__version__) == installed


def test_no_extra_holds_the_kafka_client_back() -> None:
    extras = PROJECT["optional-dependencies"]
    for name, requirements in extras.items():
        names = {Requirement(r).name.lower() for r in requirements}
        assert "quixstreams" not in names, f"extra {name!r}: quixstreams pins an older client"
    # What the installed extras' packages require of the client, the installed one satisfies.
    installed = Version(importlib.metadata.version("confluent-kafka"))
    for requirement in extras["test"]:
        dist = Requirement(requirement).name
        for needed in importlib.metadata.requires(dist) or []:
            req = Requirement(needed)
            if req.name == "confluent-kafka" and (req.marker is None
                                                  or req.marker.evaluate({"extra": ""})):
                assert req.specifier.contains(installed, prereleases=True), (dist, needed)
