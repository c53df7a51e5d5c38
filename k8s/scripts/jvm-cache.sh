#!/usr/bin/env bash
# Builds the driver JVM's class-data sharing archive into the image (l2m/dev/jvmarchive.py): a
# start of `l2m run` then maps the classes instead of loading and verifying them from Spark's
# jars, about 4 s sooner (benchmarks/rollout.py). The archive is only valid for this Java and
# this exact set of Spark jars, so it is built last, after the S3A jars (if any) are added;
# the container's file system is read-only at run time, so it cannot be built there.
#
#   jvm-cache.sh [--print] [--if true|false] DIR
#
# DIR   where the archive goes (the image sets L2M_JVM_CACHE to it)
# --if  false: do nothing (the build arg WITH_JVM_CACHE)
# A failed build is reported and skipped: starts are slower without the archive, not broken.
# Environment: PYTHON (default python3) is the interpreter with l2m installed.
set -euo pipefail

print=false
enabled=true
while [ $# -gt 0 ]; do
  case "$1" in
    --print) print=true; shift ;;
    --if) enabled=${2:?--if needs true or false}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "jvm-cache.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: $0 [--print] [--if true|false] DIR" >&2; exit 2; }
dir=$1
case "$enabled" in
  true) ;;
  false) echo "jvm-cache.sh: skipped (WITH_JVM_CACHE=false)"; exit 0 ;;
  *) echo "jvm-cache.sh: --if takes true or false, not '$enabled'" >&2; exit 2 ;;
esac
python=${PYTHON:-python3}

if $print; then
  printf 'mkdir -p %q\n' "$dir"
  printf 'L2M_JVM_CACHE=%q %q -m l2m.jvmcache\n' "$dir" "$python"
  printf 'chmod -R a+rX %q\n' "$dir"
  exit 0
fi
mkdir -p "$dir"
# A training run of two rules through the embedded broker, in local mode; its JVM writes the
# archive as it exits, which is then checked and renamed into place.
if L2M_JVM_CACHE="$dir" "$python" -m l2m.jvmcache; then
  rm -f "$dir"/*.log "$dir"/*.lock
else
  echo "jvm-cache.sh: WARNING: no class-data archive (see above); starts will be slower" >&2
fi
chmod -R a+rX "$dir"
