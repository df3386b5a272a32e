"""Lambda entry point that releases due holds (EventBridge Scheduler, every minute).

It re-emits the holding signup's intake record of every event whose earliest hold is due
(``turnstile.due_holds``); the stream processor, passing the record as a tick, lapses the
holds. It decides nothing.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from turnstile.due_holds import release_due_holds
from turnstile.store import SignupStore

logger = Logger(service="turnstile")
metrics = Metrics(namespace="Turnstile", service="turnstile")


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Due by this function's clock when it runs (the processor judges by its own); a
    failed Query fails the invocation (the DueHoldsErrors alarm), the next minute retries."""
    now_ms = int(time.time() * 1000)
    re_emitted = release_due_holds(SignupStore(), now_ms)
    metrics.add_metric(name="DueHoldsReEmitted", unit=MetricUnit.Count, value=re_emitted)
    logger.info("due holds released", re_emitted=re_emitted, now_ms=now_ms)
    return {"re_emitted": re_emitted, "now_ms": now_ms}
