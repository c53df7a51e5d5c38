#!/usr/bin/env bash
# Installs Prometheus and promtool (Debian's `prometheus` package, 2.42) into .tools/prometheus
# without root and without touching the system: the package is downloaded and unpacked, not
# installed. The tests find the binaries there (tests/support/tools.py). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.tools/prometheus
if [ -x "$dest/usr/bin/prometheus" ] && [ -x "$dest/usr/bin/promtool" ]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download needs no root; as root it warns that it could not drop to _apt.
(cd "$work" && apt-get download prometheus >/dev/null 2>&1) || {
  echo "tools/prometheus.sh: 'apt-get download prometheus' failed (a Debian package index is needed)" >&2
  exit 1
}
mkdir -p "$dest"
dpkg-deb -x "$work"/prometheus_*.deb "$dest"
"$dest/usr/bin/promtool" --version | head -1
