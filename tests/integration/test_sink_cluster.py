"""The sink on a Spark standalone cluster: a master and a worker started from the pyspark
wheel's own ``spark-class``, the sink's driver in client mode, and its executor (a JVM
of the worker's, with its Python workers) reading the reconciled topic from Kafka and
writing the table's data files.

The cluster is this machine's (loopback only); the warehouse is a folder the driver and
the executor share, as a volume or an object store would be shared on a real cluster.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyspark
import pytest
from pyspark.sql import SparkSession

from spark_sink.session import create_session
from tests.integration.processes import Processor, SinkProcess, pipeline_config, wait_for
from tidemark.cli.verify import compare_table, wait_caught_up
from tidemark.core.config import Config
from tidemark.core.ports import free_port
from tidemark.devstack.stack import DevStack

#: Spark's daemons and the driver, bound to loopback (a daemon's pid is its JVM's:
#: ``spark-class`` execs it).
SPARK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1"}


def spark_status(ui_port: int) -> dict[str, Any]:
    """The standalone master's state (its web UI's ``/json/``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as answer:
        return dict(json.load(answer))


@pytest.fixture(scope="module")
def cluster(stack: DevStack) -> Iterator[tuple[str, int, Path]]:
    """A standalone master and one worker of 1 core: (master URL, master UI port, the
    worker's folder of application logs)."""
    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    env = dict(SPARK_ENV, SPARK_HOME=str(home))
    port, ui = free_port(), free_port()
    work = stack.run_dir / "spark-worker"
    work.mkdir(exist_ok=True)
    master = f"spark://127.0.0.1:{port}"
    stack.start_process(
        "spark-master",
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        env,
    )  # fmt: skip
    try:
        stack.start_process(
            "spark-worker",
            [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host",
             "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
             "--cores", "1", "--memory", "1g", "--work-dir", str(work)],
            env,
        )  # fmt: skip

        def worker_alive() -> bool:
            try:
                workers = spark_status(ui)["workers"]
            except OSError:
                return False
            return any(w["state"] == "ALIVE" for w in workers)

        wait_for("a worker registered with the Spark master", worker_alive)
        yield master, ui, work
    finally:
        stack.stop_process("spark-worker")
        stack.stop_process("spark-master")


@pytest.fixture(scope="module")
def pipeline(stack: DevStack) -> Iterator[Config]:
    config = pipeline_config(stack, "cluster")
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE iso_cluster_items (id int PRIMARY KEY, region text, n int)")
    processor = Processor(stack, config, "cluster-processor").start()
    try:
        yield config
    finally:
        processor.stop()


def test_the_sink_runs_on_a_standalone_cluster_whose_executor_reads_kafka(
    stack: DevStack,
    pipeline: Config,
    cluster: tuple[str, int, Path],
    spark: SparkSession,
) -> None:
    master, ui, work = cluster
    with psycopg.connect(**pipeline.owner_conninfo(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO iso_cluster_items SELECT i, (ARRAY['eu', 'us'])[1 + i % 2], i "
            "FROM generate_series(1, 500) i"
        )
        conn.execute("UPDATE iso_cluster_items SET n = -n WHERE id % 3 = 0")
        conn.execute("DELETE FROM iso_cluster_items WHERE id % 10 = 0")
    wait_caught_up(pipeline)
    prefix = pipeline.source.topic_prefix
    config = dataclasses.replace(
        pipeline,
        sink=dataclasses.replace(
            pipeline.sink,
            spark_master=master,
            catalog_name="cluster_lake",
            warehouse=str(stack.run_dir / "cluster-warehouse"),
            topics=[f"{prefix}.reconciled.public.iso_cluster_items"],
            topic_pattern="",
            metrics_port=0,
            tables={"public.iso_cluster_items": dataclasses.replace(
                pipeline.sink.layout, partition_by=["region"]
            )},
            # one executor of the worker's one core, and the driver's address for it
            spark_conf={"spark.cores.max": "1", "spark.executor.memory": "1g"},
        ),
    )  # fmt: skip
    sink = SinkProcess(stack, config, "cluster-sink")
    sink.start("--once", env=SPARK_ENV)
    assert sink.wait(300) == 0, sink.log_tail()

    create_session(config)  # the test's session learns the sink's catalog
    result = compare_table(config, spark, "public", "iso_cluster_items")
    assert result.equal, result
    assert result.source_rows == 450

    # The application ran on the cluster, and its executor ran the tasks, the ones that
    # read the topic among them (off ``local[N]``, Spark runs no task in the driver).
    name = f"tidemark-sink-{pipeline.processor.pipeline}"

    def finished() -> list[dict[str, Any]]:
        return [a for a in spark_status(ui)["completedapps"] if a["name"] == name]

    ours = wait_for("the application finished on the master", finished, timeout=30)
    assert len(ours) == 1 and ours[0]["state"] == "FINISHED", ours
    logs = list(work.glob(f"{ours[0]['id']}/*/stderr"))
    assert logs, sorted(work.rglob("*"))
    executor = "".join(p.read_text(errors="replace") for p in logs)
    assert "Running task" in executor and "Finished task" in executor
    assert "CoarseGrainedExecutorBackend" in executor
    assert not spark_status(ui)["activeapps"]  # the driver's exit ended the application
