"""The offline check of the NetworkPolicies (:mod:`tests.network_policies`), which ``make
lint`` runs on ``k8s/`` and its two variants (``spark-cluster/``, ``object-storage/``):
the manifests pass, and each rule catches what breaks it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.network_policies import findings, render

K8S = Path(__file__).resolve().parents[2] / "k8s"
LABELS = {"app": "web"}
WORKLOAD = {
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns"},
    "spec": {
        "template": {
            "metadata": {"labels": LABELS},
            "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 80}]}]},
        }
    },
}
SCRAPER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def policy(rule: dict[str, Any], selector: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "podSelector": {"matchLabels": LABELS} if selector is None else selector,
            "policyTypes": ["Ingress"],
            "ingress": [rule],
        },
    }


@pytest.mark.parametrize("kustomization", ["", "spark-cluster", "object-storage"])
def test_the_manifests_policies_hold(kustomization: str) -> None:
    made = render(K8S / kustomization)
    assert {d["kind"] for d in made} >= {"Deployment", "StatefulSet", "NetworkPolicy"}
    assert findings(made) == []


def test_a_well_fenced_workload_passes() -> None:
    assert findings([WORKLOAD, policy({"from": [SCRAPER], "ports": [{"port": "http"}]})]) == []


@pytest.mark.parametrize(
    ("rule", "selector", "finding"),
    [
        (
            {"from": [SCRAPER], "ports": [{"port": "http"}]},
            {"matchLabels": {"app": "other"}},
            "Deployment web: no NetworkPolicy restricts its ingress",
        ),
        ({"ports": [{"port": "http"}]}, None, "no 'from' admits every peer"),
        ({"from": [SCRAPER]}, None, "no 'ports' admits every port"),
        (
            {"from": [SCRAPER], "ports": [{"port": "metrics"}]},
            None,
            "port 'metrics' is not a port of Deployment web",
        ),
        (
            {"from": [{**SCRAPER, "namespaceSelector": {}}], "ports": [{"port": 80}]},
            None,
            "namespaceSelector {} admits every namespace",
        ),
        (
            {
                "from": [{**SCRAPER, "namespaceSelector": {"matchLabels": {"team": "obs"}}}],
                "ports": [{"port": 80}],
            },
            None,
            "pin the namespace by kubernetes.io/metadata.name",
        ),
        (
            {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 80}]},
            None,
            "ipBlock 0.0.0.0/0 admits every address",
        ),
        (
            {"from": [{"podSelector": {}}], "ports": [{"port": 80}]},
            None,
            "podSelector {} admits every pod of the namespace",
        ),
    ],
)
def test_each_rule_catches_what_breaks_it(
    rule: dict[str, Any], selector: dict[str, Any] | None, finding: str
) -> None:
    [found] = findings([copy.deepcopy(WORKLOAD), policy(rule, selector)])
    assert finding in found
