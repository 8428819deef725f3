"""Tidemark's ground layer: configuration, Kafka helpers, errors, topic names, wire formats.

Everything above imports it; it imports nothing of Tidemark's above it. The
command line and the development stack, the top layer, are in ``tidemark.cli``.
"""
