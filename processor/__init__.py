"""The stream processor: a Faust application hosting the change-topic data plane.

Layers, each importing only those below it (checked by ``make lint``):

- ``app``, ``api``, ``openapi``: the Faust worker, its web API and the API's document;
- ``dataplane``: the batch loop, the partitions it owns and the commit protocol;
- ``pipeline``: the lifecycle and the offsets, which work with no processor running;
- ``snapshot`` and ``reconcile``: incremental snapshots (one engine, a connector
  per database) and the reconciliation rules (pure, over a narrow state interface);
- ``events``: what travels, decoded and encoded (changes, codecs, chunk tags);
- ``errors``, ``metrics``, ``tuning``.
"""
