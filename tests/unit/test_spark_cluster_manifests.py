"""``k8s/spark-cluster/``, offline: the sink's pod as a Spark driver on Kubernetes that
makes executor pods from a template. What ``kubectl kustomize`` makes of it is valid
Kubernetes, its configuration runs Spark on Kubernetes with every setting of the base's,
the driver's identity may make pods and nothing more, and the executor pods are
hardened, fenced, and reach the driver. No cluster runs here; the executors' command is
tested against a real driver in ``tests/integration/test_sink_cluster.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.network_policies import findings, render
from tests.unit.test_deploy_artifacts import KUBERNETES_VERSIONS, UID
from tidemark.cli.main import main
from tidemark.core.config import load_config

K8S = Path(__file__).resolve().parents[2] / "k8s"
CLUSTER = render(K8S / "spark-cluster")
BASE = render(K8S)
TEMPLATE_KEY = "executor-pod.yaml"
EXECUTOR_LABELS = {
    "app.kubernetes.io/name": "tidemark",
    "app.kubernetes.io/component": "sink-executor",
}

Doc = dict[str, Any]


def find(made: list[Doc], kind: str, name: str) -> Doc:
    """The object ``kind``/``name`` (a generated ConfigMap's name may end in its hash)."""
    matches = [
        d
        for d in made
        if d["kind"] == kind
        and (d["metadata"]["name"] == name or d["metadata"]["name"].startswith(name + "-"))
    ]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def sink_container(made: list[Doc]) -> Doc:
    pod = find(made, "Deployment", "tidemark-sink")["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == "sink"]
    return container


def sink_config(made: list[Doc], tmp_path: Path) -> Any:
    """The sink's configuration as its pod loads it: the ConfigMap's file, then the
    container's environment (values as written, before Kubernetes fills in ``$(...)``)."""
    path = tmp_path / "tidemark.yaml"
    path.write_text(find(made, "ConfigMap", "tidemark-config")["data"]["tidemark.yaml"])
    environ = {e["name"]: e["value"] for e in sink_container(made).get("env", []) if "value" in e}
    return load_config(path, environ=environ)


def executor_template() -> Doc:
    return dict(
        yaml.safe_load(find(CLUSTER, "ConfigMap", "tidemark-sink-executor")["data"][TEMPLATE_KEY])
    )


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_and_the_executor_template_are_valid_kubernetes(version: str) -> None:
    for doc in [*CLUSTER, executor_template()]:
        kubernetes_validate.validate(doc, version, strict=True)


def test_it_is_the_base_plus_the_clusters_objects() -> None:
    names = {(d["kind"], d["metadata"]["name"]) for d in BASE}
    assert names < {(d["kind"], d["metadata"]["name"]) for d in CLUSTER}
    generated = find(CLUSTER, "ConfigMap", "tidemark-sink-executor")["metadata"]["name"]
    unhashed = {generated: "tidemark-sink-executor"}
    added = {
        (d["kind"], unhashed.get(d["metadata"]["name"], d["metadata"]["name"])) for d in CLUSTER
    }
    added -= names
    assert added == {
        ("ServiceAccount", "tidemark-sink"),
        ("Role", "tidemark-sink-executors"),
        ("RoleBinding", "tidemark-sink-executors"),
        ("NetworkPolicy", "tidemark-sink-driver"),
        ("NetworkPolicy", "tidemark-sink-executors"),
        ("ConfigMap", "tidemark-sink-executor"),
    }


def test_the_sink_runs_spark_on_kubernetes_with_every_setting_of_the_base(
    tmp_path: Path,
) -> None:
    base, cluster = sink_config(BASE, tmp_path), sink_config(CLUSTER, tmp_path)
    assert base.sink.spark_master.startswith("local[")
    assert cluster.sink.spark_master == "k8s://https://kubernetes.default.svc:443"
    conf = cluster.sink.spark_conf
    # the override replaces sink.spark_conf: it must keep the base's settings
    assert base.sink.spark_conf.items() <= conf.items()
    container = sink_container(CLUSTER)
    assert conf["spark.kubernetes.container.image"] == container["image"]
    deployment = find(CLUSTER, "Deployment", "tidemark-sink")
    assert conf["spark.kubernetes.namespace"] == deployment["metadata"]["namespace"]
    # executor pods' names are Spark's, new for each application: a driver restarted in
    # the same pod would meet its predecessor's finished executors under a fixed prefix
    assert "spark.kubernetes.executor.podNamePrefix" not in conf
    # Kubernetes fills in $(NAME) from variables defined before it in the list
    names = [e["name"] for e in container["env"]]
    spark_conf_at = names.index("TIDEMARK_SINK__SPARK_CONF")
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"][:spark_conf_at]
        if "valueFrom" in e
    }
    assert fields == {"POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
    assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    assert conf["spark.driver.host"] == "$(POD_IP)"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(conf["spark.driver.port"]) == ports["driver-rpc"]
    assert int(conf["spark.driver.blockManager.port"]) == ports["blockmanager"]
    # the pod template is a file of the mounted ConfigMap
    template = Path(conf["spark.kubernetes.executor.podTemplateFile"])
    pod = find(CLUSTER, "Deployment", "tidemark-sink")["spec"]["template"]["spec"]
    [mount] = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == template.parent]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    generated = find(CLUSTER, "ConfigMap", "tidemark-sink-executor")
    assert volume["configMap"]["name"] == generated["metadata"]["name"]
    assert template.name in generated["data"]
    # a mount inside another (read-only) mount cannot be made
    others = [Path(m["mountPath"]) for m in container["volumeMounts"] if m is not mount]
    assert not [o for o in others if template.parent.is_relative_to(o)]
    [executor] = executor_template()["spec"]["containers"]
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == executor["name"]


def test_the_driver_may_make_and_delete_pods_and_config_maps_and_nothing_more() -> None:
    role = find(CLUSTER, "Role", "tidemark-sink-executors")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods", "configmaps"],
            "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"],
        }
    ]
    binding = find(CLUSTER, "RoleBinding", "tidemark-sink-executors")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tidemark-sink", "namespace": "tidemark"}
    ]
    pod = find(CLUSTER, "Deployment", "tidemark-sink")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tidemark-sink"
    assert pod["automountServiceAccountToken"] is True
    assert find(CLUSTER, "ServiceAccount", "tidemark-sink")["automountServiceAccountToken"] is False
    # the processor keeps no token
    processor = find(CLUSTER, "StatefulSet", "tidemark-processor")["spec"]["template"]["spec"]
    assert processor["automountServiceAccountToken"] is False


