"""``k8s/object-storage/``, offline: the base with the sink's warehouse on S3. What
``kubectl kustomize`` makes of it is valid Kubernetes, the base without the warehouse's
claim, and a sink whose configuration (the ConfigMap's file, then its environment)
writes ``s3://`` through S3FileIO in the base's JDBC catalog, with the AWS SDK's keys
only from a Secret. The sink's writes to an S3-compatible server are tested in
``tests/integration/test_sink_crash.py``."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from spark_sink.session import catalog_settings
from tests.network_policies import render
from tests.unit.test_deploy_artifacts import KUBERNETES_VERSIONS
from tests.unit.test_spark_cluster_manifests import find, sink_config, sink_container
from tidemark.core.catalogs import S3_FILE_IO

K8S = Path(__file__).resolve().parents[2] / "k8s"
OBJECT_STORAGE = render(K8S / "object-storage")
BASE = render(K8S)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_is_valid_kubernetes(version: str) -> None:
    for doc in OBJECT_STORAGE:
        kubernetes_validate.validate(doc, version, strict=True)


def test_it_is_the_base_without_the_warehouse_claim() -> None:
    names = {(d["kind"], d["metadata"]["name"]) for d in OBJECT_STORAGE}
    base = {(d["kind"], d["metadata"]["name"]) for d in BASE}
    assert names == base - {("PersistentVolumeClaim", "tidemark-warehouse")}
    pod = find(OBJECT_STORAGE, "Deployment", "tidemark-sink")["spec"]["template"]["spec"]
    assert "warehouse" not in {v["name"] for v in pod["volumes"]}
    mounts = {m["name"] for m in sink_container(OBJECT_STORAGE)["volumeMounts"]}
    assert mounts == {"scratch", "config", "tmp"}


def test_the_sink_writes_s3_in_the_jdbc_catalog_with_keys_from_a_secret(tmp_path: Path) -> None:
    config = sink_config(OBJECT_STORAGE, tmp_path)
    assert config.sink.warehouse.startswith("s3://")
    assert config.sink.catalog_type == "jdbc"  # load_config refuses hadoop on s3://
    assert catalog_settings(config.sink)["spark.sql.catalog.lake.io-impl"] == S3_FILE_IO
    env = {e["name"]: e for e in sink_container(OBJECT_STORAGE)["env"]}
    assert env["AWS_REGION"]["value"]
    for name, key in (
        ("AWS_ACCESS_KEY_ID", "access-key-id"),
        ("AWS_SECRET_ACCESS_KEY", "secret-access-key"),
    ):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "tidemark-s3", "key": key, "optional": True}
    # the base's secret stays as it was: the catalog's password
    assert "TIDEMARK_SINK__CATALOG_PASSWORD" in env
    assert not any(d["kind"] == "Secret" for d in OBJECT_STORAGE)
