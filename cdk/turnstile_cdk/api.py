"""The HTTP API (API Gateway v2) in front of the API function."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import jsii
from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_logs as logs
from constructs import Construct

from turnstile.api import ROUTES as API_ROUTES

from .functions import FunctionCommons, TurnstileFunction
from .permissions import API_CONTROL_ACTIONS, API_INTAKE_ACTIONS, API_MAIN_ACTIONS

__all__ = ["ROUTES", "ApiAuth", "TurnstileApi"]

#: (method, path) of every route, from the API's own route list (the one its resolver and
#: OpenAPI document are built from); one Lambda integration serves them all.
ROUTES: tuple[tuple[apigwv2.HttpMethod, str], ...] = tuple(
    (apigwv2.HttpMethod[route.method], route.path) for route in API_ROUTES
)
#: Anything else reaches the function too, so a wrong path or method gets the API's own
#: JSON 404/405 (as locally) rather than API Gateway's bare {"message": "Not Found"}.
CATCH_ALL = (apigwv2.HttpMethod.ANY, "/{proxy+}")

#: One JSON object per request, so Logs Insights can query access logs by field.
ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "caller": "$context.identity.caller",
    "user": "$context.identity.user",
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

    def authorizer(self) -> apigwv2.IHttpRouteAuthorizer:
        if self.jwt_issuer:
            return authorizers.HttpJwtAuthorizer(
                "JwtAuthorizer", self.jwt_issuer, jwt_audience=list(self.jwt_audience)
            )
        return authorizers.HttpIamAuthorizer()


class TurnstileApi(Construct):
    """Parts: ``function``, ``http_api``, ``stage`` (the ``$default`` stage), ``access_logs``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        commons: FunctionCommons,
        intake: dynamodb.ITable,
        main: dynamodb.ITable,
        control: dynamodb.ITable,
        table_names: dict[str, str],
        auth: ApiAuth,
        rate_limit: int,
        burst_limit: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = TurnstileFunction(
            self,
            "Handler",
            commons=commons,
            handler="turnstile.handlers.api.handler",
            description="turnstile HTTP API: create/close events, submit signups, read status",
            table_names=table_names,
            # Under API Gateway's 30 s integration limit; each request is a few point reads.
            timeout=Duration.seconds(10),
            memory_size=256,
        )
        self.function = self.handler.function
        main.grant(self.function, *API_MAIN_ACTIONS)
        intake.grant(self.function, *API_INTAKE_ACTIONS)
        control.grant(self.function, *API_CONTROL_ACTIONS)

        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name=f"{Stack.of(self).stack_name}-api",
            description="turnstile: limited resources decided exactly once, in arrival order",
            default_authorizer=auth.authorizer(),
            # Our own $default stage below carries throttling and access logs.
            create_default_stage=False,
        )
        integration = integrations.HttpLambdaIntegration("ApiIntegration", self.function)
        for method, path in (*ROUTES, CATCH_ALL):
            self.http_api.add_routes(path=path, methods=[method], integration=integration)

        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            auto_deploy=True,
            # Bounds what a runaway client can cost; raise it per stack with context.
            throttle=apigwv2.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            access_log_settings=_AccessLogSettings(
                apigwv2.LogGroupLogDestination(self.access_logs),
                # AccessLogFormat lives in the v1 module; HTTP APIs take it too.
                apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FORMAT, separators=(",", ":"))),
            ),
        )

    @property
    def url(self) -> str:
        """Base URL of the ``$default`` stage, without a trailing slash."""
        return self.http_api.api_endpoint


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
