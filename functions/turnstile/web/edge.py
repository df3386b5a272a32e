"""The HTTP edge's numbers and names: its service name, its limits, what a browser may send.

The other modules of ``turnstile.web`` read them from here; ``turnstile.web.api`` exports
them (the CDK stack and the local API server read them there).
"""

from __future__ import annotations

__all__ = [
    "CORS_ALLOW_HEADERS",
    "CORS_EXPOSE_HEADERS",
    "CORS_MAX_AGE_S",
    "JSON",
    "LOCAL_OPERATOR",
    "MAX_BODY_BYTES",
    "MAX_WAIT_S",
    "RETRY_AFTER_S",
    "SERVICE",
    "WAIT_MARGIN_S",
]

SERVICE = "turnstile-api"
JSON = "application/json"

#: Largest request body (decoded bytes); larger ones get 413 before any parsing.
MAX_BODY_BYTES = 16 * 1024
#: Seconds a client should wait after a 503 before trying again.
RETRY_AFTER_S = 1
#: The longest ``?wait=`` of a waiting read (``GET .../signups/{signup_id}/decision``), and
#: its default. A wait holds one instance of the waiter function for as long as it lasts;
#: shorter waits hand those instances round sooner (docs/operations.md, "Waiting reads").
MAX_WAIT_S = 10
#: A wait ends this long before the invocation's own deadline, to answer in time.
WAIT_MARGIN_S = 2.0

#: Cross-origin requests, when a stack (``turnstile:apiCorsOrigins``) or ``turnstile local
#: --cors-origin`` allows some origins: what a browser may send, and may read back.
CORS_ALLOW_HEADERS = (
    "authorization",
    "content-type",
    "x-amz-content-sha256",
    "x-amz-date",
    "x-amz-security-token",
)
CORS_EXPOSE_HEADERS = ("location", "retry-after")
CORS_MAX_AGE_S = 600

#: The authorizer context (``requestContext.authorizer.lambda``) the local API gives an
#: unsigned request: the local operator, an admin. The deployed API has no Lambda
#: authorizer, so no caller there can carry it.
LOCAL_OPERATOR = "turnstileLocalOperator"
