"""The suite's slowest self-contained test files, run in a child pytest beside the rest.

Input: the session's selected items. Output: the same items, those of :data:`FILES` replaced
by :class:`BackgroundItem` (at the end of the run), whose outcome is the child's.

The files below start their own processes — `l2m run`, `l2m deliver`, the demo, the harness,
their own broker and Prometheus — and spend most of their time waiting on them (triggers,
kills, restarts), while the rest of the suite also waits on its own clocks: run one after the
other, two mostly idle cores added up to 12–13 minutes. The child runs them in their own
pytest session (its own broker; the JVM archive the parent builds, waited for under its lock),
started when collection ends, so both waits overlap; each test keeps every assertion and is
reported under its own node id, its failure text and captured output included. Run alone
(``pytest tests/integration/test_kill9.py``, or inside the child), they run in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ("tests/integration/test_bench.py", "tests/integration/test_kill9.py",
         "tests/integration/test_live_rules.py", "tests/integration/test_deliver_faults.py",
         "tests/integration/test_demo.py")
INNER = "L2M_TESTS_IN_CHILD"  # set in the child: it runs its tests itself
TIMEOUT_S = 1_800  # the child's whole run, far above its few minutes


def backgrounded(nodeid: str) -> bool:
    """Is ``nodeid`` a test of a file the child runs?"""
    return nodeid.split("::")[0] in FILES


class Child:
    """The child pytest running ``nodeids``; its per-test outcomes read from its JUnit XML."""

    def __init__(self, nodeids: list[str], user_jvm_cache: str | None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="l2m-tests-child-"))
        self.xml = self.folder / "junit.xml"
        self.log = self.folder / "output.txt"
        env = {**os.environ, INNER: "1"}
        # The parent sets L2M_JVM_CACHE=off for its unit and spark tiers; the child's
        # integration tier must see what the user set, to share the parent's archive.
        env.pop("L2M_JVM_CACHE", None)
        if user_jvm_cache is not None:
            env["L2M_JVM_CACHE"] = user_jvm_cache
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-o", "junit_logging=all", f"--junitxml={self.xml}", *nodeids],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.started = time.monotonic()
        self._outcomes: dict[str, tuple[str, str]] | None = None

    def outcome(self, nodeid: str) -> tuple[str, str]:
        """(``passed`` | ``failed`` | ``skipped`` | ``missing``, text) of one test, once the
        child has ended."""
        if self._outcomes is None:
            try:
                self.process.wait(timeout=max(1.0, TIMEOUT_S - (time.monotonic() - self.started)))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self._outcomes = self._read()
        return self._outcomes.get(nodeid, ("missing", self.log.read_text(errors="replace")[-4000:]))

    def _read(self) -> dict[str, tuple[str, str]]:
        if not self.xml.is_file():
            return {}
        outcomes: dict[str, tuple[str, str]] = {}
        for case in ET.parse(self.xml).iter("testcase"):
            module = case.get("classname", "")
            nodeid = f"{module.replace('.', '/')}.py::{case.get('name')}"
            text = "\n".join(part for element in case for part in (
                element.get("message", ""), element.text or "") if part)
            if case.find("failure") is not None or case.find("error") is not None:
                outcomes[nodeid] = ("failed", text)
            elif case.find("skipped") is not None:
                outcomes[nodeid] = ("skipped", text)
            else:
                outcomes[nodeid] = ("passed", text)
        return outcomes


class BackgroundItem(pytest.Item):
    """A test the child ran: passes, fails or is skipped as it did there, with its text."""

    child: Child

    def runtest(self) -> None:
        status, text = self.child.outcome(self.nodeid)
        if status == "skipped":
            pytest.skip(text.strip().splitlines()[0] if text.strip() else "skipped in the child")
        if status != "passed":
            raise BackgroundFailure(f"{self.nodeid} {status} in the child pytest "
                                    f"({self.child.folder}):\n{text}")
        seeds = [line for line in text.splitlines() if line.startswith("seed")]
        if seeds:
            print("\n".join(seeds))  # a fault test's seed, shown as it would be in-process

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        if isinstance(excinfo.value, BackgroundFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.name} (in the child pytest)"


class BackgroundFailure(Exception):
    """A test that failed (or never reported) in the child."""


def move_to_child(items: list[pytest.Item], user_jvm_cache: str | None) -> None:
    """Starts the child for the selected tests of :data:`FILES`, when others are selected
    too (alone, they gain nothing from a child), and puts their stand-ins last, in place."""
    if os.environ.get(INNER):
        return
    moved = [item for item in items if backgrounded(item.nodeid)]
    if not moved or len(moved) == len(items):
        return
    child = Child([item.nodeid for item in moved], user_jvm_cache)
    stand_ins: list[pytest.Item] = []
    for item in moved:
        assert item.parent is not None  # a test function's module
        stand_in = BackgroundItem.from_parent(item.parent, name=item.name)
        stand_in.child = child
        for marker in item.iter_markers():
            stand_in.add_marker(marker.name)
        stand_ins.append(stand_in)
    items[:] = [item for item in items if not backgrounded(item.nodeid)] + stand_ins
