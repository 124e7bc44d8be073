//go:build tools

// Package tools pins the spark-operator command the local stack builds.
package tools

import _ "github.com/kubeflow/spark-operator/v2/cmd/operator"
