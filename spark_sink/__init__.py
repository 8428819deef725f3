"""The Spark sink: reconciled topics into Iceberg tables.

Imports only state and the bottom layer (``tidemark.core``), never the processor: Spark executors
load the wire helpers and the registry client, not the reconciliation rules.
"""
