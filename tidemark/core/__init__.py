"""Tidemark's bottom layer: configuration, Kafka helpers, errors, topic names, wire formats.

Everything above imports it; it imports nothing of Tidemark's above it.
"""
