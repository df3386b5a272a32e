"""Fault injection for the local worker's AWS calls (fault drills): throttling and 5xx."""

from __future__ import annotations

import random
import threading
from typing import Any

from botocore.exceptions import ClientError

__all__ = ["FaultInjectingClient"]

FAULT_CODES = (
    ("ThrottlingException", 400),
    ("ProvisionedThroughputExceededException", 400),
    ("InternalServerError", 500),
    ("ServiceUnavailable", 503),
)


class FaultInjectingClient:
    """A boto3 client whose calls fail at ``rate`` with DynamoDB's transient errors.

    ``stuck_event``: every call whose request names this event id is throttled, as a hot
    partition that stays throttled (its batches exhaust their retries: the on-failure path).
    """

    def __init__(
        self, client: Any, rate: float, seed: int | None = None, stuck_event: str | None = None
    ) -> None:
        self._client = client
        self._rate = rate
        self._stuck = repr(stuck_event) if stuck_event else None
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.calls = 0
        self.injected = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith(("_", "get_waiter", "get_paginator", "can_paginate")) or not callable(
            attr
        ):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls += 1
                fail = self._rng.random() < self._rate
                code, status = self._rng.choice(FAULT_CODES)
                if self._stuck is not None and self._stuck in repr(kwargs):
                    fail, code, status = True, "ThrottlingException", 400
                if fail:
                    self.injected += 1
            if fail:
                raise ClientError(
                    {
                        "Error": {"Code": code, "Message": "injected by the fault drill"},
                        "ResponseMetadata": {"HTTPStatusCode": status},
                    },
                    name,
                )
            return attr(*args, **kwargs)

        return call
