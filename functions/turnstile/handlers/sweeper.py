"""Lambda entry point of the scheduled sweeper (EventBridge Scheduler, every 5 minutes)."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from turnstile.jobs.sweeper import Sweeper, run_id_for
from turnstile.storage.failures import FailureQueue
from turnstile.storage.store import SignupStore

logger = Logger(service="turnstile")
metrics = Metrics(namespace="Turnstile", service="turnstile")


def _run_id(event: dict[str, Any]) -> str:
    """The schedule's slot, so a duplicate delivery of one tick is the same run.

    The stack's schedule passes ``scheduled_time``; a schedule without Input delivers
    EventBridge Scheduler's default notification, an EventBridge event whose ``time`` is
    when the schedule fired. Only without either is the slot taken from the clock.
    """
    if isinstance(event, dict):
        for field in ("scheduled_time", "time"):
            scheduled = event.get(field)
            if isinstance(scheduled, str):
                try:
                    return run_id_for(datetime.fromisoformat(scheduled.replace("Z", "+00:00")))
                except ValueError:
                    pass
    return run_id_for()


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    sweeper = Sweeper(
        SignupStore(),
        owner=getattr(context, "aws_request_id", None),
        min_age_s=float(os.environ.get("TURNSTILE_SWEEP_MIN_AGE_S", "300")),
        full_scan_every_s=float(os.environ.get("TURNSTILE_SWEEP_FULL_SCAN_EVERY_S", "86400")),
        failures=FailureQueue.from_environment(),
    )
    if isinstance(event, dict) and event.get("replay_failed"):
        results = sweeper.replay_failed()
    else:
        results = [sweeper.sweep(_run_id(event))]
    for result in results:
        metrics.add_metric(name="SignupReEmitted", unit=MetricUnit.Count, value=result.re_emitted)
        if result.status == "succeeded":
            # Its absence is the alarm: lease_busy, already_ran and failed runs do not count.
            metrics.add_metric(name="SweepSucceeded", unit=MetricUnit.Count, value=1)
        # Every run: the EventParked alarm stays on while any event is parked.
        metrics.add_metric(name="EventsParked", unit=MetricUnit.Count, value=result.parked_events)
        logger.info("sweep finished", **result.to_dict())
        if result.status == "failed":
            # Fail the invocation so the alarm on the sweeper's errors sees it.
            raise RuntimeError(f"sweep run {result.run_id} failed: {result.errors}")
    return {"runs": [r.to_dict() for r in results]}
