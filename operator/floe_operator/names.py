"""The names floe's resource is known by in the API server, and the annotations a user sets
on it. Plain constants: the kubectl plugin reads them without the operator's dependencies."""

GROUP = "floe.dev"
VERSION = "v1alpha1"
KIND = "KafkaIcebergTopic"
PLURAL = "kafkaicebergtopics"

# Approves a breaking schema change: the registry version whose change the table takes.
APPROVAL = f"{GROUP}/approve-schema-version"
# Each new value restarts the job once (``kubectl floe restart`` sets the time).
RESTART = f"{GROUP}/restart"
# Each new value publishes the table.branch once: main moves to the branch's snapshot the value
# names, or to its head for any other value (``kubectl floe publish`` sets the head it saw).
PUBLISH = f"{GROUP}/publish"

# The driver serves the job's Prometheus metrics on this port, named "metrics" in its pod (the
# chart's PodMonitor scrapes it).
JOB_METRICS_PORT = 9464

# Operations on a topic's table (floe_operator.operation), objects of their own.
OPERATION_KIND = "KafkaIcebergOperation"
OPERATION_PLURAL = "kafkaicebergoperations"
