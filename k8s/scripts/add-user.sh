#!/usr/bin/env bash
# Creates the unprivileged user the image runs as (UID and GID 185, as in Spark's images;
# the manifests' securityContext runs as 185 too) with no login shell and no home of its
# own on the (read-only) image: HOME is the writable /tmp at run time.
#
#   add-user.sh [--print] [--uid N] [--name NAME]
set -euo pipefail

print=false
uid=185
name=l2m
while [ $# -gt 0 ]; do
  case "$1" in
    --print) print=true; shift ;;
    --uid) uid=${2:?--uid needs a number}; shift 2 ;;
    --name) name=${2:?--name needs a name}; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--print] [--uid N] [--name NAME]" >&2; exit 2 ;;
  esac
done

run() {
  if $print; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

run groupadd --system --gid "$uid" "$name"
run useradd --system --uid "$uid" --gid "$uid" --no-create-home --home-dir /tmp \
  --shell /usr/sbin/nologin "$name"
