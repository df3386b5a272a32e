"""The stack's options: one typed object, parsed from CDK context (``cdk deploy -c key=value``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CREATE_KEY",
    "DECISION_RETENTION_ENV",
    "INTAKE_RETENTION_ENV",
    "ContextKey",
    "TurnstileSettings",
]

#: ``turnstile:encryptionKey``'s value asking the stack to create its own key.
CREATE_KEY = "create"
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")

#: The functions' environment variables carrying the retention options (days).
INTAKE_RETENTION_ENV = "TURNSTILE_INTAKE_RETENTION_DAYS"
DECISION_RETENTION_ENV = "TURNSTILE_DECISION_RETENTION_DAYS"


class ContextKey:
    """CDK context keys the app reads (in cdk.json or ``-c key=value``)."""

    STACK_NAME = "turnstile:stackName"
    #: true (default): tables are retained on stack deletion and deletion-protected.
    RETAIN_TABLES = "turnstile:retainTables"
    #: Both set: the HTTP API uses a JWT authorizer instead of IAM.
    JWT_ISSUER = "turnstile:jwtIssuer"
    JWT_AUDIENCE = "turnstile:jwtAudience"
    #: Pin the Powertools layer by its ARN version number instead of its SSM parameter.
    POWERTOOLS_LAYER_VERSION = "turnstile:powertoolsLayerVersion"
    LOG_LEVEL = "turnstile:logLevel"
    API_RATE_LIMIT = "turnstile:apiRateLimit"
    API_BURST_LIMIT = "turnstile:apiBurstLimit"
    #: Optional e-mail address subscribed to the alarm topic.
    ALARM_EMAIL = "turnstile:alarmEmail"
    #: Per-route throttling: signup submission, and each read route, apart from the rest.
    SIGNUP_RATE_LIMIT = "turnstile:signupRateLimit"
    SIGNUP_BURST_LIMIT = "turnstile:signupBurstLimit"
    READ_RATE_LIMIT = "turnstile:readRateLimit"
    READ_BURST_LIMIT = "turnstile:readBurstLimit"
    #: The waiting read (GET .../decision): its own route limits.
    WAIT_RATE_LIMIT = "turnstile:waitRateLimit"
    WAIT_BURST_LIMIT = "turnstile:waitBurstLimit"
    #: Days an intake record (a producer's signup, personal data) is kept: its TTL.
    INTAKE_RETENTION_DAYS = "turnstile:intakeRetentionDays"
    #: Days a decision is kept after its last move (default 365); "none": kept for good
    #: (the main table gets no TTL).
    DECISION_RETENTION_DAYS = "turnstile:decisionRetentionDays"
    #: Reserved concurrency of each function; 0 or "none": off.
    PROCESSOR_RESERVED_CONCURRENCY = "turnstile:processorReservedConcurrency"
    SWEEPER_RESERVED_CONCURRENCY = "turnstile:sweeperReservedConcurrency"
    API_RESERVED_CONCURRENCY = "turnstile:apiReservedConcurrency"
    WAITER_RESERVED_CONCURRENCY = "turnstile:waiterReservedConcurrency"
    DUE_HOLDS_RESERVED_CONCURRENCY = "turnstile:dueHoldsReservedConcurrency"
    #: Origins whose browsers may call the HTTP API (CORS), comma-separated or a list;
    #: ``*`` for any. Unset: none (no CORS configuration at all).
    API_CORS_ORIGINS = "turnstile:apiCorsOrigins"
    #: IAM principal ARN patterns (``*`` a wildcard) the API treats as admins, comma-
    #: separated or a list. Unset: none (with JWT, the scope turnstile/admin).
    ADMIN_PRINCIPALS = "turnstile:adminPrincipals"
    #: Direct producers confined to their own events: a JSON object, each producer's name
    #: and its event id patterns (``{"shop-a": ["shop-a-*"]}``); a managed policy each.
    CONFINED_PRODUCERS = "turnstile:confinedProducers"
    #: The most events one organizer (an API caller who is no admin) may create; 0 or
    #: "none": no cap.
    MAX_EVENTS_PER_ORGANIZER = "turnstile:maxEventsPerOrganizer"
    #: The key the tables, the functions' log groups, the API's access logs and the log
    #: key's secret are encrypted with: unset (AWS owned/managed keys), "create" (a
    #: customer managed key the stack creates), or the ARN of a key of your own.
    ENCRYPTION_KEY = "turnstile:encryptionKey"


#: An event id pattern of a confined producer: an id's characters, and IAM's ``*`` and ``?``.
_EVENT_PATTERN = re.compile(r"^[A-Za-z0-9._:@*?-]{1,128}$")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: An origin as a browser sends it: scheme, host, optional port; no path, no slash.
_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.-]+(?::\d{1,5})?$")


@dataclass(frozen=True)
class TurnstileSettings:
    """Everything an operator may choose about a turnstile stack; the defaults are production's."""

    stack_name: str = "Turnstile"
    retain_tables: bool = True
    jwt_issuer: str | None = None
    jwt_audience: tuple[str, ...] = ()
    powertools_layer_version: int | None = None
    log_level: str = "INFO"
    api_rate_limit: int = 500
    api_burst_limit: int = 1000
    alarm_email: str | None = None
    #: One event's signups share an intake partition (1,000 writes/s): stay below it.
    signup_rate_limit: int = 500
    signup_burst_limit: int = 1000
    #: Polling for a decision is a strongly consistent point read (3,000 reads/s per
    #: partition): reads get more room than submissions, and a polling storm cannot eat
    #: into the submissions' limit (each route has its own).
    read_rate_limit: int = 1000
    read_burst_limit: int = 2000
    #: A waiting read holds a waiter instance until the decision (a second or two) or
    #: MAX_WAIT_S: 50/s is about what 50 instances serve at ~1 s a wait (docs/operations.md).
    wait_rate_limit: int = 50
    wait_burst_limit: int = 100
    intake_retention_days: int = 30
    #: A decision names a signup (personal data): deleted a year after its last move, unless
    #: the operator keeps decisions ("none"). Longer than any intake record lives.
    decision_retention_days: int | None = 365
    #: More than the intake stream's shards times the parallelization factor (1), so
    #: the processor is never throttled by its own limit, yet a bug or a flood cannot
    #: take the account's whole concurrency from the API.
    processor_reserved_concurrency: int | None = 10
    #: One sweep at a time (its lease enforces it too); a second overlapping invocation
    #: is throttled and retried by Lambda instead of waiting for the lease.
    sweeper_reserved_concurrency: int | None = 1
    #: A cap on the API: capped, a flood is throttled (API Gateway answers 500) before it
    #: can use the account's concurrency that the processor and the due-holds release need.
    api_reserved_concurrency: int | None = 100
    #: The waiter's own pool: how many waiting reads may be held at once. Waits never take
    #: the API's instances; past this many, a wait fails (500) and the client reads instead.
    waiter_reserved_concurrency: int | None = 50
    #: Room the release of due holds always has, whatever the API does (one run a minute;
    #: two overlapping runs are harmless).
    due_holds_reserved_concurrency: int | None = 1
    #: Browsers on these origins may call the API; none by default (no CORS at all).
    api_cors_origins: tuple[str, ...] = ()
    #: Callers the API lets act on every event and signup (IAM principal ARN patterns).
    admin_principals: tuple[str, ...] = ()
    #: Direct producers, each with the event id patterns it alone may write (producers.py).
    confined_producers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: One organizer's events, at most (created through the API; admins are not counted).
    max_events_per_organizer: int | None = 1000
    #: None: AWS managed keys; CREATE_KEY: a customer managed key of the stack's own; else
    #: the ARN of an existing customer managed key (its policy must let CloudWatch Logs use
    #: it: docs/deploy.md).
    encryption_key: str | None = None

    def __post_init__(self) -> None:
        if bool(self.jwt_issuer) != bool(self.jwt_audience):
            raise ValueError(
                f"{ContextKey.JWT_ISSUER} and {ContextKey.JWT_AUDIENCE} go together: "
                "set both or neither"
            )
        if self.jwt_issuer and not self.jwt_issuer.startswith("https://"):
            raise ValueError(f"{ContextKey.JWT_ISSUER} must be an https:// URL")
        if self.log_level not in _LOG_LEVELS:
            raise ValueError(f"{ContextKey.LOG_LEVEL} must be one of {', '.join(_LOG_LEVELS)}")
        for key, limit in (
            (ContextKey.API_RATE_LIMIT, self.api_rate_limit),
            (ContextKey.API_BURST_LIMIT, self.api_burst_limit),
            (ContextKey.SIGNUP_RATE_LIMIT, self.signup_rate_limit),
            (ContextKey.SIGNUP_BURST_LIMIT, self.signup_burst_limit),
            (ContextKey.READ_RATE_LIMIT, self.read_rate_limit),
            (ContextKey.READ_BURST_LIMIT, self.read_burst_limit),
            (ContextKey.WAIT_RATE_LIMIT, self.wait_rate_limit),
            (ContextKey.WAIT_BURST_LIMIT, self.wait_burst_limit),
        ):
            if limit < 1:
                raise ValueError(f"{key}: API throttling limits must be at least 1")
        if self.intake_retention_days < 1:
            raise ValueError(f"{ContextKey.INTAKE_RETENTION_DAYS} must be at least 1")
        if self.decision_retention_days is not None and (
            self.decision_retention_days <= self.intake_retention_days
        ):
            # A decision that expired while its intake record still exists looks undecided:
            # the sweeper would re-emit the record and the processor decide it again.
            raise ValueError(
                f"{ContextKey.DECISION_RETENTION_DAYS} must be longer than "
                f"{ContextKey.INTAKE_RETENTION_DAYS} ({self.intake_retention_days} days): a "
                "decision must outlive its intake record"
            )
        for key, value in (
            (ContextKey.PROCESSOR_RESERVED_CONCURRENCY, self.processor_reserved_concurrency),
            (ContextKey.SWEEPER_RESERVED_CONCURRENCY, self.sweeper_reserved_concurrency),
            (ContextKey.API_RESERVED_CONCURRENCY, self.api_reserved_concurrency),
            (ContextKey.WAITER_RESERVED_CONCURRENCY, self.waiter_reserved_concurrency),
            (ContextKey.DUE_HOLDS_RESERVED_CONCURRENCY, self.due_holds_reserved_concurrency),
            (ContextKey.MAX_EVENTS_PER_ORGANIZER, self.max_events_per_organizer),
        ):
            if value is not None and value < 1:
                raise ValueError(f'{key} must be a positive integer, or 0 / "none" for no limit')
        if self.encryption_key not in (None, CREATE_KEY) and not _KMS_KEY_ARN.match(
            str(self.encryption_key)
        ):
            raise ValueError(
                f'{ContextKey.ENCRYPTION_KEY} must be "{CREATE_KEY}" or a KMS key ARN '
                f"(arn:aws:kms:<region>:<account>:key/<id>), not {self.encryption_key!r}"
            )
        if self.powertools_layer_version is not None and self.powertools_layer_version < 1:
            raise ValueError(f"{ContextKey.POWERTOOLS_LAYER_VERSION} must be a positive integer")
        for principal in self.admin_principals:
            if not principal.startswith("arn:") or "," in principal:
                raise ValueError(
                    f"{ContextKey.ADMIN_PRINCIPALS}: {principal!r} is not an IAM principal "
                    "ARN (pattern)"
                )
        for origin in self.api_cors_origins:
            if origin != "*" and not _ORIGIN.match(origin):
                raise ValueError(
                    f"{ContextKey.API_CORS_ORIGINS}: {origin!r} is not an origin "
                    "(scheme://host[:port], no path) or *"
                )

    @property
    def uses_jwt(self) -> bool:
        return bool(self.jwt_issuer)

    @property
    def retention_environment(self) -> dict[str, str]:
        """What the functions read to stamp ``expires_at``: on intake records always, on
        decisions only when they expire (no variable: decisions are kept)."""
        environment = {INTAKE_RETENTION_ENV: str(self.intake_retention_days)}
        if self.decision_retention_days is not None:
            environment[DECISION_RETENTION_ENV] = str(self.decision_retention_days)
        return environment

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> TurnstileSettings:
        """Build settings from a context getter (``app.node.try_get_context``).

        ``-c`` values arrive as strings and cdk.json values as JSON types; both are accepted.
        """
        default = cls()

        def number(key: str, fallback: int) -> int:
            value = _optional_number(get(key), key, fallback)
            if value is None:
                raise ValueError(f"{key} must be a number")
            return value

        def limit(key: str, fallback: int | None) -> int | None:
            # 0 and "none" both turn a limit off.
            value = _optional_number(get(key), key, fallback)
            return None if value == 0 else value

        return cls(
            stack_name=_text(get(ContextKey.STACK_NAME)) or default.stack_name,
            retain_tables=_flag(
                get(ContextKey.RETAIN_TABLES), ContextKey.RETAIN_TABLES, default.retain_tables
            ),
            jwt_issuer=_text(get(ContextKey.JWT_ISSUER)),
            jwt_audience=_words(get(ContextKey.JWT_AUDIENCE)),
            powertools_layer_version=_optional_number(
                get(ContextKey.POWERTOOLS_LAYER_VERSION), ContextKey.POWERTOOLS_LAYER_VERSION, None
            ),
            log_level=(_text(get(ContextKey.LOG_LEVEL)) or default.log_level).upper(),
            api_rate_limit=number(ContextKey.API_RATE_LIMIT, default.api_rate_limit),
            api_burst_limit=number(ContextKey.API_BURST_LIMIT, default.api_burst_limit),
            alarm_email=_text(get(ContextKey.ALARM_EMAIL)),
            encryption_key=_text(get(ContextKey.ENCRYPTION_KEY)),
            signup_rate_limit=number(ContextKey.SIGNUP_RATE_LIMIT, default.signup_rate_limit),
            signup_burst_limit=number(ContextKey.SIGNUP_BURST_LIMIT, default.signup_burst_limit),
            read_rate_limit=number(ContextKey.READ_RATE_LIMIT, default.read_rate_limit),
            read_burst_limit=number(ContextKey.READ_BURST_LIMIT, default.read_burst_limit),
            wait_rate_limit=number(ContextKey.WAIT_RATE_LIMIT, default.wait_rate_limit),
            wait_burst_limit=number(ContextKey.WAIT_BURST_LIMIT, default.wait_burst_limit),
            intake_retention_days=number(
                ContextKey.INTAKE_RETENTION_DAYS, default.intake_retention_days
            ),
            # "none": kept; 0 is not "none" here (it reads as "delete at once"): rejected.
            decision_retention_days=_optional_number(
                get(ContextKey.DECISION_RETENTION_DAYS),
                ContextKey.DECISION_RETENTION_DAYS,
                default.decision_retention_days,
            ),
            processor_reserved_concurrency=limit(
                ContextKey.PROCESSOR_RESERVED_CONCURRENCY, default.processor_reserved_concurrency
            ),
            sweeper_reserved_concurrency=limit(
                ContextKey.SWEEPER_RESERVED_CONCURRENCY, default.sweeper_reserved_concurrency
            ),
            api_reserved_concurrency=limit(
                ContextKey.API_RESERVED_CONCURRENCY, default.api_reserved_concurrency
            ),
            waiter_reserved_concurrency=limit(
                ContextKey.WAITER_RESERVED_CONCURRENCY, default.waiter_reserved_concurrency
            ),
            due_holds_reserved_concurrency=limit(
                ContextKey.DUE_HOLDS_RESERVED_CONCURRENCY, default.due_holds_reserved_concurrency
            ),
            api_cors_origins=_words(get(ContextKey.API_CORS_ORIGINS)),
            admin_principals=_words(get(ContextKey.ADMIN_PRINCIPALS)),
            confined_producers=_producers(get(ContextKey.CONFINED_PRODUCERS)),
            max_events_per_organizer=limit(
                ContextKey.MAX_EVENTS_PER_ORGANIZER, default.max_events_per_organizer
            ),
        )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _flag(value: Any, key: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{key} must be true or false, not {value!r}")


def _optional_number(value: Any, key: str, default: int | None) -> int | None:
    """An integer; unset or "" is ``default``, "none" is None."""
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a whole number, not {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f'{key} must be a whole number or "none", not {value!r}') from None


def _words(value: Any) -> tuple[str, ...]:
    """A list from cdk.json, or a comma-separated string from ``-c``."""
    if value is None:
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return tuple(item.strip() for item in map(str, items) if item.strip())


def _producers(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``turnstile:confinedProducers``: an object from cdk.json, or its JSON text from ``-c``."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    key = ContextKey.CONFINED_PRODUCERS
    if not isinstance(value, dict) or not all(
        isinstance(name, str) and name.strip() and isinstance(ids, list) and ids
        for name, ids in value.items()
    ):
        raise ValueError(
            f"{key} must be an object of producer names and event id patterns, like "
            '{"shop-a": ["shop-a-*"]}'
        )
    producers = tuple((name, tuple(str(i) for i in ids)) for name, ids in value.items())
    for name, ids in producers:
        bad = [i for i in ids if not _EVENT_PATTERN.match(i)]
        if bad:
            raise ValueError(f"{key}: {name}: {bad} are no event ids or patterns of them")
    return producers
