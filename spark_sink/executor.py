"""A Spark executor in a pod that Spark on Kubernetes made from the sink's image.

Spark's Kubernetes scheduler makes each executor pod from the driver's image with the
argument ``executor`` and the executor's settings in environment variables, and counts
on the image's entry point to start the executor from them (Spark's own images do it in
``entrypoint.sh``). The sink's image starts ``tidemark``: the executor pod template
(``k8s/spark-cluster/``) sets the command ``tidemark sink``, so Spark's argument makes it
``tidemark sink executor``, which replaces itself with the executor's JVM.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from tidemark.core.errors import ConfigError

#: Spark's executor backend for Kubernetes (in the pyspark wheel's jars).
BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"

#: The variables Spark sets on an executor pod, and the backend's option each one gives.
OPTIONS = {
    "SPARK_DRIVER_URL": "--driver-url",
    "SPARK_EXECUTOR_ID": "--executor-id",
    "SPARK_EXECUTOR_CORES": "--cores",
    "SPARK_APPLICATION_ID": "--app-id",
    "SPARK_EXECUTOR_POD_IP": "--hostname",
    "SPARK_RESOURCE_PROFILE_ID": "--resourceProfileId",
    "SPARK_EXECUTOR_POD_NAME": "--podName",
}

#: The driver's JVM options for executors (``spark.executor.extraJavaOptions`` and
#: Spark's own), one per variable: ``SPARK_JAVA_OPT_0``, ``SPARK_JAVA_OPT_1``, ...
_JAVA_OPT = re.compile(r"SPARK_JAVA_OPT_(\d+)")


def check_pod(environ: Mapping[str, str]) -> None:
    """Refuse, with what is missing, an environment Spark did not make."""
    missing = [name for name in [*OPTIONS, "SPARK_EXECUTOR_MEMORY"] if not environ.get(name)]
    if missing:
        raise ConfigError(
            f"not a Spark executor pod: {', '.join(missing)} not set (Spark on Kubernetes "
            "sets them on the pods it makes; `tidemark sink executor` runs only there)"
        )


def executor_command(environ: Mapping[str, str], java: Path, jars: Path) -> list[str]:
    """The executor's JVM command line from the pod's environment ``environ``: ``java``,
    then Spark's JVM options in their order, the heap of ``SPARK_EXECUTOR_MEMORY``, the
    class path in the order of Spark's own images (Spark's and Hadoop's configuration
    folders and ``spark.executor.extraClassPath`` when the pod has them, ``jars``, then
    ``SPARK_DIST_CLASSPATH``), and the backend with its options."""
    check_pod(environ)
    numbered = sorted(
        (int(m.group(1)), value)
        for name, value in environ.items()
        if (m := _JAVA_OPT.fullmatch(name))
    )
    memory = environ["SPARK_EXECUTOR_MEMORY"]
    before = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "SPARK_CLASSPATH")
    classpath = [
        *(environ[name] for name in before if environ.get(name)),
        f"{jars}/*",
        *([environ["SPARK_DIST_CLASSPATH"]] if environ.get("SPARK_DIST_CLASSPATH") else []),
    ]
    options = [item for name, flag in OPTIONS.items() for item in (flag, environ[name])]
    return [
        str(java),
        *(value for _, value in numbered),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        ":".join(classpath),
        BACKEND,
        *options,
    ]


def run_executor() -> None:
    """Replace this process with the executor's JVM (it receives the pod's signals)."""
    import pyspark

    from tidemark.core.binaries import find_java

    check_pod(os.environ)  # before looking for Java, which only a pod need have
    command = executor_command(
        os.environ, find_java(), Path(pyspark.__file__).resolve().parent / "jars"
    )
    os.execv(command[0], command)  # noqa: S606 - the JVM named by the image's JAVA_HOME
