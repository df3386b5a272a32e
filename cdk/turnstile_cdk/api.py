"""The HTTP API (API Gateway v2) in front of the API function."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import jsii
from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from turnstile.base.contract import (
    ADMIN_PRINCIPALS_ENV,
    ADMIN_SCOPE,
    FUNCTION_HANDLERS,
    MAX_EVENTS_ENV,
    Function,
)
from turnstile.web.api import (
    CORS_ALLOW_HEADERS,
    CORS_EXPOSE_HEADERS,
    CORS_MAX_AGE_S,
    MAX_WAIT_S,
    WAITING_ROUTES,
)
from turnstile.web.api import ROUTES as API_ROUTES

from .functions import FunctionConstruct, FunctionConstructProps
from .permissions import API_GRANTS, WAITER_GRANTS

__all__ = [
    "API_TIMEOUT_S",
    "CATCH_ALL",
    "CORS_CATCH_ALL_METHODS",
    "OPEN_ROUTES",
    "ROUTES",
    "ROUTE_ROLES",
    "SCOPE_PREFIX",
    "WAITER_TIMEOUT_S",
    "WAITING_ROUTE_KEYS",
    "ApiAuth",
    "ApiConstruct",
    "ApiThrottling",
    "CallerRole",
    "access_log_format",
    "allowed_roles",
    "check_route_roles",
    "execute_api_path",
    "route_key",
]

#: (method, path) of every route, from the API's own route list (the one its resolver and
#: OpenAPI document are built from); one Lambda integration serves them all.
ROUTES: tuple[tuple[apigwv2.HttpMethod, str], ...] = tuple(
    (apigwv2.HttpMethod[route.method], route.path) for route in API_ROUTES
)
#: The routes the waiter function serves (each request may be held for a while).
WAITING_ROUTE_KEYS: frozenset[str] = frozenset(
    f"{route.method} {route.path}" for route in WAITING_ROUTES
)
#: Anything else reaches the function too, so a wrong path or method gets the API's own
#: JSON 404/405 (as locally) rather than API Gateway's bare {"message": "Not Found"}.
CATCH_ALL = (apigwv2.HttpMethod.ANY, "/{proxy+}")
#: With CORS on, the catch-all takes every method but OPTIONS: an OPTIONS request that
#: matches no route is a preflight API Gateway answers itself. Caught by the authorized
#: ANY route instead, a browser's (unsigned, token-less) preflight would be refused.
CORS_CATCH_ALL_METHODS = (
    apigwv2.HttpMethod.GET,
    apigwv2.HttpMethod.POST,
    apigwv2.HttpMethod.PUT,
    apigwv2.HttpMethod.PATCH,
    apigwv2.HttpMethod.DELETE,
    apigwv2.HttpMethod.HEAD,
)
#: The API function's timeout, under API Gateway's 30 s integration timeout: room for the
#: store's retries of a throttled DynamoDB call.
API_TIMEOUT_S = 25
#: The waiter's: the longest wait (``turnstile.web.api.MAX_WAIT_S``) and the time a wait keeps
#: to answer before the deadline (``WAIT_MARGIN_S``), and a little more; a hung wait holds
#: a waiter instance no longer than this.
WAITER_TIMEOUT_S = MAX_WAIT_S + 5

#: JWT scopes are ``turnstile/<role>``.
SCOPE_PREFIX = "turnstile"


class CallerRole(Enum):
    """Who calls the API: a managed policy each in IAM mode, a scope each in JWT mode."""

    ORGANIZER = "organizer"
    PRODUCER = "producer"
    READER = "reader"

    @property
    def scope(self) -> str:
        """The OAuth scope a JWT must carry (``scope``/``scp`` claim) for the role's routes."""
        return f"{SCOPE_PREFIX}/{self.value}"

    @property
    def output_key(self) -> str:
        """The stack output holding the ARN of the role's managed policy (IAM mode)."""
        return f"{self.value.title()}PolicyArn"


