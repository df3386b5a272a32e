"""A fresh local AWS endpoint per benchmark run: EmbeddedAws, the environment, the tables."""

from __future__ import annotations

import logging
import os
from types import TracebackType
from typing import Any

import boto3
from botocore.config import Config

from turnstile.base.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE
from turnstile_tools.local.roles import role_session
from turnstile_tools.local.server import EmbeddedAws
from turnstile_tools.local.stack import ensure_resources, local_aws_environment
from turnstile_tools.local.throughput import PartitionThroughput

__all__ = ["LocalEndpoint", "quiet_handler_environment"]

#: The stream handler runs in this process: no EMF output, no X-Ray daemon, no info logs.
HANDLER_ENVIRONMENT = {
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}


#: Many producer threads share one client: a pool per thread would need more sockets.
CLIENT_CONFIG = Config(max_pool_connections=64, retries={"mode": "standard", "max_attempts": 3})


def quiet_handler_environment() -> None:
    """Set (unless set) what keeps Powertools quiet; call before importing the handler."""
    for key, value in HANDLER_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


class LocalEndpoint:
    """moto's server on a free port with turnstile's tables, named for this run.

    moto keeps its state per process, not per server, so entering also resets it: each
    strategy starts from empty tables and cannot see another's items. The environment
    (endpoint, fake credentials, table names) is set while inside and restored after.
    """

    def __init__(self, label: str, throughput_scale: float | None = None) -> None:
        """``throughput_scale``: the per-partition throughput limit's scale (None: AWS's
        rates, as ``turnstile local`` runs by default; 0: off)."""
        self.label = label
        self.throughput_scale = throughput_scale
        self.intake_table = f"bench-{label}-intake"
        self.main_table = f"bench-{label}-main"
        self.control_table = f"bench-{label}-control"
        self.server: EmbeddedAws | None = None
        self._saved: dict[str, str | None] = {}
        self.client: Any = None
        self.streams: Any = None
        self.session: boto3.Session | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def __enter__(self) -> LocalEndpoint:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request
        throughput = (
            PartitionThroughput(self.throughput_scale)
            if self.throughput_scale is not None
            else None
        )
        self.server = EmbeddedAws("127.0.0.1", 0, throughput=throughput)
        self.server.start()
        self._set_environment(
            {
                **local_aws_environment(self.server.url),
                INTAKE_TABLE.env_var: self.intake_table,
                MAIN_TABLE.env_var: self.main_table,
                CONTROL_TABLE.env_var: self.control_table,
            }
        )
        # moto keeps one state per process: the endpoint is in this one, so wipe it here
        # (its /moto-api is not served: the endpoint answers signed AWS requests only).
        from moto.core.base_backend import BackendDict

        BackendDict.reset()
        self.session = boto3.Session()
        ensure_resources(self.session)
        # Many producer threads share one client: a pool per thread would need more sockets.
        self.client = self.session.client("dynamodb", config=CLIENT_CONFIG)
        self.streams = self.session.client("dynamodbstreams", config=CLIENT_CONFIG)
        return self

    def client_as(self, role: str, service: str = "dynamodb") -> Any:
        """A client that signs as ``role``'s function (``turnstile_tools.local.roles``): the
        endpoint authorizes its requests against that function's deployed policy."""
        return role_session(role).client(service, config=CLIENT_CONFIG)

    def denials(self) -> list[dict[str, Any]]:
        """What the endpoint refused the functions' roles during this run."""
        assert self.server is not None
        return [d.to_dict() for d in self.server.enforcement.denials]

    def stream_arn(self, table: str | None = None) -> str:
        """The stream of ``table`` (default: intake's)."""
        described = self.client.describe_table(TableName=table or self.intake_table)["Table"]
        return str(described["LatestStreamArn"])

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()

    def _set_environment(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self._saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value
