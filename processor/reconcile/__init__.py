"""The reconciliation rules: pure decisions over a narrow state interface, no Kafka client.

``versions`` orders the changes of a key, ``envelopes`` are Materialize's three
envelopes over it, ``batch`` decides a batch of messages, ``upsert_fast_path`` is
a fused form of ``upsert`` held to the general one by a property test, and
``window_buffer`` holds the rows of signal-table windows until they can be decided.
"""
