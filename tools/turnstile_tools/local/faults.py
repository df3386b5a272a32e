"""Fault injection for the local worker's AWS calls (fault drills): throttling and 5xx,
and a gate that holds a worker's first commit until a drill lets it go."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
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

    ``commit_gate``: the first update of an event item (a commit: the event was read, the
    decisions made) first creates ``<commit_gate>.reached``, then waits until
    ``commit_gate`` exists (at most ``GATE_TIMEOUT_S``): a drill holds one worker there
    while another commits, so the first one's commit conflicts, whatever the timing.
    """

    #: How long a gated commit waits for the drill at most.
    GATE_TIMEOUT_S = 300.0

    def __init__(
        self,
        client: Any,
        rate: float,
        seed: int | None = None,
        stuck_event: str | None = None,
        commit_gate: Path | None = None,
    ) -> None:
        self._client = client
        self._gate = commit_gate
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
            if self._gate is not None and name == "update_item" and _is_commit(kwargs):
                gate, self._gate = self._gate, None
                Path(f"{gate}.reached").touch()
                deadline = time.monotonic() + self.GATE_TIMEOUT_S
                while not gate.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
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


def _is_commit(kwargs: dict[str, Any]) -> bool:
    """Whether an ``update_item`` is of an event item (the control table's ``EVENT#``)."""
    from turnstile.base.contract import ControlKey

    pk = (kwargs.get("Key") or {}).get(ControlKey.PK, {}).get("S", "")
    return str(pk).startswith(ControlKey.EVENT_PREFIX)
