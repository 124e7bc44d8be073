{{- define "floe.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "floe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "floe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "floe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: floe
{{- end -}}

{{- define "floe.serviceAccountName" -}}
{{- default (include "floe.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "floe.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "floe.sparkImage" -}}
{{- default (printf "floe/floe-spark:%s" .Chart.AppVersion) .Values.spark.image -}}
{{- end -}}

{{/* Namespaces where Spark drivers run: the watched ones, else spark.namespaces, else the
release's own. One name per line. */}}
{{- define "floe.sparkNamespaces" -}}
{{- $namespaces := .Values.watch.namespaces -}}
{{- if not $namespaces -}}{{- $namespaces = .Values.spark.namespaces -}}{{- end -}}
{{- if not $namespaces -}}{{- $namespaces = list .Release.Namespace -}}{{- end -}}
{{- join "\n" (uniq $namespaces) -}}
{{- end -}}

{{/* The operator's rules on KafkaIcebergTopics and the objects it creates, in one namespace
(Role) or in all (ClusterRole). */}}
{{- define "floe.operatorRules" -}}
- apiGroups: [floe.dev]
  resources: [kafkaicebergtopics]
  verbs: [get, list, watch, patch, update]
- apiGroups: [floe.dev]
  resources: [kafkaicebergtopics/status]
  verbs: [get, patch, update]
# Operations on the topics' tables (a roll back, a repair), each run once.
- apiGroups: [floe.dev]
  resources: [kafkaicebergoperations]
  verbs: [get, list, watch, patch, update]
- apiGroups: [floe.dev]
  resources: [kafkaicebergoperations/status]
  verbs: [get, patch, update]
- apiGroups: [sparkoperator.k8s.io]
  resources: [sparkapplications]
  verbs: [get, list, watch, create, update, patch, delete]
# A deleted resource waits until its job's pods are gone before its table is dropped.
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
# A stalled job's driver is asked what it is doing (its metrics, through the pod proxy).
- apiGroups: [""]
  resources: [pods/proxy]
  verbs: [get]
# The job ConfigMaps, SparkApplications and CronJobs floe keeps are watched (kopf indexes
# them), not read on every visit.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
# Table maintenance: one CronJob per enabled action.
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, list, watch, create, update, patch, delete]
# Only the Secrets a resource references are read: their values stay in memory, and are masked
# in logs, Events and the status.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
# A job waits for its driver's ServiceAccount (named on the status while it is missing).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, watch]
{{- end -}}

{{/* What a Spark driver does in its namespace: its executor pods, their services and
ConfigMaps, and PVCs. */}}
{{- define "floe.sparkDriverRules" -}}
- apiGroups: [""]
  resources: [pods, services, configmaps, persistentvolumeclaims]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
{{- end -}}

{{/* The ClusterRole a cluster-wide operator binds the drivers' ServiceAccounts to, in the
namespaces where resources are (empty: the operator makes no accounts). */}}
{{- define "floe.sparkAccountRole" -}}
{{- if and (not .Values.watch.namespaces) .Values.spark.serviceAccount.create .Values.rbac.create -}}
{{ include "floe.fullname" . }}-spark
{{- end -}}
{{- end -}}