#: The one role each business route belongs to. A route of ``turnstile.web.api.ROUTES`` that
#: is in neither this mapping nor ``OPEN_ROUTES`` fails the synthesis: no route can be
#: added without deciding who may call it. Entries the API does not serve yet are skipped.
ROUTE_ROLES: Mapping[str, CallerRole] = {
    "POST /events": CallerRole.ORGANIZER,
    "PATCH /events/{event_id}": CallerRole.ORGANIZER,  # capacity update
    "POST /events/{event_id}/close": CallerRole.ORGANIZER,
    "POST /events/{event_id}/signups": CallerRole.PRODUCER,
    # A producer confirms or cancels the signups it made (docs/lifecycle.md).
    "POST /events/{event_id}/signups/{signup_id}/confirm": CallerRole.PRODUCER,
    "POST /events/{event_id}/signups/{signup_id}/cancel": CallerRole.PRODUCER,
    "GET /events/{event_id}": CallerRole.READER,
    "GET /events/{event_id}/signups/{signup_id}": CallerRole.READER,
    "GET /events/{event_id}/signups/{signup_id}/decision": CallerRole.READER,
    # The lists are reads like the others. An organizer-only signup list could not be
    # held to organizers in IAM mode anyway: a reader's GET/events/* (the event route's
    # ARN, '*' matching '/') reaches GET/events/x/signups too.
    "GET /events": CallerRole.READER,
    "GET /events/{event_id}/signups": CallerRole.READER,
}
#: Routes any authenticated caller may call: no JWT scope; in every role's policy.
OPEN_ROUTES: frozenset[str] = frozenset({"GET /", "GET /openapi.json"})
#: A role's routes are open to these roles as well: organizers and producers read too
#: (the API shows each caller only what is its own: a producer its signups, an organizer
#: its events' signups; docs/operations.md, "Who may do what").
_ALSO_ALLOWED: Mapping[CallerRole, frozenset[CallerRole]] = {
    CallerRole.READER: frozenset({CallerRole.ORGANIZER, CallerRole.PRODUCER}),
}


_PATH_PARAMETER_REASON = (
    "execute-api:Invoke on one route of this API's $default stage: each '*' stands for one "
    "path parameter (an event or signup id chosen by callers), which IAM cannot enumerate; "
    "a test proves no role's wildcard reaches another role's route."
)


def route_key(method: str, path: str) -> str:
    """API Gateway's route key: ``"GET /events/{event_id}"``."""
    return f"{method} {path}"


def check_route_roles(route_keys: Iterable[str]) -> None:
    """Raise unless every route has exactly one role, or is open to every caller."""
    keys = list(route_keys)
    unmapped = [key for key in keys if key not in ROUTE_ROLES and key not in OPEN_ROUTES]
    if unmapped:
        raise ValueError(
            f"route(s) {', '.join(unmapped)} have no caller role: add each to ROUTE_ROLES "
            "(or OPEN_ROUTES) in cdk/turnstile_cdk/api.py, or nobody (IAM) / every token "
            "holder (JWT) could call it"
        )
    both = sorted(set(ROUTE_ROLES) & OPEN_ROUTES)
    if both:
        raise ValueError(f"route(s) {', '.join(both)} are both role-bound and open")


def allowed_roles(key: str) -> frozenset[CallerRole]:
    """Every role that may call the route ``key``."""
    if key in OPEN_ROUTES:
        return frozenset(CallerRole)
    role = ROUTE_ROLES[key]
    return frozenset({role, *_ALSO_ALLOWED.get(role, frozenset())})


def execute_api_path(path: str) -> str:
    """The route's path in an execute-api ARN: each path parameter becomes ``*``."""
    return re.sub(r"\{[^}/]+\}", "*", path)


def access_log_format(*, jwt: bool) -> dict[str, str]:
    """One JSON object per request, so Logs Insights can query access logs by field.

    ``caller`` is who made the request: the signer's role or user ARN (IAM), or the
    token's subject (JWT).
    """
    return {
        "requestId": "$context.requestId",
        "ip": "$context.identity.sourceIp",
        "caller": "$context.authorizer.claims.sub" if jwt else "$context.identity.userArn",
        "requestTime": "$context.requestTime",
        "httpMethod": "$context.httpMethod",
        "routeKey": "$context.routeKey",
        "path": "$context.path",
        "status": "$context.status",
        "protocol": "$context.protocol",
        "responseLength": "$context.responseLength",
        "responseLatency": "$context.responseLatency",
        "integrationLatency": "$context.integrationLatency",
        "integrationError": "$context.integrationErrorMessage",
        "authorizerError": "$context.authorizer.error",
    }


@dataclass(frozen=True)
class ApiAuth:
    """IAM (SigV4) by default; a JWT authorizer when an issuer and audience are given."""

    jwt_issuer: str | None = None
    jwt_audience: Sequence[str] = ()
    #: IAM principal ARN patterns (``*`` a wildcard) the API treats as admins: they act on
    #: every event and signup (``contract.ADMIN_PRINCIPALS_ENV``). With JWT, the scope
    #: ``contract.ADMIN_SCOPE`` does the same and opens every route.
    admin_principals: Sequence[str] = ()

    @property
    def uses_jwt(self) -> bool:
        return bool(self.jwt_issuer)

    def authorizer(self) -> apigwv2.IHttpRouteAuthorizer:
        if self.jwt_issuer:
            return authorizers.HttpJwtAuthorizer(
                "JwtAuthorizer", self.jwt_issuer, jwt_audience=list(self.jwt_audience)
            )
        return authorizers.HttpIamAuthorizer()


