"""The checkpoint marker through Spark's Hadoop file systems (how an object-store checkpoint
is marked), on the local file system's ``file:`` scheme."""

from __future__ import annotations

import json

import pytest

from l2m.errors import StateFormatError
from l2m.state.checkpoint import check_checkpoint
from l2m.state.format import STATE_FORMAT
from l2m.streaming.job import HadoopFiles


def test_a_checkpoint_is_marked_and_read_back_through_hadoop(spark, tmp_path):
    files = HadoopFiles(spark)
    root = f"file://{tmp_path}/cp"
    assert files.read(f"{root}/l2m.json") is None and not files.is_dir(f"{root}/metrics")
    assert check_checkpoint(root, "metrics", files) == STATE_FORMAT
    assert json.loads((tmp_path / "cp" / "l2m.json").read_text()) == {
        "state_format": STATE_FORMAT}
    files.write(f"{root}/l2m.json", '{"state_format": 2}')  # 0.1.0's, 0.2.0's: continued
    assert check_checkpoint(root, "metrics", files) == 2
    files.write(f"{root}/l2m.json", '{"state_format": 5}')  # a development build's: refused
    with pytest.raises(StateFormatError, match=r"holds state format 5, which only 0\.3\.0 "
                       "development builds wrote"):
        check_checkpoint(root, "metrics", files)
    (tmp_path / "old" / "metrics" / "offsets").mkdir(parents=True)
    assert files.is_dir(f"file://{tmp_path}/old/metrics/offsets")
    assert not files.is_dir(f"file://{tmp_path}/cp/l2m.json")  # a file
