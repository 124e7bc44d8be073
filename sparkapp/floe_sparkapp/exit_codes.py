"""The job's exit codes: the driver's exit tells the operator what happened (spark-operator
reports it as ``driver container failed with ExitCode: N``)."""

INVALID_CONFIG = 2
DATA_LOSS = 3  # Kafka no longer has records the table has not got
MAINTENANCE_FAILED = 4
TABLE_IN_USE = 5  # another resource writes the table
OPERATION_REFUSED = 6  # a KafkaIcebergOperation cannot run as asked (the message says why)
