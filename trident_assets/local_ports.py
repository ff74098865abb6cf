"""Free TCP ports on 127.0.0.1 for the local servers trident_assets starts (Spark, PostgreSQL)."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 when asked (another process may still take it first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
