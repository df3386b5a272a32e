"""What the benchmarks that start a local stack in their own process share: a free port,
and the environment the stack's functions expect (the local stack's keys, quiet
Powertools)."""

from __future__ import annotations

import os
import socket

__all__ = ["free_port", "local_environment"]


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_environment() -> None:
    """Set, where unset, the variables a local stack run in this process needs."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
