"""The sink on a Spark standalone cluster: a master and a worker started from the pyspark
wheel's own ``spark-class``, the sink's driver in client mode (committing to the JDBC
catalog on PostgreSQL), and its executor (a JVM of the worker's, with its Python
workers) reading the reconciled topic from Kafka and writing the table's data files;
and the command of the sink's executor pods on Kubernetes against a real driver.

The cluster is this machine's (loopback only); the warehouse is a folder the driver and
the executor share, as a volume or an object store would be shared on a real cluster.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
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
        conn.execute("CREATE DATABASE iceberg_cluster")
    wait_caught_up(pipeline)
    prefix = pipeline.source.topic_prefix
    source, owner = pipeline.source, pipeline.owner_conninfo()
    config = dataclasses.replace(
        pipeline,
        sink=dataclasses.replace(
            pipeline.sink,
            spark_master=master,
            catalog_name="cluster_lake",
            catalog_type="jdbc",
            catalog_uri=f"jdbc:postgresql://{source.host}:{source.port}/iceberg_cluster",
            catalog_user=owner["user"],
            catalog_password=owner["password"],
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


#: A driver whose tasks can run only on an executor that registers by itself: the
#: master it names has no worker. It writes the JVM options it gives executors to
#: argv[3] (Spark on Kubernetes puts them on the pod as SPARK_JAVA_OPT_<n>), then runs a
#: Python task per element and prints the pods' names its tasks saw.
DRIVER = """
import os, sys
from pathlib import Path
from pyspark.sql import SparkSession
master, port, options = sys.argv[1:4]
spark = (SparkSession.builder.master(master).appName("pod-executor")
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.port", port)
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .getOrCreate())
Path(options + ".part").write_text(
    spark.sparkContext.getConf().get("spark.executor.extraJavaOptions"))
os.replace(options + ".part", options)
pods = spark.sparkContext.parallelize(range(8), 4).map(
    lambda _: os.environ.get("SPARK_EXECUTOR_POD_NAME")).distinct().collect()
print("PODS", sorted(map(str, pods)), flush=True)
spark.stop()
"""


def test_an_executor_pods_command_runs_the_drivers_python_tasks(
    stack: DevStack, tmp_path: Path
) -> None:
    """``tidemark sink executor``, the command of the executor pod template of
    ``k8s/spark-cluster/``, given what Spark on Kubernetes sets on an executor pod (the
    driver's URL, the executor's id, cores and memory, the JVM options as
    ``SPARK_JAVA_OPT_<n>``), starts Spark's Kubernetes executor backend, which registers
    with a real driver and runs its Python tasks. No Kubernetes runs here: the driver's
    scheduler is a standalone master's, which takes any executor that registers."""
    home = Path(pyspark.__file__).parent
    env = dict(SPARK_ENV, SPARK_HOME=str(home))
    port, driver_port = free_port(), free_port()
    master = f"spark://127.0.0.1:{port}"
    stack.start_process(
        "spark-bare-master",
        [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
        env,
    )  # fmt: skip
    options = tmp_path / "executor-options"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    logs = {name: tmp_path / f"{name}.log" for name in ("driver", "executor")}
    children: list[subprocess.Popen[bytes]] = []
    try:
        with logs["driver"].open("wb") as out:
            driver = subprocess.Popen(
                [sys.executable, str(script), master, str(driver_port), str(options)],
                env={**os.environ, **SPARK_ENV, "PYSPARK_PYTHON": sys.executable},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        children.append(driver)
        wait_for("the driver's executor options", lambda: options.is_file() or None, 120)
        pod = {
            **{f"SPARK_JAVA_OPT_{i}": o for i, o in enumerate(options.read_text().split())},
            "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{driver_port}",
            "SPARK_EXECUTOR_ID": "1",
            "SPARK_EXECUTOR_CORES": "1",
            "SPARK_APPLICATION_ID": "spark-pod-test",
            "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
            "SPARK_RESOURCE_PROFILE_ID": "0",
            "SPARK_EXECUTOR_POD_NAME": "tidemark-sink-exec-1",
            "SPARK_EXECUTOR_MEMORY": "512m",
        }
        tidemark = str(Path(sys.executable).parent / "tidemark")
        with logs["executor"].open("wb") as out:
            executor = subprocess.Popen(
                [tidemark, "sink", "executor"],
                env={**os.environ, **SPARK_ENV, **pod},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        children.append(executor)
        driver.wait(timeout=180)
        said = logs["driver"].read_text(errors="replace")
        assert driver.returncode == 0, said[-3000:]
        assert "PODS ['tidemark-sink-exec-1']" in said, said[-3000:]
        # the driver's stop ends the executor: its JVM had replaced the command
        executor.wait(timeout=60)
        log = logs["executor"].read_text(errors="replace")
        assert "KubernetesExecutorBackend" in log and "Driver commanded a shutdown" in log, log
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        stack.stop_process("spark-bare-master")
