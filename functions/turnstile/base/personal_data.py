"""Personal data: how long it is kept, and how logs refer to a signup without naming it.

A signup's id and its ``attributes`` may identify a person. Items carry ``expires_at``
(epoch seconds), which DynamoDB's TTL deletes them by; logs carry ``signup_ref`` (keyed by
the stack's log key), never the id itself, and never ``attributes``.

Intake records always expire, ``INTAKE_RETENTION_DAYS`` (30) days after they are written
unless ``TURNSTILE_INTAKE_RETENTION_DAYS`` says otherwise; decisions expire only when
``TURNSTILE_DECISION_RETENTION_DAYS`` is set, that many days after they were decided, and
never before the intake record that could bring them back (``decision_expires_at``). The
CDK stack passes both variables to the functions (``turnstile:intakeRetentionDays``,
``turnstile:decisionRetentionDays``); the CLI reads the same ones.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from decimal import Decimal

from turnstile.base.clock import parse_timestamp
from turnstile.base.contract import (
    DECISION_RETENTION_ENV,
    INTAKE_RETENTION_DAYS,
    INTAKE_RETENTION_ENV,
)

__all__ = [
    "DAY_S",
    "LOG_KEY_ENV",
    "LOG_KEY_SECRET_ENV",
    "TTL_LAG_S",
    "decision_expires_at",
    "decision_retention_days",
    "intake_expires_at",
    "intake_expiry",
    "intake_retention_days",
    "log_key",
    "outlives",
    "reset_log_key",
    "signup_ref",
]

DAY_S = 86_400


def _days(name: str, environ: Mapping[str, str] | None) -> int | None:
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return None
    try:
        days = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number of days, not {raw!r}") from None
    if days < 1:
        raise ValueError(f"{name} must be at least 1 day, not {days}")
    return days


def intake_retention_days(environ: Mapping[str, str] | None = None) -> int:
    """Days an intake record is kept: ``TURNSTILE_INTAKE_RETENTION_DAYS``, else 30."""
    days = _days(INTAKE_RETENTION_ENV, environ)
    return INTAKE_RETENTION_DAYS if days is None else days


def decision_retention_days(environ: Mapping[str, str] | None = None) -> int | None:
    """Days a decision is kept: ``TURNSTILE_DECISION_RETENTION_DAYS``, else None (kept)."""
    return _days(DECISION_RETENTION_ENV, environ)


def intake_expires_at(days: int, now: float | None = None) -> int:
    """The ``expires_at`` of an intake record written ``now`` (epoch seconds)."""
    return int(time.time() if now is None else now) + days * DAY_S


#: How late DynamoDB's TTL may delete an item past its ``expires_at`` (AWS: "typically
#: within a few days"): a decision outlives its intake record by at least this much.
TTL_LAG_S = 7 * DAY_S


def intake_expiry(raw: object) -> int | None:
    """When TTL deletes an intake record whose ``expires_at`` is ``raw``: epoch seconds, or
    None when it never does (absent, or not a number: DynamoDB's TTL ignores it)."""
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
        return None
    if isinstance(raw, Decimal) and not raw.is_finite():
        return None
    return int(raw)


def decision_expires_at(
    decided_at: str, days: int | None, intakes: Iterable[int | None] = ()
) -> int | None:
    """The ``expires_at`` of decisions made at ``decided_at`` (ISO-8601) from intake
    records that TTL deletes at ``intakes`` (``intake_expiry``), or None (kept).

    ``days`` after the decision, and never before an intake record that could bring the
    signup back is gone (its expiry plus ``TTL_LAG_S``): a decision that expired while its
    record lived would have the sweeper decide the signup again. A record that never
    expires keeps its decision too."""
    if days is None:
        return None
    decided = parse_timestamp(decided_at)
    if decided is None:
        raise ValueError(f"decided_at {decided_at!r} is not a time")
    at = int(decided.timestamp()) + days * DAY_S
    for expiry in intakes:
        if expiry is None:
            return None
        at = max(at, expiry + TTL_LAG_S)
    return at


def outlives(intake_expires_at: object, decision_expires_at: object) -> bool:
    """Whether an intake record may outlive its decision (whose ``expires_at`` is given;
    a decision without one is kept, and nothing outlives it)."""
    kept = intake_expiry(decision_expires_at)
    if kept is None:
        return False
    expiry = intake_expiry(intake_expires_at)
    return expiry is None or expiry + TTL_LAG_S > kept


#: The key of ``signup_ref`` as text (the local stack sets it, from its state directory).
LOG_KEY_ENV = "TURNSTILE_LOG_KEY"
#: The ARN of the Secrets Manager secret holding that key (the deployed stack sets it).
LOG_KEY_SECRET_ENV = "TURNSTILE_LOG_KEY_SECRET"
_log_key: bytes | None = None
_log_key_lock = threading.Lock()


def log_key() -> bytes:
    """The key of ``signup_ref``: ``TURNSTILE_LOG_KEY``, else the secret named by
    ``TURNSTILE_LOG_KEY_SECRET`` (read once per process), else a random key of this
    process alone (its references then match no other process's: a warning says so).
    Never raises: a secret that cannot be read costs the correlation, never a request."""
    global _log_key
    with _log_key_lock:
        if _log_key is None:
            _log_key = _read_log_key()
        return _log_key


def _read_log_key() -> bytes:
    text = os.environ.get(LOG_KEY_ENV)
    if text:
        return text.encode()
    secret = os.environ.get(LOG_KEY_SECRET_ENV)
    if secret:
        try:
            import boto3

            value = boto3.client("secretsmanager").get_secret_value(SecretId=secret)
            return str(value["SecretString"]).encode()
        except Exception as exc:  # a log reference must never fail a request
            logging.getLogger(__name__).warning(
                "log key secret unreadable (%s): signup references of this process are its own",
                type(exc).__name__,
            )
    return secrets.token_bytes(32)


def reset_log_key() -> None:
    """Read the key again at the next reference (tests; a changed environment)."""
    global _log_key
    with _log_key_lock:
        _log_key = None


def signup_ref(event_id: str, signup_id: str) -> str:
    """How logs name a signup: the first 16 hex digits of the HMAC-SHA-256 of
    ``event/signup`` under the stack's log key (``log_key``).

    Pseudonymous: only whoever holds the key (the functions, an operator allowed to read
    the secret) can check a candidate id against a log line; a log reader alone cannot
    guess an email or a phone number back from it, and the same person's signups for two
    events do not share a reference.
    """
    message = f"{event_id}/{signup_id}".encode("utf-8", "surrogatepass")
    return hmac.new(log_key(), message, hashlib.sha256).hexdigest()[:16]
