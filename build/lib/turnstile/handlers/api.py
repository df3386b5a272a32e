"""Lambda entry point of the HTTP API (API Gateway HTTP API, payload format 2.0).

Thin by design: Powertools decorators, then the resolver of ``turnstile.api``. The same
``handler`` serves the local stack through ``turnstile.local.api_server.ApiServer``.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths

from turnstile.api import SERVICE, create_app
from turnstile.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE
from turnstile.store import SignupStore

__all__ = ["app", "get_store", "handler"]

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Turnstile"), service=SERVICE
)


@functools.cache
def get_store() -> SignupStore:
    """The container's store, built on first use and reused by every later invocation.

    Built lazily so the table names (``TURNSTILE_*_TABLE``)
    and ``AWS_ENDPOINT_URL`` are read when the first request arrives, not at import.
    Tests that change them call ``get_store.cache_clear()``.
    """
    return SignupStore(
        intake_table=INTAKE_TABLE.name,
        main_table=MAIN_TABLE.name,
        control_table=CONTROL_TABLE.name,
    )


app = create_app(store=get_store, metrics=metrics)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer one API Gateway HTTP API (v2) event with a v2 response dict."""
    return app.resolve(event, context)
