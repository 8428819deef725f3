"""The command line: the ``tidemark`` command, the demo, checks against the source.

The top layer: it may import everything, and nothing imports it.
"""
