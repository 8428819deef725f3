"""Tidemark: a change-data-capture stream processor.

Its folders are layers, each importing only those below it (``make lint`` checks it):
``tidemark.cli`` (the ``tidemark`` command, the demo, checks against the source) on
top; ``tidemark.devstack`` (the embedded development stack) beside ``processor`` and
``spark_sink``; ``state`` below them; ``tidemark.core`` (configuration, Kafka helpers,
errors, topic names, wire formats, the compiled readers) at the bottom.
"""
