"""The stack's options: one typed object, parsed from CDK context (``cdk deploy -c key=value``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ContextKey", "TurnstileSettings"]


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


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
        if self.api_rate_limit < 1 or self.api_burst_limit < 1:
            raise ValueError("API throttling limits must be at least 1")
        if self.powertools_layer_version is not None and self.powertools_layer_version < 1:
            raise ValueError(f"{ContextKey.POWERTOOLS_LAYER_VERSION} must be a positive integer")

    @property
    def uses_jwt(self) -> bool:
        return bool(self.jwt_issuer)

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> TurnstileSettings:
        """Build settings from a context getter (``app.node.try_get_context``).

        ``-c`` values arrive as strings and cdk.json values as JSON types; both are accepted.
        """
        default = cls()
        audience = get(ContextKey.JWT_AUDIENCE)
        layer_version = get(ContextKey.POWERTOOLS_LAYER_VERSION)
        return cls(
            stack_name=_text(get(ContextKey.STACK_NAME)) or default.stack_name,
            retain_tables=_flag(get(ContextKey.RETAIN_TABLES), default.retain_tables),
            jwt_issuer=_text(get(ContextKey.JWT_ISSUER)),
            jwt_audience=_words(audience),
            powertools_layer_version=int(layer_version)
            if layer_version not in (None, "")
            else None,
            log_level=(_text(get(ContextKey.LOG_LEVEL)) or default.log_level).upper(),
            api_rate_limit=_number(get(ContextKey.API_RATE_LIMIT), default.api_rate_limit),
            api_burst_limit=_number(get(ContextKey.API_BURST_LIMIT), default.api_burst_limit),
            alarm_email=_text(get(ContextKey.ALARM_EMAIL)),
        )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _flag(value: Any, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _number(value: Any, default: int) -> int:
    return default if value is None or value == "" else int(value)


def _words(value: Any) -> tuple[str, ...]:
    """A list from cdk.json, or a comma-separated string from ``-c``."""
    if value is None:
        return ()
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return tuple(item.strip() for item in map(str, items) if item.strip())
