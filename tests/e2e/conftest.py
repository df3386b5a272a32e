"""The local stack started as a user starts it: ``turnstile local`` in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningStack:
    endpoint: str
    api_url: str
    env: dict[str, str]
    state_dir: Path
    process: subprocess.Popen

    def turnstile(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the ``turnstile`` command as a user would, against this stack."""
        return subprocess.run(
            [str(BIN / "turnstile"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def dynamodb(self, **retries: Any) -> Any:
        """A boto3 DynamoDB client pointed at the stack, with botocore's standard retries
        as ``retries`` sets them (``max_attempts``, or ``total_max_attempts``)."""
        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"mode": "standard", **retries}),
        )

    def aws(self, *args: str) -> subprocess.CompletedProcess:
        """The AWS CLI, pointed at the stack with --endpoint-url, as the README shows."""
        return subprocess.run(
            [str(BIN / "aws"), *args, "--endpoint-url", self.endpoint],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )


def user_environment(endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNSTILE_", "POWERTOOLS_"))}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
    )
    env.pop("AWS_SESSION_TOKEN", None)
    return env


def wait_healthy(api_url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"turnstile local exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
                if response.status == 200 and all(json.load(response).values()):
                    return
        except OSError:
            pass
        # Short: every start of a stack waits here (about a second of imports), and a poll
        # of a port nobody listens on yet is a refused connection, nothing more.
        time.sleep(0.05)
    raise RuntimeError("turnstile local did not become healthy")


def denials(endpoint: str) -> list[dict]:
    """What the stack's endpoint refused the functions' roles since it started."""
    with urllib.request.urlopen(f"{endpoint}/_turnstile/denials", timeout=10) as response:
        return json.load(response)["denials"]


@contextmanager
def running_local_stack(
    state_dir: Path,
    *extra: str,
    environment: dict[str, str] | None = None,
    denials_expected: bool = False,
) -> Iterator[RunningStack]:
    """``turnstile local`` on free ports, as a user starts it; stopped on exit.

    Every function of it runs under its deployed role: unless ``denials_expected``, a run
    in which the endpoint refused any of them anything fails, naming each refusal.
    ``environment``: variables for ``turnstile local`` beyond the user's.
    """
    port, api_port = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = user_environment(endpoint)
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "local.log", "w") as log:
        process = subprocess.Popen(
            [
                str(BIN / "turnstile"),
                "local",
                "--port",
                str(port),
                "--api-port",
                str(api_port),
                "--state-dir",
                str(state_dir),
                *extra,
            ],
            env={**env, **(environment or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        api_url = f"http://127.0.0.1:{api_port}"
        try:
            wait_healthy(api_url, process)
            yield RunningStack(endpoint, api_url, env, state_dir, process)
            if not denials_expected and process.poll() is None:
                refused = denials(endpoint)
                assert refused == [], f"turnstile local refused its own functions: {refused}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    with running_local_stack(tmp_path_factory.mktemp("turnstile-state")) as stack:
        yield stack
