"""A pipeline's lifecycle (running, paused, stopped) and its offsets, through Kafka (DDD-4)."""
