"""Operator-grade errors: one line, ``l2m: error [CODE]: message``, with the real cause (the
Python or Java exception's own message, never py4j's wrapper); tracebacks only with
``--debug``."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2m.errors import (
    SparkError,
)
from l2m.runtime.failures import failure
from tests.support.tools import cli

ROOT = Path(__file__).resolve().parents[2]


def test_a_python_failure_in_a_spark_task_is_reported_by_its_own_message(spark):
    from pyspark.sql import functions as F

    def explode(batches):  # type: ignore[no-untyped-def]
        for _ in batches:
            raise ValueError("a clear cause")
        yield from ()

    frame = spark.range(3).select(F.col("id")).mapInArrow(explode, "id long")
    with pytest.raises(Exception) as err:
        frame.collect()
    error = failure(err.value)
    assert isinstance(error, SparkError)
    assert error.message == "ValueError: a clear cause"



def test_a_bad_master_is_one_line_and_debug_shows_the_traceback(tmp_path):
    logs = tmp_path / "logs.jsonl"
    logs.write_text('{"@timestamp": 1, "message": "x"}\n')
    args = ["backfill", "--rules", str(ROOT / "rules"), "--input", str(logs), "--output",
            str(tmp_path / "out.jsonl"), "--master", "bogus://nowhere"]
    res = cli(*args)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("l2m: error [CONFIG]: ") and "bogus://nowhere" in last
    res = cli("--debug", *args)
    assert res.returncode == 1 and "Traceback" in res.stderr
    assert not (tmp_path / "out.jsonl.partial").exists()


