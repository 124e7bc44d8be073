#!/bin/bash
# The entry point of Spark on Kubernetes pods, as Apache Spark's own images have it: the driver
# pod runs `driver <spark-submit arguments>`, executor pods run `executor` with the SPARK_*
# variables Spark sets on them. Anything else runs as given.
set -euo pipefail

case "${1:-}" in
  driver)
    shift
    # spark.properties is read by path (--properties-file): a conf directory that holds only it
    # is left off the JVM's class path, which keeps the image's class-data-sharing archive.
    if [ "$(ls "${SPARK_CONF_DIR:-/nonexistent}" 2>/dev/null)" = "spark.properties" ]; then
      export SPARK_CONF_DIR=/opt/floe/conf
    fi
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # One JVM option per SPARK_JAVA_OPT_<n> variable, in order, spaces kept.
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    # The class path the image's class-data-sharing archive was made with, unless the job
    # puts jars of its own first.
    classpath="$SPARK_HOME/jars/*"
    if [ -n "${SPARK_CLASSPATH:-}" ]; then
      classpath="$SPARK_CLASSPATH:$classpath"
    elif [ -s /opt/floe/classpath ]; then
      classpath="$(cat /opt/floe/classpath)"
    fi
    # The image's JIT thresholds (FLOE_JIT_OPTS, see the Dockerfile) first: the job's own
    # options (spark.executor.extraJavaOptions) come after and win.
    read -r -a jit_opts <<< "${FLOE_JIT_OPTS:-}"
    exec "$JAVA_HOME/bin/java" "${jit_opts[@]}" "${java_opts[@]}" \
      -XX:SharedArchiveFile=/opt/floe/spark.jsa \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
