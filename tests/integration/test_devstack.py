"""The development stack starts and stops cleanly, and refuses bad setups clearly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tidemark.core.ports import port_is_open
from tidemark.devstack.procs import pid_alive


def tidemark(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def test_up_then_down_leaves_no_process_port_or_cluster(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    up = tidemark("dev", "up", "--run-dir", str(run_dir), cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        assert f"configuration: {run_dir / 'tidemark.yaml'}" in up.stdout
        state = json.loads((run_dir / "stack.json").read_text())
        pids = [p["pid"] for p in state["processes"].values()]
        assert sorted(state["processes"]) == ["broker", "debezium"]
        assert all(pid_alive(pid) for pid in pids)
        config = yaml.safe_load((run_dir / "tidemark.yaml").read_text())
        assert oct((run_dir / "tidemark.yaml").stat().st_mode & 0o777) == "0o600"
        broker_port = int(config["kafka"]["bootstrap_servers"].rsplit(":", 1)[1])
        pg_port = config["source"]["port"]
        data_dir = Path(state["postgres"]["data_dir"])
        assert port_is_open(broker_port) and port_is_open(pg_port) and data_dir.exists()
        assert config["source"]["password"] not in up.stdout + up.stderr
    finally:
        down = tidemark("dev", "down", "--run-dir", str(run_dir), cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert "stopped: debezium, postgres, broker" in down.stdout
    assert not any(pid_alive(pid) for pid in pids)
    assert not port_is_open(broker_port) and not port_is_open(pg_port)
    assert not data_dir.exists()
    assert not (run_dir / "stack.json").exists()
    again = tidemark("dev", "down", "--run-dir", str(run_dir), cwd=tmp_path)
    assert "nothing was running" in again.stdout


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv only: no java on it
    result = tidemark("dev", "up", "--run-dir", str(tmp_path / "run"), env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "Java 17 or newer is needed and none was found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "stack.json").exists()


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_port_in_use_is_a_clear_error(tmp_path: Path, busy_port: int) -> None:
    config = tmp_path / "tidemark.yaml"
    config.write_text(f"dev:\n  broker_port: {busy_port}\n")
    result = tidemark(
        "dev", "up", "--config", str(config), "--run-dir", str(tmp_path / "run"), cwd=tmp_path
    )
    assert result.returncode == 2
    assert f"port {busy_port} for the Kafka broker is already in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "stack.json").exists()


def test_processor_web_port_in_use_is_a_clear_error(tmp_path: Path, busy_port: int) -> None:
    config = tmp_path / "tidemark.yaml"
    config.write_text(f"processor:\n  web_port: {busy_port}\n")
    result = tidemark("process", "--config", str(config), cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert f"port {busy_port} for the processor's web server is already in use" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kafka:\n  bootstrap: x\n", "kafka: unknown key 'bootstrap'"),
        ("processor: {batch_size: -1}\n", "processor.batch_size: must be greater than 0"),
        ("{{{\n", "not valid YAML"),
    ],
)
def test_bad_configuration_file_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    for command in (["process"], ["sink", "--once"], ["dev", "up"]):
        result = tidemark(*command, "--config", str(config), cwd=tmp_path, timeout=60)
        assert result.returncode == 2, command
        assert message in result.stderr
        assert "Traceback" not in result.stderr
