"""The HTTP API: routes, authorization, Lambda proxy integration, throttling, access logs."""

from __future__ import annotations

import json

from aws_cdk.assertions import Capture, Match, Template

from turnstile.api import ROUTES

from .conftest import VARIANT_SETTINGS, function_by_handler, only, render

ROUTE_KEYS = {
    "POST /events",
    "GET /events/{event_id}",
    "PATCH /events/{event_id}",
    "POST /events/{event_id}/close",
    "POST /events/{event_id}/signups",
    "GET /events/{event_id}/signups/{signup_id}",
    "GET /openapi.json",
    "ANY /{proxy+}",  # the API's own JSON 404/405 for anything else
}


def test_the_interface_is_the_api_resolvers_route_list() -> None:
    assert {f"{r.method} {r.path}" for r in ROUTES} | {"ANY /{proxy+}"} == ROUTE_KEYS


def _api_id(template: Template) -> str:
    api_id, _ = only(
        template.find_resources("AWS::ApiGatewayV2::Api", {"Properties": {"ProtocolType": "HTTP"}})
    )
    return api_id


def test_routes_are_exactly_the_interface(template: Template) -> None:
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == ROUTE_KEYS
    assert all(r["Properties"]["ApiId"] == {"Ref": _api_id(template)} for r in routes.values())


def test_every_route_requires_iam_by_default(template: Template) -> None:
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    assert {r["Properties"]["AuthorizationType"] for r in routes.values()} == {"AWS_IAM"}
    assert not template.find_resources("AWS::ApiGatewayV2::Authorizer")


def test_routes_proxy_to_the_api_function_with_payload_v2(template: Template) -> None:
    function_id, _ = function_by_handler(template, "turnstile.handlers.api.handler")
    integration_id, _ = only(
        template.find_resources(
            "AWS::ApiGatewayV2::Integration",
            {
                "Properties": {
                    "IntegrationType": "AWS_PROXY",
                    "IntegrationUri": {"Fn::GetAtt": [function_id, "Arn"]},
                    "PayloadFormatVersion": "2.0",
                }
            },
        )
    )
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    assert {render(r["Properties"]["Target"]) for r in routes.values()} == {
        f"integrations/${{{integration_id}}}"
    }
    # API Gateway may invoke the function only from this API's routes.
    permissions = template.find_resources(
        "AWS::Lambda::Permission",
        {"Properties": {"FunctionName": {"Fn::GetAtt": [function_id, "Arn"]}}},
    )
    assert len(permissions) == len(ROUTE_KEYS)
    for permission in permissions.values():
        assert permission["Properties"]["Principal"] == "apigateway.amazonaws.com"
        source = render(permission["Properties"]["SourceArn"])
        assert source.startswith(
            "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:"
            f"${{{_api_id(template)}}}/"
        )


def test_default_stage_throttles_and_logs_access(template: Template) -> None:
    log_format = Capture()
    log_group = Capture()
    template.has_resource_properties(
        "AWS::ApiGatewayV2::Stage",
        {
            "ApiId": {"Ref": _api_id(template)},
            "StageName": "$default",
            "AutoDeploy": True,
            "DefaultRouteSettings": {"ThrottlingRateLimit": 500, "ThrottlingBurstLimit": 1000},
            "AccessLogSettings": {
                "DestinationArn": {"Fn::GetAtt": [log_group, "Arn"]},
                "Format": log_format,
            },
        },
    )
    fields = json.loads(log_format.as_string())
    assert fields["requestId"] == "$context.requestId"
    assert {"status", "routeKey", "ip", "responseLatency", "integrationError"} <= set(fields)
    template.has_resource(
        "AWS::Logs::LogGroup",
        {"Properties": {"RetentionInDays": 90}, "DeletionPolicy": "Delete"},
    )
    assert template.to_json()["Resources"][log_group.as_string()]["Type"] == "AWS::Logs::LogGroup"


def test_api_url_output_is_the_endpoint(template: Template) -> None:
    template.has_output("ApiUrl", {"Value": {"Fn::GetAtt": [_api_id(template), "ApiEndpoint"]}})


def test_jwt_authorizer_replaces_iam_when_configured(variant_template: Template) -> None:
    authorizer_id, _ = only(
        variant_template.find_resources(
            "AWS::ApiGatewayV2::Authorizer",
            {
                "Properties": {
                    "AuthorizerType": "JWT",
                    "IdentitySource": ["$request.header.Authorization"],
                    "JwtConfiguration": {
                        "Issuer": VARIANT_SETTINGS.jwt_issuer,
                        "Audience": list(VARIANT_SETTINGS.jwt_audience),
                    },
                }
            },
        )
    )
    routes = variant_template.find_resources("AWS::ApiGatewayV2::Route")
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == ROUTE_KEYS
    for route in routes.values():
        assert route["Properties"]["AuthorizationType"] == "JWT"
        assert route["Properties"]["AuthorizerId"] == {"Ref": authorizer_id}
    variant_template.has_resource_properties(
        "AWS::ApiGatewayV2::Stage",
        {
            "DefaultRouteSettings": {
                "ThrottlingRateLimit": VARIANT_SETTINGS.api_rate_limit,
                "ThrottlingBurstLimit": VARIANT_SETTINGS.api_burst_limit,
            },
            "AccessLogSettings": Match.object_like({"Format": Match.any_value()}),
        },
    )
