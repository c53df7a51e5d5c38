"""``python -m l2m``: the command line (:mod:`l2m.cli`)."""

from __future__ import annotations

import sys

from l2m.cli import main

if __name__ == "__main__":
    sys.exit(main())