@dataclass(frozen=True)
class ApiThrottling:
    """Requests/s and burst: ``default`` for every route, ``signups`` for the producers' route,
    ``reads`` for each reader route, ``waits`` for the waiting read. Each route has its own
    bucket, so a polling storm cannot use up what signup submission is allowed, nor the
    other way round."""

    default: apigwv2.ThrottleSettings
    signups: apigwv2.ThrottleSettings
    reads: apigwv2.ThrottleSettings
    waits: apigwv2.ThrottleSettings

    def for_route(self, key: str) -> apigwv2.ThrottleSettings | None:
        """The route-level override of route ``key`` (None: the stage default)."""
        if key in WAITING_ROUTE_KEYS:
            return self.waits
        by_role = {CallerRole.PRODUCER: self.signups, CallerRole.READER: self.reads}
        role = ROUTE_ROLES.get(key)
        return None if role is None else by_role.get(role)


class ApiConstruct(Construct):
    """Deploys the HTTP API (turnstile.web.api) in front of its two functions.

    Parts: ``function`` (every route but the waiting read), ``waiter`` (the waiting read,
    ``turnstile.web.api.WAITING_ROUTES``: a request it holds never takes an instance of
    ``function``), ``http_api``, ``stage`` (the ``$default`` stage), ``access_logs``, and
    ``caller_policies``: one managed policy per caller role (IAM mode; empty with JWT).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: FunctionConstructProps,
        *,
        auth: ApiAuth,
        throttling: ApiThrottling,
        cors_origins: Sequence[str] = (),
        reserved_concurrency: int | None = None,
        waiter_reserved_concurrency: int | None = None,
        max_events_per_organizer: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        route_keys = [route_key(method.value, path) for method, path in ROUTES]
        check_route_roles(route_keys)
        # Both functions answer callers: responses carry signups' attributes (personal
        # data), kept out of traces; both know the admins.
        caller_facing = {"POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false"}
        if auth.admin_principals:
            caller_facing[ADMIN_PRINCIPALS_ENV] = ",".join(auth.admin_principals)
        self.handler = FunctionConstruct(
            self,
            "Handler",
            props,
            handler=FUNCTION_HANDLERS[Function.API],
            logs_signups=True,
            description="turnstile HTTP API: create/close events, submit signups, read status",
            timeout=Duration.seconds(API_TIMEOUT_S),
            memory_size=256,
            environment={
                **caller_facing,
                **(
                    {MAX_EVENTS_ENV: str(max_events_per_organizer)}
                    if max_events_per_organizer
                    else {}
                ),
            },
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        self.handler.grant_tables(API_GRANTS)
        self.waiter_handler = FunctionConstruct(
            self,
            "Waiter",
            props,
            handler=FUNCTION_HANDLERS[Function.WAITER],
            logs_signups=False,
            description="turnstile HTTP API: a signup's status, waiting for its decision",
            timeout=Duration.seconds(WAITER_TIMEOUT_S),
            memory_size=256,
            environment=caller_facing,
            # Its own pool: however many waits are held, the API's instances stay free.
            reserved_concurrency=waiter_reserved_concurrency,
        )
        self.waiter = self.waiter_handler.function
        self.waiter_handler.grant_tables(WAITER_GRANTS)

        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name=f"{Stack.of(self).stack_name}-api",
            description="turnstile: limited resources decided exactly once, in arrival order",
            default_authorizer=auth.authorizer(),
            # Our own $default stage below carries throttling and access logs.
            create_default_stage=False,
            # Off unless origins are given: no CORS headers, no preflight answers.
            cors_preflight=_cors(cors_origins) if cors_origins else None,
        )
        integration = integrations.HttpLambdaIntegration("ApiIntegration", self.function)
        waiter_integration = integrations.HttpLambdaIntegration("WaiterIntegration", self.waiter)
        throttled_routes: dict[str, apigwv2.HttpRoute] = {}
        for (method, path), key in zip(ROUTES, route_keys, strict=True):
            scopes = None
            if auth.uses_jwt and key not in OPEN_ROUTES:
                # A token with any one of these scopes may call the route.
                scopes = sorted({role.scope for role in allowed_roles(key)} | {ADMIN_SCOPE})
            (route,) = self.http_api.add_routes(
                path=path,
                methods=[method],
                integration=waiter_integration if key in WAITING_ROUTE_KEYS else integration,
                authorization_scopes=scopes,
            )
            if throttling.for_route(key) is not None:
                throttled_routes[key] = route
        # No scopes: any valid token gets the API's own 404/405. With IAM no caller policy
        # covers it (its ARN would be every route's): unknown paths answer 403 to callers.
        method, path = CATCH_ALL
        methods = list(CORS_CATCH_ALL_METHODS) if cors_origins else [method]
        self.http_api.add_routes(path=path, methods=methods, integration=integration)

        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.DESTROY,
            encryption_key=props.data_key,
        )
        log_format = access_log_format(jwt=auth.uses_jwt)
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            auto_deploy=True,
            # Bounds what a runaway client can cost; raise it per stack with context.
            throttle=throttling.default,
            access_log_settings=_AccessLogSettings(
                apigwv2.LogGroupLogDestination(self.access_logs),
                # AccessLogFormat lives in the v1 module; HTTP APIs take it too.
                apigw.AccessLogFormat.custom(json.dumps(log_format, separators=(",", ":"))),
            ),
        )
        self._throttle_routes(throttled_routes, throttling)
        self.caller_policies: dict[CallerRole, iam.ManagedPolicy] = (
            {} if auth.uses_jwt else self._caller_policies(route_keys)
        )

    def _throttle_routes(
        self, routes: Mapping[str, apigwv2.HttpRoute], throttling: ApiThrottling
    ) -> None:
        """Route-level limits on the stage (the L2 stage has no per-route settings)."""
        cfn_stage = self.stage.node.default_child
        assert isinstance(cfn_stage, apigwv2.CfnStage)
        settings = {}
        for key, route in routes.items():
            limits = throttling.for_route(key)
            assert limits is not None
            settings[key] = {
                "ThrottlingRateLimit": limits.rate_limit,
                "ThrottlingBurstLimit": limits.burst_limit,
            }
            # API Gateway rejects settings for a route key that does not exist yet.
            self.stage.node.add_dependency(route)
        if settings:
            cfn_stage.add_property_override("RouteSettings", settings)

    def _caller_policies(self, route_keys: Sequence[str]) -> dict[CallerRole, iam.ManagedPolicy]:
        """One managed policy per role: ``execute-api:Invoke`` on exactly its routes of this
        API's ``$default`` stage (``*`` for each path parameter). Attach it to the IAM roles
        or users of that kind of caller."""
        policies = {}
        for role in CallerRole:
            keys = [key for key in route_keys if role in allowed_roles(key)]
            arns = []
            for key in keys:
                method, path = key.split(" ", 1)
                arns.append(
                    self.http_api.arn_for_execute_api(method, execute_api_path(path), "$default")
                )
            policy = iam.ManagedPolicy(
                self,
                f"{role.value.title()}Policy",
                description=f"turnstile {role.value}: may call {', '.join(keys)}",
                statements=[iam.PolicyStatement(actions=["execute-api:Invoke"], resources=arns)],
            )
            # Each '*' of these ARNs is one path parameter; cdk-nag names a finding per ARN.
            Validations.of(policy).acknowledge(
                *[
                    Acknowledgment(
                        id=f"AwsSolutions-IAM5[Resource::{self._nag_arn(arn)}]",
                        reason=_PATH_PARAMETER_REASON,
                    )
                    for arn in arns
                    if "*" in arn
                ]
            )
            policies[role] = policy
        return policies

    def _nag_arn(self, arn: str) -> str:
        """The ARN as cdk-nag spells it in a finding id: ``<LogicalId>``, ``<AWS::Region>``."""
        return _nag_spelling(Stack.of(self).resolve(arn))

    @property
    def url(self) -> str:
        """Base URL of the ``$default`` stage, without a trailing slash."""
        return self.http_api.api_endpoint


def _cors(origins: Sequence[str]) -> apigwv2.CorsPreflightOptions:
    """API Gateway's CORS configuration: it answers preflights itself and adds the headers
    to the function's responses (the function sets none)."""
    methods = sorted({route.method for route in API_ROUTES})
    return apigwv2.CorsPreflightOptions(
        allow_origins=list(origins),
        allow_methods=[apigwv2.CorsHttpMethod[method] for method in methods],
        allow_headers=list(CORS_ALLOW_HEADERS),
        expose_headers=list(CORS_EXPOSE_HEADERS),
        max_age=Duration.seconds(CORS_MAX_AGE_S),
    )


def _nag_spelling(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Fn::Join":
            separator, parts = argument
            return str(separator).join(_nag_spelling(part) for part in parts)
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{'.'.join(argument)}>"
    raise ValueError(f"cannot spell {value!r} as cdk-nag does")


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    """IAccessLogSettings is an interface, not a struct: Python implements it with a class."""

    def __init__(
        self, destination: apigwv2.IAccessLogDestination, log_format: apigw.AccessLogFormat
    ) -> None:
        self._destination = destination
        self._format = log_format

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return self._format
