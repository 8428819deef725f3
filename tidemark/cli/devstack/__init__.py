"""The embedded development stack: a broker, a private PostgreSQL, Debezium, a schema registry."""
