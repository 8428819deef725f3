"""Incremental snapshots: one generic engine, and a connector per source database.

The engine (coordinator, signal channels, table checks, progress, the reader
pool, chunk events, signal-table windows) speaks to a database only through
its :class:`~processor.snapshot.connector.Connector`; PostgreSQL's is in ``postgres/``.
"""
