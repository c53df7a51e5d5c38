"""The Quix Streams peer's own packages, apart from l2m's.

Quix Streams pins confluent-kafka below the release l2m depends on (3.28.1: ``<2.13``), so it
cannot share an environment with l2m without downgrading the Kafka client l2m's users get.
The peer's processes run l2m's interpreter with a folder of their own first on the path: Quix
Streams and its dependencies, its confluent-kafka among them, installed there with
``pip install --target`` on first use (a few seconds from the package index; about 100 MB) and
kept for later runs. l2m itself, its tests and the rest of the benchmark never see it.

The folder: ``$L2M_PEER_SITE`` if set, else ``~/.cache/l2m/`` (``$XDG_CACHE_HOME/l2m/``) named
after the pinned version and the Python version."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# Pinned: the peer's figures are comparable from run to run only with the same library.
QUIXSTREAMS = "quixstreams==3.28.1"


def site_folder() -> Path:
    """Where the peer's packages live (installed or not)."""
    if os.environ.get("L2M_PEER_SITE"):
        return Path(os.environ["L2M_PEER_SITE"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache / "l2m" / f"peer-{QUIXSTREAMS.replace('==', '-')}-{version}"


def ensure_site() -> Path:
    """The peer's packages, installed first when they are not there yet. Raises
    ``RuntimeError`` saying why when pip cannot install them."""
    site = site_folder()
    if (site / ".complete").exists():
        return site
    site.parent.mkdir(parents=True, exist_ok=True)
    partial = site.with_name(f"{site.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    print(f"peer: installing {QUIXSTREAMS} into {site} (once)", file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", "--no-input", "--target",
                           str(partial), QUIXSTREAMS], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"cannot install the peer's {QUIXSTREAMS} into {site}: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    (partial / ".complete").write_text(QUIXSTREAMS + "\n")
    try:
        partial.rename(site)
    except OSError:  # another run installed it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
        if not (site / ".complete").exists():
            raise
    return site


def peer_environment(site: Path, root: Path) -> dict[str, str]:
    """The environment of a peer process: the peer's packages first, then the checkout
    (``benchmarks`` and ``l2m``), then l2m's environment as usual."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(root),
                                         *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONNOUSERSITE"] = "1"
    env.setdefault("PYTHONWARNINGS", "ignore")  # authlib's deprecation notices, per process
    return env
