#!/usr/bin/env bash
# The command of l2m's executor pods (the executor pod template sets it; the image's own
# entry point is `l2m`). Spark creates each executor pod with the argument `executor` and the
# environment below; this starts the executor JVM from it, as the entry point of Spark's
# official images does. Under the Apache Spark operator (k8s/operator/) the driver pod runs it
# too, with the argument `driver`: spark-submit in the pod, as Spark's cluster mode expects.
# Anything else is run as given.
#
#   spark-entrypoint.sh [--print] executor | driver ARGS... | COMMAND ARGS...
#
# --print  prints the command (one argument per line) instead of running it.
#
# executor: SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_APPLICATION_ID,
#   SPARK_EXECUTOR_POD_IP, SPARK_RESOURCE_PROFILE_ID, SPARK_EXECUTOR_POD_NAME and
#   SPARK_EXECUTOR_MEMORY (all set by Spark), the JVM options SPARK_JAVA_OPT_0, _1, … in that
#   order, SPARK_CONF_DIR (the executor ConfigMap Spark mounts), SPARK_EXTRA_CLASSPATH.
# driver: SPARK_DRIVER_BIND_ADDRESS (the pod IP, set by Spark).
# Both: SPARK_HOME (default /opt/spark: pyspark's folder in the image), JAVA_HOME.
# Writes no file: the root file system is read-only.
set -euo pipefail

print=false
if [ "${1:-}" = "--print" ]; then
  print=true
  shift
fi
spark_home=${SPARK_HOME:-/opt/spark}
java=${JAVA_HOME:+$JAVA_HOME/bin/}java

require() {
  local name missing=()
  for name in "$@"; do
    [ -n "${!name:-}" ] || missing+=("$name")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "spark-entrypoint.sh: not set: ${missing[*]} (is this pod created by Spark?)" >&2
    exit 1
  fi
}

run() {
  if $print; then
    printf '%s\n' "$@"
  else
    exec "$@"
  fi
}

case "${1:-}" in
  executor)
    shift
    require SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_APPLICATION_ID \
      SPARK_EXECUTOR_POD_IP SPARK_RESOURCE_PROFILE_ID SPARK_EXECUTOR_POD_NAME \
      SPARK_EXECUTOR_MEMORY
    classpath="${SPARK_CONF_DIR:-$spark_home/conf}:$spark_home/jars/*"
    [ -z "${HADOOP_CONF_DIR:-}" ] || classpath="$HADOOP_CONF_DIR:$classpath"
    [ -z "${SPARK_EXTRA_CLASSPATH:-}" ] || classpath="$classpath:$SPARK_EXTRA_CLASSPATH"
    java_opts=()
    while read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -v SPARK_JAVA_OPT_ | sort -t_ -k4,4n)
    run "$java" "${java_opts[@]}" \
      "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  driver)
    shift
    require SPARK_DRIVER_BIND_ADDRESS
    run "$spark_home/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client "$@"
    ;;
  "")
    echo "usage: $0 [--print] executor | driver ARGS... | COMMAND ARGS..." >&2
    exit 2
    ;;
  *)
    run "$@"
    ;;
esac
