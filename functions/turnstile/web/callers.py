"""Who makes a request, as API Gateway authenticated it, and what it may do."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from typing import Any

from turnstile.base.contract import (
    ADMIN_PRINCIPALS_ENV,
    ADMIN_SCOPE,
    MAX_EVENTS_ENV,
    recorded_identity,
)
from turnstile.service import usecases
from turnstile.web.edge import LOCAL_OPERATOR

__all__ = ["caller_identity", "caller_of", "events_quota"]


def caller_identity(event: Mapping[str, Any]) -> str | None:
    """Who made the request, as API Gateway authenticated it: the IAM caller's ARN
    (``requestContext.authorizer.iam.userArn``) or the token's subject
    (``requestContext.authorizer.jwt.claims.sub``); None without an authorizer (the local
    stack's API). The access log records the same value as ``caller``."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    if not isinstance(authorizer, Mapping):
        return None
    iam = authorizer.get("iam")
    if isinstance(iam, Mapping) and isinstance(iam.get("userArn"), str) and iam["userArn"]:
        return str(iam["userArn"])
    jwt = authorizer.get("jwt")
    claims = jwt.get("claims") if isinstance(jwt, Mapping) else None
    if isinstance(claims, Mapping) and isinstance(claims.get("sub"), str) and claims["sub"]:
        return str(claims["sub"])
    return None


def events_quota() -> int | None:
    """The most events one organizer may create (``TURNSTILE_MAX_EVENTS_PER_ORGANIZER``,
    the stack's ``turnstile:maxEventsPerOrganizer``); None: no cap (unset, or not a whole
    number of at least 1)."""
    raw = os.environ.get(MAX_EVENTS_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) >= 1 else None


def caller_of(event: Mapping[str, Any]) -> usecases.Caller:
    """The caller: its identity (``caller_identity``), and whether it is an admin: a
    token carrying the scope ``turnstile/admin`` (``scope`` or ``scp`` claim), or an
    identity matching one of ``TURNSTILE_ADMIN_PRINCIPALS`` (comma-separated ARN patterns,
    ``*`` a wildcard; the stack's ``turnstile:adminPrincipals``)."""
    raw = caller_identity(event)
    identity = recorded_identity(raw) if raw else None
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    local = authorizer.get("lambda") if isinstance(authorizer, Mapping) else None
    if isinstance(local, Mapping) and local.get(LOCAL_OPERATOR) is True and identity is None:
        return usecases.OPERATOR
    jwt = authorizer.get("jwt") if isinstance(authorizer, Mapping) else None
    claims = jwt.get("claims") if isinstance(jwt, Mapping) else None
    scopes: set[str] = set()
    granted = jwt.get("scopes") if isinstance(jwt, Mapping) else None
    if isinstance(granted, list):
        scopes |= {str(v) for v in granted}
    if isinstance(claims, Mapping):
        for name in ("scope", "scp"):
            value = claims.get(name)
            if isinstance(value, str):
                scopes |= set(value.replace(",", " ").split())
            elif isinstance(value, list):
                scopes |= {str(v) for v in value}
    patterns = [p.strip() for p in os.environ.get(ADMIN_PRINCIPALS_ENV, "").split(",") if p.strip()]
    admin = ADMIN_SCOPE in scopes or (
        raw is not None and any(fnmatch.fnmatchcase(raw, p) for p in patterns)
    )
    return usecases.Caller(identity=identity, admin=admin)
