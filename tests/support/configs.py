"""Job configuration files for the config tests: a minimal Kafka section, and the one line
a broken file is reported as."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2m.config.loader import load_config
from l2m.errors import ConfigError

KAFKA = "kafka:\n  bootstrap.servers: x:1\n"


def config_error(tmp_path: Path, text: str) -> str:
    """The error of a job file holding ``text`` (its path shown as ``job.yaml``)."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.code == "CONFIG"
    return str(err.value).replace(str(path), "job.yaml", 1)
