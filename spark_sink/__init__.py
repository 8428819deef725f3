"""The Spark sink: reconciled topics into Iceberg tables.

Imports only the ground (``tidemark``), never the processor: Spark executors
load the wire helpers and the registry client, not the reconciliation rules.
"""
