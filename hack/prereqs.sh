#!/usr/bin/env bash
# Installs the toolchains the local stack builds with, when the machine lacks them:
# Java 17+ (Kafka, Spark, the registry), Maven (jars from Maven Central), Go (etcd, Kubernetes,
# helm, CoreDNS, spark-operator, the Prometheus Operator, Prometheus with promtool and the S3
# server, from the Go module proxy), openssl, and the node's parts from Debian: containerd and
# runc, the CNI plugins, dockerd (builds the images), debootstrap (their base), iptables and
# conntrack (kube-proxy), gcc (the pause binary), PostgreSQL's server (the JDBC catalog's
# database), and Node.js with npm (Azurite, the Azure Storage emulator, from the npm registry).
set -euo pipefail

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v openssl >/dev/null || missing+=(openssl)
command -v go >/dev/null || missing+=(golang-go)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
[[ -x /usr/bin/docker && -x /usr/sbin/dockerd ]] || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v iptables >/dev/null || missing+=(iptables)
command -v conntrack >/dev/null || missing+=(conntrack)
command -v ip >/dev/null || missing+=(iproute2)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

if ((${#missing[@]})); then
  echo "[prereqs] installing ${missing[*]}" >&2
  if [[ $(id -u) -ne 0 ]]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

java_major=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
if ((java_major < 17)); then
  echo "[prereqs] Java 17 or newer is needed (found $java_major)" >&2
  exit 1
fi
# An older Go (from Debian) fetches the toolchain that hack/go's modules ask for from the Go
# module proxy by itself (GOTOOLCHAIN=auto, Go's default).
