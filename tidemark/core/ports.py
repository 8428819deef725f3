"""Loopback port helpers: pick a free port, refuse one that is taken."""

from __future__ import annotations

import socket

from tidemark.core.errors import PortInUseError


def free_port() -> int:
    """A loopback port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def claim_port(port: int, what: str, host: str = "127.0.0.1") -> int:
    """``port``, or a free one when 0; refuse a port that is already in use."""
    if port == 0:
        return free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers do: connections of a previous run in TIME_WAIT do not block a restart.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise PortInUseError(
                f"port {port} for the {what} is already in use; choose another one "
                f"or 0 for a free port"
            ) from None
    return port
