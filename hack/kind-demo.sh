#!/usr/bin/env bash
# floe on a local kind cluster, for anyone with Docker (the project's own stack and tests run
# without a container engine, so this script is not run by them): builds both images, loads them
# into kind, installs kubeflow spark-operator and floe's chart watching the namespace "demo",
# and applies examples/orders.yaml there.
# The topic stays Ready=False until Kafka, the registry and the catalog it names exist.
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${FLOE_KIND_CLUSTER:-floe-demo}
namespace=demo
# Both images are tagged with the project version, as the chart's appVersion.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)

for tool in docker kind helm kubectl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "kind-demo: '$tool' is not on PATH; this demo needs docker, kind, helm and kubectl" >&2
    exit 1
  fi
done

docker build -f images/operator/Dockerfile -t "floe/floe-operator:$version" .
docker build -f images/spark/Dockerfile -t "floe/floe-spark:$version" .

clusters=$(kind get clusters)
grep -qx "$cluster" <<<"$clusters" || kind create cluster --name "$cluster"
kubectl config use-context "kind-$cluster"
# kind nodes cannot pull these local tags from a registry: load them into the nodes.
kind load docker-image --name "$cluster" "floe/floe-operator:$version" "floe/floe-spark:$version"
kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f -

# spark-operator runs the SparkApplications floe creates in "demo". Their ServiceAccount
# (floe-spark) and its Role come from floe's chart, so spark-operator's own are left out; its
# webhook mounts the job's ConfigMap and Secrets into the driver and executors.
helm repo add spark-operator https://kubeflow.github.io/spark-operator --force-update
helm upgrade --install spark-operator spark-operator/spark-operator \
  --namespace spark-operator --create-namespace --wait \
  --set "spark.jobNamespaces={$namespace}" \
  --set spark.serviceAccount.create=false --set spark.rbac.create=false \
  --set webhook.enable=true

helm upgrade --install floe ./charts/floe-operator \
  --namespace floe-system --create-namespace --wait \
  --set image.repository=floe/floe-operator --set "image.tag=$version" \
  --set "watch.namespaces={$namespace}" --set "spark.image=floe/floe-spark:$version"

# The example names the namespace "data"; here it goes to "demo".
sed "s/^  namespace: data\$/  namespace: $namespace/" examples/orders.yaml | kubectl apply -f -
kubectl get kafkaicebergtopics -n "$namespace"
echo "kind-demo: done; watch it with: kubectl get kit -n $namespace -w"
