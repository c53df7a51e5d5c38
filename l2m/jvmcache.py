"""Entry point ``python -m l2m.jvmcache``: builds the driver JVM's class-data archive
(:mod:`l2m.dev.jvmarchive`). Kept under this name because images and their build scripts
(``k8s/scripts/jvm-cache.sh``) run it."""

from __future__ import annotations

import sys

from l2m.dev.jvmarchive import main

if __name__ == "__main__":
    sys.exit(main())
