"""floe Spark job: lands a Kafka topic in an Iceberg table."""
