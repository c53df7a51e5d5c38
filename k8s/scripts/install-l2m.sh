#!/usr/bin/env bash
# Builds l2m as a wheel and installs it into a virtual environment: the two Python steps of
# k8s/Dockerfile, runnable outside Docker as well.
#
#   install-l2m.sh [--print] compiler
#       a C compiler for the build (Debian's gcc and libc6-dev), unless one is on PATH: the
#       wheel has a C extension, l2m.engine._scan (Python's headers come with the python image)
#   install-l2m.sh [--print] build SRC WHEEL_DIR
#       the wheel of the project at SRC (pyproject.toml, README.md, l2m/) into WHEEL_DIR; built
#       from a copy, so SRC gets no build/ or *.egg-info
#   install-l2m.sh [--print] [--no-deps] [--spark-home LINK] install WHEEL_DIR VENV
#       a new venv at VENV with that wheel and its dependencies (pyspark included); LINK, when
#       given, becomes a symlink to the installed pyspark (SPARK_HOME for the executors'
#       entry point and for the S3A jars), with an empty conf/ for Spark's executor ConfigMap
#
# --print  prints the commands instead of running them (nothing is built or installed)
# --no-deps  installs the wheel alone (a quick check that it installs and runs)
# Environment: PYTHON (default python3) is the interpreter the venv is made from.
set -euo pipefail

print=false
no_deps=false
spark_home=
while [ $# -gt 0 ]; do
  case "$1" in
    --print) print=true; shift ;;
    --no-deps) no_deps=true; shift ;;
    --spark-home) spark_home=${2:?--spark-home needs a path}; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
python=${PYTHON:-python3}

run() {
  if $print; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

usage() {
  echo "usage: $0 [--print] compiler | [--print] build SRC WHEEL_DIR | [--print] [--no-deps] [--spark-home LINK] install WHEEL_DIR VENV" >&2
  exit 2
}

compiler() {
  if ! $print && command -v cc >/dev/null; then
    return 0
  fi
  run apt-get update
  run apt-get install -y --no-install-recommends gcc libc6-dev
  run find /var/lib/apt/lists -mindepth 1 -delete
}

build() {
  local src=$1 out=$2
  for f in pyproject.toml README.md l2m; do
    [ -e "$src/$f" ] || { echo "install-l2m.sh: $src/$f not found: is $src the project?" >&2; exit 1; }
  done
  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: the trap must remove this very folder
  trap "rm -rf '$work'" EXIT
  run cp -R "$src/pyproject.toml" "$src/README.md" "$src/l2m" "$work/"
  run find "$work" -name __pycache__ -prune -exec rm -rf {} +
  # An extension built in SRC for its own Python is rebuilt for the wheel's.
  run find "$work" -name '*.so' -delete
  run "$python" -m pip wheel --no-deps --no-cache-dir --wheel-dir "$out" "$work"
}

install() {
  local wheels=$1 venv=$2
  local wheel
  if $print; then
    wheel="$wheels/l2m-*.whl"
  else
    wheel=$(find "$wheels" -maxdepth 1 -name 'l2m-*.whl' | sort | tail -n 1)
    [ -n "$wheel" ] || { echo "install-l2m.sh: no l2m-*.whl in $wheels" >&2; exit 1; }
  fi
  local deps=()
  $no_deps && deps=(--no-deps)
  run "$python" -m venv "$venv"
  # Byte-compiled at install (pip's default): the image's file system is read-only at run time.
  run "$venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check \
    "${deps[@]}" "$wheel"
  if ! $no_deps; then
    # The console script and the package Spark's Python workers import (l2m.runtime.daemon).
    run "$venv/bin/l2m" --help
    run "$venv/bin/python" -c "import l2m.runtime.daemon, pyspark"
  fi
  if [ -n "$spark_home" ]; then
    local pyspark
    if $print; then
      pyspark='$('"$venv"'/bin/python -c "import pyspark, os; print(os.path.dirname(pyspark.__file__))")'
      printf 'mkdir -p %s/conf\nln -sfn %s %q\n' "$pyspark" "$pyspark" "$spark_home"
    else
      pyspark=$("$venv/bin/python" -c "import pyspark, os; print(os.path.dirname(pyspark.__file__))")
      mkdir -p "$pyspark/conf"
      ln -sfn "$pyspark" "$spark_home"
    fi
  fi
}

[ $# -ge 1 ] || usage
command=$1
shift
case "$command" in
  compiler) [ $# -eq 0 ] || usage; compiler ;;
  build) [ $# -eq 2 ] || usage; build "$1" "$2" ;;
  install) [ $# -eq 2 ] || usage; install "$1" "$2" ;;
  *) usage ;;
esac
