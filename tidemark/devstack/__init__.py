"""The embedded development stack: a broker, a private PostgreSQL, Debezium, a schema registry.

For development, the demo and the tests; nothing of the processor or the sink imports it.
"""
