"""``tidemark sink maintain``: maintain every table of the sink once
(:mod:`spark_sink.maintenance`), beside a running sink or not.

The long-running sink maintains its tables itself, each in its own turn
(``sink.maintain_interval_s``). Run this on a catalog with atomic commits (``jdbc``,
``rest``, ``hive``) beside a running sink, or with the sink stopped: a ``hadoop``
catalog's commits from two processes may overwrite each other, so there it runs only
when told the sink is stopped (``sink_stopped``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_sink.job import Sink
from spark_sink.maintenance import Maintained, maintain_table
from spark_sink.reader import sink_topics
from spark_sink.session import create_session, stop_session
from tidemark.core.catalogs import commits_can_overwrite
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def maintain(
    config: Config, spark: SparkSession | None = None, *, sink_stopped: bool = False
) -> list[Maintained]:
    """Maintain every existing table of the sink's topics; refused on a ``hadoop``
    catalog unless ``sink_stopped``."""
    settings = config.sink
    if (
        commits_can_overwrite(settings.catalog_type, settings.catalog_properties)
        and not sink_stopped
    ):
        raise TidemarkError(
            "a hadoop catalog's commits from two processes can overwrite each other: "
            "maintenance beside a running sink could drop its commits. Stop the sink, "
            "then run `tidemark sink maintain --sink-stopped`"
        )
    own = spark is None
    session = spark if spark is not None else create_session(config)
    try:
        sink = Sink(config, session)
        done = []
        for topic in sorted(sink_topics(sink.admin, config.sink_pattern(), config.sink.topics)):
            table = sink.table(topic)
            if table.exists():
                done.append(maintain_table(config.sink, session, table))
        return done
    finally:
        if own:
            stop_session(session)
