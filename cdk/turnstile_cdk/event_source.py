"""EventSourceSettings -> CloudFormation properties of the stream's event source mapping.

Pure (no CDK import), so a test can compare the synthesized template with exactly the
settings the local ``StreamPoller`` runs with: one definition, two runtimes.
"""

from __future__ import annotations

import json
from typing import Any

from turnstile.base.contract import EventSourceSettings

__all__ = ["event_source_mapping_properties"]


def event_source_mapping_properties(
    settings: EventSourceSettings, *, metrics: bool = True
) -> dict[str, Any]:
    """The ``AWS::Lambda::EventSourceMapping`` properties that ``settings`` determines.

    Leaves out what the stack wires (FunctionName, EventSourceArn, DestinationConfig).
    ``poll_interval_s`` has no AWS counterpart: AWS polls each shard four times a second.
    """
    properties: dict[str, Any] = {
        "StartingPosition": settings.starting_position,
        "BatchSize": settings.batch_size,
        "MaximumBatchingWindowInSeconds": settings.max_batching_window_s,
        "ParallelizationFactor": settings.parallelization_factor,
        "MaximumRetryAttempts": settings.retry_attempts,
        "MaximumRecordAgeInSeconds": settings.max_record_age_s,
        "BisectBatchOnFunctionError": settings.bisect_on_error,
    }
    if settings.report_batch_item_failures:
        # Without it one failed record retries (and blocks) the whole batch.
        properties["FunctionResponseTypes"] = ["ReportBatchItemFailures"]
    if settings.filter_patterns:
        properties["FilterCriteria"] = {
            "Filters": [
                # CloudFormation wants each pattern as a JSON string; sorted keys keep the
                # template (and so the deployment) stable across Python runs.
                {"Pattern": json.dumps(pattern, sort_keys=True, separators=(",", ":"))}
                for pattern in settings.filter_patterns
            ]
        }
    if metrics:
        # EventCount: polled / filtered / failed-invoke counts per mapping, for the dashboard.
        properties["MetricsConfig"] = {"Metrics": ["EventCount"]}
    return properties
