"""The integration tests' shared fixtures: a DynamoDB client of the moto account (``aws``,
tests/conftest.py) and a store on it that never sleeps between retries."""

from __future__ import annotations

from typing import Any

import pytest

from turnstile.storage.store import SignupStore


@pytest.fixture
def client(aws: Any) -> Any:
    """The account's DynamoDB client, as a producer or the CLI would hold it."""
    return aws.client("dynamodb")


@pytest.fixture
def store(client: Any) -> SignupStore:
    """A store with every right on ``client``; its retries do not sleep."""
    return SignupStore(client, sleep=lambda _: None)
