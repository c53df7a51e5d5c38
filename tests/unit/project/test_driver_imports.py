"""What Spark's driver-side Python processes import of l2m: each query start runs the source's
lookup and creation, its runner, the read planning, the state processor's ``init``, the sink's
writer and its commit, each in a fresh process and one after another. The modules they load
(by unpickling l2m's classes) must not pull in what only the executors' work needs: Arrow,
pandas and numpy cost 0.1-0.36 s per process, on the start's critical path: about 0.7 s of
every query start."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pyarrow", "pandas", "numpy", "msgspec", "luqum", "l2m.engine.readtask",
         "l2m.engine.partials", "l2m.state.processor")


@pytest.mark.parametrize("module", ["l2m.kafka.source", "l2m.kafka.sink", "l2m.state.variables",
                                    "l2m.engine.rulesets", "l2m.engine.columns"])
def test_a_module_spark_loads_on_the_driver_imports_nothing_heavy(module):
    code = (f"import sys, {module}\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.split()
    assert found == []
