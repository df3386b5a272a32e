"""Lambda entry point of the HTTP API (API Gateway HTTP API, payload format 2.0).

Thin by design: Powertools decorators, then the resolver of ``turnstile.web.api``. The same
``handler`` serves the local stack through ``turnstile_tools.local.api_server.ApiServer``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from turnstile.base.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE
from turnstile.handlers.threads import metrics_per_thread
from turnstile.storage.store import SignupStore
from turnstile.web.api import SERVICE, WAITING_ROUTES, create_app

__all__ = [
    "app",
    "get_store",
    "handler",
    "new_instance",
    "new_waiter_instance",
    "publish_metrics",
    "waiter",
    "waiter_app",
]

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


def publish_metrics() -> None:
    """Publish what this request counted (one EMF document), if it counted anything.

    Not Powertools' ``log_metrics``: most requests (every read) count nothing, and it
    would warn "No application metrics to publish" for each, to the function's log
    (once per container on Lambda, on the console of ``turnstile local``). With metrics
    disabled, what was counted is dropped: Powertools would keep it and pile it up.
    """
    if not metrics.metric_set:
        return
    if is_metrics_disabled():
        metrics.clear_metrics()
    else:
        metrics.flush_metrics()


def _entry(resolver: Any) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    @logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
    @tracer.capture_lambda_handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway HTTP API (v2) event with a v2 response dict."""
        try:
            return resolver.resolve(event, context)
        finally:
            publish_metrics()

    return handler


handler = _entry(app)

#: The waiter function's: the waiting reads only (``turnstile.web.api.WAITING_ROUTES``). Its
#: own function, so a wait holds an instance of the waiter, never one the API needs.
waiter_app = create_app(store=get_store, metrics=metrics, routes=WAITING_ROUTES)
waiter = _entry(waiter_app)


def new_instance(
    store: Callable[[], SignupStore] = get_store,
) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """Another handler with a resolver of its own: what a second Lambda instance would be.
    The local API server serves concurrent requests with several (a resolver holds the
    request it answers, so one serves one request at a time); they share the store
    (``store``: the container's, or the local stack's, signed as the API's role) and the
    module's logger; what each request counts is its thread's own (``metrics_per_thread``),
    published with no other's."""
    metrics_per_thread(metrics)
    return _entry(create_app(store=store, metrics=metrics))


def new_waiter_instance(
    store: Callable[[], SignupStore] = get_store,
) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """``new_instance`` for the waiter function: another instance serving waiting reads."""
    metrics_per_thread(metrics)
    return _entry(create_app(store=store, metrics=metrics, routes=WAITING_ROUTES))
