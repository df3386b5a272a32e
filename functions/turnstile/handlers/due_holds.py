"""Lambda entry point that releases due holds (EventBridge Scheduler, every minute).

It wakes every event whose earliest hold is due, or whose release (a parked event) is due
(``turnstile.jobs.due_holds``): a write of the event's wake-up item, which the stream
processor takes as a tick of the event. It decides nothing.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from turnstile.jobs.due_holds import release_due_holds
from turnstile.storage.store import SignupStore

logger = Logger(service="turnstile")
metrics = Metrics(namespace="Turnstile", service="turnstile")


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Due by this function's clock when it runs (the processor judges by its own); a
    failed Query fails the invocation (the DueHoldsErrors alarm), the next minute retries."""
    now_ms = int(time.time() * 1000)
    woken = release_due_holds(SignupStore(), now_ms)
    metrics.add_metric(name="EventsWoken", unit=MetricUnit.Count, value=woken)
    logger.info("due events woken", woken=woken, now_ms=now_ms)
    return {"woken": woken, "now_ms": now_ms}
