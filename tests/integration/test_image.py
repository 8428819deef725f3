"""Both commands of the image, without the ``dev`` and ``test`` extras, drain a pipeline.

The image installs the distribution without extras: no Debezium wheel, no
broker wheel, no test tools. ``tidemark process`` and ``tidemark sink --once``
run here with every package of the extras hidden from their imports
(``as_in_the_image.py``), against the dev stack: the table ends in Iceberg
equal to its source.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import psycopg
from pyspark.sql import SparkSession

from spark_sink.session import create_session
from tests.integration.processes import Processor, SinkProcess, pipeline_config
from tidemark.cli.verify import compare_table, wait_caught_up
from tidemark.devstack.stack import DevStack

IMAGE = [sys.executable, str(Path(__file__).with_name("as_in_the_image.py"))]
TABLE = "iso_image_rows"


def test_process_and_sink_run_without_the_extras(stack: DevStack, spark: SparkSession) -> None:
    config = pipeline_config(stack, "image")
    config = dataclasses.replace(
        config,
        sink=dataclasses.replace(
            config.sink,
            catalog_name="image",
            warehouse=str(stack.run_dir / "image-warehouse"),
            topics=[f"tidemark.reconciled.public.{TABLE}"],
            topic_pattern="",
        ),
    )
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, note text)")
        conn.execute(f"INSERT INTO {TABLE} SELECT i, 'row ' || i FROM generate_series(1, 500) i")  # noqa: S608
        conn.execute(f"UPDATE {TABLE} SET note = 'changed' WHERE id % 3 = 0")  # noqa: S608
        conn.execute(f"DELETE FROM {TABLE} WHERE id % 7 = 0")  # noqa: S608
    processor = Processor(stack, config, "image-processor", command=IMAGE).start()
    try:
        wait_caught_up(config)
    finally:
        processor.stop()
    sink = SinkProcess(stack, config, "image-sink", command=IMAGE).start("--once")
    assert sink.wait() == 0, sink.log_tail()
    create_session(config)  # the image catalog, in the tests' session
    comparison = compare_table(config, spark, "public", TABLE)
    assert comparison.equal, comparison