def test_executor_pods_are_hardened_and_write_only_to_their_volumes(tmp_path: Path) -> None:
    template = executor_template()
    assert template["metadata"]["labels"] == EXECUTOR_LABELS
    pod = template["spec"]
    assert pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    ctx = {**pod["securityContext"], **container["securityContext"]}
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == UID
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {Path(m["mountPath"]): m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config = sink_config(CLUSTER, tmp_path)
    # the executors write the warehouse's data files: the same claim as the driver's
    warehouse = volumes[mounts[Path(config.sink.warehouse)]]
    assert warehouse["persistentVolumeClaim"]["claimName"] == "tidemark-warehouse"
    claim = find(CLUSTER, "PersistentVolumeClaim", "tidemark-warehouse")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # the working directory and /tmp are volumes (Spark mounts one at spark.local.dir),
    # and the configuration's files are there as in the driver's pod
    assert {Path("/var/lib/tidemark"), Path("/tmp")} <= set(mounts)
    config_volume = volumes[mounts[Path("/etc/tidemark")]]
    assert config_volume["configMap"]["name"] == "tidemark-config"
    # Spark appends the argument "executor": the command the CLI runs on a pod
    assert container["command"] == ["tidemark", "sink"]


def test_the_executor_command_outside_a_pod_says_what_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_DRIVER_URL", raising=False)
    assert main(["sink", "executor"]) == 2
    assert "not a Spark executor pod: SPARK_DRIVER_URL" in capsys.readouterr().err


def test_the_executors_and_the_driver_reach_each_other_and_nothing_else_reaches_them(
    tmp_path: Path,
) -> None:
    conf = sink_config(CLUSTER, tmp_path).sink.spark_conf
    executor = executor_template()
    executor["metadata"]["name"] = "tidemark-sink-exec-1"
    executor["metadata"]["namespace"] = "tidemark"
    # what Spark adds to the template's container (spark.blockManager.port)
    port = int(conf["spark.blockManager.port"])
    executor["spec"]["containers"][0]["ports"] = [{"name": "blockmanager", "containerPort": port}]
    assert findings([*CLUSTER, executor]) == []
    policies = {d["metadata"]["name"]: d["spec"] for d in CLUSTER if d["kind"] == "NetworkPolicy"}
    to_executors = policies["tidemark-sink-executors"]
    assert to_executors["podSelector"]["matchLabels"] == EXECUTOR_LABELS
    [rule] = to_executors["ingress"]
    assert [p["port"] for p in rule["ports"]] == [port]
    components = {
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in rule["from"]
    }
    assert components == {"sink", "sink-executor"}
    [rule] = policies["tidemark-sink-driver"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == ["driver-rpc", "blockmanager"]
    assert [peer["podSelector"]["matchLabels"] for peer in rule["from"]] == [EXECUTOR_LABELS]
