"""The face: the ``tidemark`` command, the demo, checks against the source, the dev stack.

The top layer: it may import everything, and nothing imports it.
"""
