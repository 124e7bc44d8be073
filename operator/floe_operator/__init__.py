"""floe operator: reconciles KafkaIcebergTopic resources."""
