"""State: the store interface, its memory and RocksDB backends, the changelog that restores them.

Imports only the bottom layer (``tidemark.core``), never the processor.
"""
