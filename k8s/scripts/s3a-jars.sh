#!/usr/bin/env bash
# Adds the S3A connector to a Spark jars folder: hadoop-aws at the Hadoop version of the
# hadoop-client-api jar already there, and the exact AWS SDK v2 bundle (and analytics
# accelerator) that Hadoop release was built and tested with. pip's pyspark ships Hadoop's
# client jars but no S3A classes, so an s3a:// checkpoint needs these baked into the image
# (k8s/Dockerfile, build arg WITH_S3A=true); they cannot be fetched at run time.
#
#   s3a-jars.sh [--print] [--if true|false] [--hadoop-version V] [--repo URL] DEST
#
# DEST      the jars folder (the image: /opt/spark/jars, i.e. pyspark's jars/)
# --print   print "URL DEST_FILE" per jar and download nothing
# --if      false: do nothing (the image's build arg WITH_S3A)
# --hadoop-version V   instead of reading it from DEST/hadoop-client-api-V.jar
# --repo URL           a Maven repository (default Maven Central, or $MAVEN_REPO)
#
# Each jar is checked against the SHA-1 the repository publishes beside it, written under a
# temporary name and renamed into DEST only when complete. Downloads use curl when present,
# else Python (python:*-slim images have no curl).
set -euo pipefail

print=false
enabled=true
hadoop=
repo=${MAVEN_REPO:-https://repo1.maven.org/maven2}
while [ $# -gt 0 ]; do
  case "$1" in
    --print) print=true; shift ;;
    --if) enabled=${2:?--if needs true or false}; shift 2 ;;
    --hadoop-version) hadoop=${2:?--hadoop-version needs a version}; shift 2 ;;
    --repo) repo=${2:?--repo needs a URL}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "s3a-jars.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: $0 [--print] [--if true|false] [--hadoop-version V] [--repo URL] DEST" >&2; exit 2; }
dest=$1
case "$enabled" in
  true) ;;
  false) echo "s3a-jars.sh: skipped (WITH_S3A=false)"; exit 0 ;;
  *) echo "s3a-jars.sh: --if takes true or false, not '$enabled'" >&2; exit 2 ;;
esac

if [ -z "$hadoop" ]; then
  api=$(find "$dest" -maxdepth 1 -name 'hadoop-client-api-*.jar' 2>/dev/null | sort | tail -n 1)
  [ -n "$api" ] || {
    echo "s3a-jars.sh: no hadoop-client-api-*.jar in $dest; give --hadoop-version" >&2
    exit 1
  }
  hadoop=$(basename "$api" .jar)
  hadoop=${hadoop#hadoop-client-api-}
fi

# The versions each Hadoop release's hadoop-project POM pins (<aws-java-sdk-v2.version>) and
# its hadoop-aws POM depends on (analyticsaccelerator-s3, compile scope since 3.4.2).
# Hadoop 3.4.1 (pyspark 4.0): AWS SDK 2.24.6 (HADOOP-19082), no analytics accelerator yet.
# Hadoop 3.5.0 (pyspark 4.2 and 4.3): AWS SDK 2.35.4 (HADOOP-19654), analytics accelerator
# 1.3.1 (HADOOP-19742). Another Spark release: add its Hadoop version here.
case "$hadoop" in
  3.4.1) sdk=2.24.6; accelerator= ;;
  3.5.0) sdk=2.35.4; accelerator=1.3.1 ;;
  *)
    echo "s3a-jars.sh: no known AWS SDK version for Hadoop $hadoop (see the table in $0)" >&2
    exit 1
    ;;
esac

coordinates=(
  "org/apache/hadoop/hadoop-aws/$hadoop/hadoop-aws-$hadoop.jar"
  "software/amazon/awssdk/bundle/$sdk/bundle-$sdk.jar"
)
if [ -n "$accelerator" ]; then
  coordinates+=("software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/$accelerator/analyticsaccelerator-s3-$accelerator.jar")
fi

fetch() {  # URL FILE
  if command -v curl >/dev/null 2>&1; then
    curl --fail --silent --show-error --location --retry 3 --output "$2" "$1"
  else
    "${PYTHON:-python3}" - "$1" "$2" <<'EOF'
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=120) as response, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(response, out, 1 << 20)
EOF
  fi
}

for path in "${coordinates[@]}"; do
  url="$repo/$path"
  file="$dest/$(basename "$path")"
  if $print; then
    printf '%s %s\n' "$url" "$file"
    continue
  fi
  if [ -s "$file" ]; then
    echo "s3a-jars.sh: $file already there"
    continue
  fi
  mkdir -p "$dest"
  tmp="$file.part"
  fetch "$url" "$tmp"
  fetch "$url.sha1" "$tmp.sha1"
  expected=$(cut -c1-40 "$tmp.sha1")
  actual=$(sha1sum "$tmp" | cut -c1-40)
  if [ "$expected" != "$actual" ]; then
    echo "s3a-jars.sh: $url: SHA-1 $actual, the repository says $expected" >&2
    rm -f "$tmp" "$tmp.sha1"
    exit 1
  fi
  rm -f "$tmp.sha1"
  mv "$tmp" "$file"
  echo "s3a-jars.sh: $file"
done
