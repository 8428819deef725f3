"""The executor command of the sink's executor pods on Kubernetes (spark_sink.executor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sink.executor import BACKEND, executor_command
from tidemark.core.errors import ConfigError

#: What Spark on Kubernetes sets on an executor pod.
POD = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.5:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_APPLICATION_ID": "spark-application-1",
    "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "tidemark-sink-exec-3",
    "SPARK_EXECUTOR_MEMORY": "4g",
    "SPARK_JAVA_OPT_10": "-Dspark.driver.blockManager.port=7079",
    "SPARK_JAVA_OPT_2": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_0": "-Duser.timezone=UTC",
    "HOME": "/var/lib/tidemark",
}


def test_the_command_runs_the_backend_with_the_pods_settings() -> None:
    command = executor_command(POD, Path("/jdk/bin/java"), Path("/site/pyspark/jars"))
    assert command == [
        "/jdk/bin/java",
        # Spark's JVM options in their numeric order, not the text's (10 after 2)
        "-Duser.timezone=UTC",
        "-Dspark.driver.port=7078",
        "-Dspark.driver.blockManager.port=7079",
        "-Xms4g",
        "-Xmx4g",
        "-cp",
        "/site/pyspark/jars/*",
        BACKEND,
        "--driver-url", "spark://CoarseGrainedScheduler@10.0.0.5:7078",
        "--executor-id", "3",
        "--cores", "2",
        "--app-id", "spark-application-1",
        "--hostname", "10.0.0.9",
        "--resourceProfileId", "0",
        "--podName", "tidemark-sink-exec-3",
    ]  # fmt: skip


def test_the_class_path_is_in_the_order_of_sparks_own_images() -> None:
    pod = {
        **POD,
        "SPARK_CONF_DIR": "/opt/spark/conf",
        "HADOOP_CONF_DIR": "/opt/hadoop/conf",
        "SPARK_CLASSPATH": "/extra/a.jar",
        "SPARK_DIST_CLASSPATH": "/dist/*",
    }
    command = executor_command(pod, Path("java"), Path("/jars"))
    assert command[command.index("-cp") + 1] == (
        "/opt/spark/conf:/opt/hadoop/conf:/extra/a.jar:/jars/*:/dist/*"
    )


@pytest.mark.parametrize("name", ["SPARK_DRIVER_URL", "SPARK_EXECUTOR_MEMORY"])
def test_outside_an_executor_pod_it_refuses_with_what_is_missing(name: str) -> None:
    pod = {k: v for k, v in POD.items() if k != name}
    with pytest.raises(ConfigError, match=f"not a Spark executor pod: {name} not set"):
        executor_command(pod, Path("java"), Path("/jars"))
