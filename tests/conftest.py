"""Shared fixtures: fake AWS credentials, moto-backed tables, and stream event factories."""

from __future__ import annotations

import os

# Set before boto3 builds any client: tests never reach AWS.
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # In-process streams calls fail with botocore 1.44 without this (docs/design.md §9).
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
)
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("TURNSTILE_INTAKE_TABLE", None)
os.environ.pop("TURNSTILE_MAIN_TABLE", None)
os.environ.pop("TURNSTILE_CONTROL_TABLE", None)

import functools
import math
import signal
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from moto import mock_aws

from tests.roles import functions_under_roles
from turnstile.base.contract import ALL_TABLES, INTAKE_TABLE
from turnstile.storage.store import SignupStore
from turnstile_tools.local.poller import to_lambda_record
from turnstile_tools.stream_reader import list_shards, read_page, shard_iterator

# One loader of botocore's service models for every session of the process: each test's
# fresh ``boto3.Session`` would otherwise parse the DynamoDB and endpoint JSON again, which
# was two thirds of the ``aws`` fixture's cost (0.28 s a test, 0.11 s with one loader).
# The models are read-only data; boto3's default session shares its loader the same way.
botocore.session.create_loader = functools.lru_cache(maxsize=None)(botocore.loaders.create_loader)

# The processes the tests start (`turnstile local`, workers) get Ctrl-C as from a user's
# terminal. A suite run as a background job of a non-interactive shell (`make test &` in a
# script) inherits SIGINT ignored, and so would every child: `turnstile local` then rightly
# ignores Ctrl-C, as it does in such a job, and the tests that press it wait in vain.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class StreamReader:
    """Reads a table's stream (the intake table's by default) from moto, as Lambda would
    receive it."""

    def __init__(self, session: boto3.Session, table: str | None = None) -> None:
        self.streams = session.client("dynamodbstreams")
        arn = session.client("dynamodb").describe_table(TableName=table or INTAKE_TABLE.name)[
            "Table"
        ]["LatestStreamArn"]
        self.arn = arn
        self.shard_id = list_shards(self.streams, arn)[0].shard_id
        self._iterator = shard_iterator(self.streams, arn, self.shard_id, "TRIM_HORIZON")
        self.history: list[dict[str, Any]] = []

    def read_new(self) -> list[dict[str, Any]]:
        """Every record written since the last call, Lambda-shaped, in stream order."""
        page = read_page(self.streams, self._iterator)
        assert page.next_iterator is not None, "the intake stream's shard closed"
        self._iterator = page.next_iterator
        records = [to_lambda_record(r, self.arn) for r in page.records]
        self.history.extend(records)
        return records


def create_tables(session: boto3.Session) -> None:
    client = session.client("dynamodb")
    for spec in ALL_TABLES:
        client.create_table(**spec.create_table_kwargs())


@pytest.fixture
def aws(request: pytest.FixtureRequest) -> Iterator[boto3.Session]:
    """A fresh in-process moto account with turnstile's tables.

    Every store a Lambda handler builds for itself in it runs under its function's
    deployed role (``tests.roles.functions_under_roles``): a request the role would be
    refused on AWS is refused here, and fails the test, unless it is marked
    ``denials_expected``. Every client, of any session, is held to DynamoDB's key and item
    limits as AWS holds it (``turnstile_tools.local.limits``): an over-long key is refused on a
    read too, which moto alone would serve.
    """
    from turnstile_tools.local.limits import enforced_in_moto
    from turnstile_tools.local.server import patch_moto

    # As the local stack runs moto: a transaction backs up only the items it names (not
    # every table), a cancelled one leaves the streams be, and items are written directly.
    patch_moto()
    with mock_aws(), enforced_in_moto():
        session = boto3.Session(region_name="us-east-1")
        create_tables(session)
        with functions_under_roles() as clients:
            yield session
    if request.node.get_closest_marker("denials_expected") is None:
        refused = [(c.role, r.describe()) for c in clients for r in c.denied]
        assert refused == [], f"a handler was refused what its role must allow: {refused}"


@pytest.fixture
def client(aws: boto3.Session) -> Any:
    """The account's DynamoDB client, as a producer or the CLI would hold it."""
    return aws.client("dynamodb")


@pytest.fixture
def store(client: Any) -> SignupStore:
    """A store with every right on ``client``; its retries do not sleep."""
    return SignupStore(client, sleep=lambda _: None)


@pytest.fixture(params=["index", "full-scan"])
def sweep_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a sweep run finds undecided records: ``index``, the sparse index of marked
    records (raw producers write the marker, as one may choose to; no full scan is ever due),
    and ``full-scan``, the whole intake table (every run)."""
    from tests import helpers
    from turnstile.jobs import sweeper

    if request.param == "index":
        monkeypatch.setattr(helpers, "MARK_RAW_INTAKE", True)
        monkeypatch.setattr(sweeper, "FULL_SCAN_EVERY_S", math.inf)
    else:
        monkeypatch.setattr(sweeper, "FULL_SCAN_EVERY_S", 0.0)
    return str(request.param)


@pytest.fixture
def stream(aws: boto3.Session) -> StreamReader:
    return StreamReader(aws)


@pytest.fixture
def wakes(aws: boto3.Session) -> StreamReader:
    """The control table's stream: the processor's wake-ups (``contract.WAKE_SOURCE``)."""
    from turnstile.base.contract import CONTROL_TABLE

    return StreamReader(aws, CONTROL_TABLE.name)


@pytest.fixture
def endpoint() -> Iterator[str]:
    """The embedded endpoint in this process, on a free port, with moto's state wiped
    (moto keeps one state per process, shared with in-process mocks)."""
    from moto.core.base_backend import BackendDict

    from turnstile_tools.local.server import EmbeddedAws

    BackendDict.reset()
    server = EmbeddedAws("127.0.0.1", 0)
    server.start()
    yield server.url
    server.stop()
    BackendDict.reset()
