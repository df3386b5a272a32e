"""The HTTP API: routes, authorization, Lambda proxy integration, throttling, access logs."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Capture, Match, Template

from turnstile.web.api import ROUTES, WAITING_ROUTES
from turnstile_cdk.api import (
    OPEN_ROUTES,
    ROUTE_ROLES,
    CallerRole,
    allowed_roles,
    check_route_roles,
)

from .conftest import VARIANT_SETTINGS, function_by_handler, only, render

ROUTE_KEYS = {
    "GET /",
    "POST /events",
    "GET /events",
    "GET /events/{event_id}",
    "PATCH /events/{event_id}",
    "POST /events/{event_id}/close",
    "POST /events/{event_id}/signups",
    "GET /events/{event_id}/signups",
    "GET /events/{event_id}/signups/{signup_id}",
    "GET /events/{event_id}/signups/{signup_id}/decision",  # the waiting read: the waiter's
    "POST /events/{event_id}/signups/{signup_id}/confirm",
    "POST /events/{event_id}/signups/{signup_id}/cancel",
    "GET /openapi.json",
    "ANY /{proxy+}",  # the API's own JSON 404/405 for anything else
}
#: The routes the waiter function serves.
WAITING = {f"{r.method} {r.path}" for r in WAITING_ROUTES}
#: With CORS (the variant stack) the catch-all leaves OPTIONS to API Gateway's preflights.
CORS_CATCH_ALL = {f"{m} /{{proxy+}}" for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")}
VARIANT_ROUTE_KEYS = ROUTE_KEYS - {"ANY /{proxy+}"} | CORS_CATCH_ALL


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


def _integration(template: Template, handler: str) -> tuple[str, str]:
    """The function of ``handler`` and its one AWS_PROXY (payload 2.0) integration."""
    function_id, _ = function_by_handler(template, handler)
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
    return function_id, integration_id


def test_routes_proxy_to_the_api_function_with_payload_v2(template: Template) -> None:
    # The waiting read goes to the waiter, every other route to the API function: a held
    # wait never takes an API instance.
    api_id, api_integration = _integration(template, "turnstile.handlers.api.handler")
    waiter_id, waiter_integration = _integration(template, "turnstile.handlers.api.waiter")
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    targets = {
        r["Properties"]["RouteKey"]: render(r["Properties"]["Target"]) for r in routes.values()
    }
    assert targets == {
        key: f"integrations/${{{waiter_integration if key in WAITING else api_integration}}}"
        for key in ROUTE_KEYS
    }
    assert {"GET /events/{event_id}/signups/{signup_id}/decision"} == WAITING
    # API Gateway may invoke each function only from this API's routes, its own.
    for function_id, count in ((api_id, len(ROUTE_KEYS) - len(WAITING)), (waiter_id, len(WAITING))):
        permissions = template.find_resources(
            "AWS::Lambda::Permission",
            {"Properties": {"FunctionName": {"Fn::GetAtt": [function_id, "Arn"]}}},
        )
        assert len(permissions) == count
        for permission in permissions.values():
            assert permission["Properties"]["Principal"] == "apigateway.amazonaws.com"
            source = render(permission["Properties"]["SourceArn"])
            assert source.startswith(
                "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:"
                f"${{{_api_id(template)}}}/"
            )


def test_the_waiter_has_its_own_capped_concurrency_and_only_reads(template: Template) -> None:
    _, waiter = function_by_handler(template, "turnstile.handlers.api.waiter")
    _, api = function_by_handler(template, "turnstile.handlers.api.handler")
    assert waiter["Properties"]["ReservedConcurrentExecutions"] == 50
    assert api["Properties"]["ReservedConcurrentExecutions"] == 100
    # A hung wait holds its instance no longer than the longest wait and its margin.
    assert waiter["Properties"]["Timeout"] == 15
    role = waiter["Properties"]["Role"]["Fn::GetAtt"][0]
    actions = {
        action
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in (
            [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        )
    }
    dynamodb = {a for a in actions if a.startswith("dynamodb:")}
    assert dynamodb == {"dynamodb:GetItem"}


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
    # Who called: the signer's role or user ARN.
    assert fields["caller"] == "$context.identity.userArn"
    template.has_resource(
        "AWS::Logs::LogGroup",
        {"Properties": {"RetentionInDays": 90}, "DeletionPolicy": "Delete"},
    )
    assert template.to_json()["Resources"][log_group.as_string()]["Type"] == "AWS::Logs::LogGroup"


def test_api_url_output_is_the_endpoint(template: Template) -> None:
    template.has_output("ApiUrl", {"Value": {"Fn::GetAtt": [_api_id(template), "ApiEndpoint"]}})


def test_jwt_authorizer_replaces_iam_when_configured(variant_template: Template) -> None:
    log_format = Capture()
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
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == VARIANT_ROUTE_KEYS
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
            "AccessLogSettings": Match.object_like({"Format": log_format}),
        },
    )
    # Who called: the token's subject.
    assert json.loads(log_format.as_string())["caller"] == "$context.authorizer.claims.sub"


# --- who may call what: a role per route --------------------------------------------------

SERVED = [f"{r.method} {r.path}" for r in ROUTES]
#: Announced by the issue, not served yet: mapped ahead so its arrival needs no cdk change.
ANNOUNCED = {"PATCH /events/{event_id}"}
ARN_PREFIX = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:"


def test_every_business_route_has_exactly_one_role() -> None:
    for key in SERVED:
        assert (key in ROUTE_ROLES) != (key in OPEN_ROUTES), f"{key}: no role, or two"
    assert {"GET /", "GET /openapi.json"} == OPEN_ROUTES  # the document: any caller
    check_route_roles(SERVED)
    assert set(ROUTE_ROLES) - set(SERVED) <= ANNOUNCED, "a role for a route nobody serves"


def test_a_route_without_a_role_fails_the_synthesis() -> None:
    """A route added to turnstile.web.api.ROUTES without a role cannot slip through."""
    unmapped = "DELETE /events/{event_id}"
    with pytest.raises(ValueError, match=re.escape(f"{unmapped} have no caller role")):
        check_route_roles([*SERVED, unmapped])


def test_roles_in_words() -> None:
    """Organizers manage events and read; producers submit, confirm, cancel and read
    (the API shows each only its own signups); readers only read."""
    reach = {role: {k for k in SERVED if role in allowed_roles(k)} for role in CallerRole}
    assert reach[CallerRole.PRODUCER] - reach[CallerRole.READER] == {
        "POST /events/{event_id}/signups",
        "POST /events/{event_id}/signups/{signup_id}/confirm",
        "POST /events/{event_id}/signups/{signup_id}/cancel",
    }
    assert all(key.startswith("GET ") for key in reach[CallerRole.READER])
    assert reach[CallerRole.READER] < reach[CallerRole.ORGANIZER]
    assert {"POST /events", "POST /events/{event_id}/close"} <= reach[CallerRole.ORGANIZER]
    assert "POST /events/{event_id}/signups" not in reach[CallerRole.ORGANIZER]
    assert allowed_roles("PATCH /events/{event_id}") == {CallerRole.ORGANIZER}
    # The lists are reads (whose signups a list shows, the API decides: an organizer's own).
    assert allowed_roles("GET /events") == set(CallerRole)
    assert allowed_roles("GET /events/{event_id}/signups") == set(CallerRole)


def _policy_arns(template: Template) -> dict[CallerRole, set[str]]:
    """Each role's managed policy (found through its stack output), as rendered ARNs."""
    outputs = template.to_json()["Outputs"]
    resources = template.to_json()["Resources"]
    arns = {}
    for role in CallerRole:
        policy = resources[outputs[role.output_key]["Value"]["Ref"]]
        assert policy["Type"] == "AWS::IAM::ManagedPolicy"
        (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert (statement["Effect"], statement["Action"]) == ("Allow", "execute-api:Invoke")
        assert "Condition" not in statement and "NotResource" not in statement
        arns[role] = {render(r) for r in statement["Resource"]}
    return arns


def test_each_role_may_invoke_exactly_its_routes(template: Template) -> None:
    stage = f"{ARN_PREFIX}${{{_api_id(template)}}}/$default/"
    expected = {
        role: {
            stage + key.replace(" ", "", 1).replace("{event_id}", "*").replace("{signup_id}", "*")
            for key in SERVED
            if role in allowed_roles(key)
        }
        for role in CallerRole
    }
    assert _policy_arns(template) == expected
    assert expected[CallerRole.PRODUCER] - expected[CallerRole.READER] == {
        stage + "POST/events/*/signups",
        stage + "POST/events/*/signups/*/confirm",
        stage + "POST/events/*/signups/*/cancel",
    }


def _iam_matches(pattern: str, resource: str) -> bool:
    """IAM's ARN matching: '*' is any run of characters, '/' included; '?' is one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, resource) is not None


def test_no_wildcard_reaches_a_route_of_another_role(template: Template) -> None:
    """'*' in an execute-api ARN also matches '/': GET/events/* covers every GET below
    /events. Each concrete request of each route must be allowed to exactly its roles."""
    stage = f"{ARN_PREFIX}${{{_api_id(template)}}}/$default/"
    arns = _policy_arns(template)
    for key in SERVED:
        method, path = key.split(" ", 1)
        request = stage + method + re.sub(r"\{[^}]+\}", "some-id", path)
        reaching = {r for r in CallerRole if any(_iam_matches(a, request) for a in arns[r])}
        assert reaching == allowed_roles(key), key


def test_policy_arns_are_outputs_in_iam_mode_only(
    template: Template, variant_template: Template
) -> None:
    keys = {"OrganizerPolicyArn", "ProducerPolicyArn", "ReaderPolicyArn"}
    assert {role.output_key for role in CallerRole} == keys
    assert keys <= set(template.to_json()["Outputs"])
    # With a JWT authorizer IAM decides nothing: scopes do (below).
    assert not keys & set(variant_template.to_json()["Outputs"])
    # (its only managed policies are the direct producers', test_confined_producers.py)
    assert all(
        "DirectProducerPolicy" in logical_id
        for logical_id in variant_template.find_resources("AWS::IAM::ManagedPolicy")
    )


def test_jwt_routes_require_their_roles_scopes(variant_template: Template) -> None:
    routes = variant_template.find_resources("AWS::ApiGatewayV2::Route")
    scopes = {
        r["Properties"]["RouteKey"]: r["Properties"].get("AuthorizationScopes")
        for r in routes.values()
    }
    # The admin scope opens every route; producers read (their own signups) as readers do.
    reads = ["turnstile/admin", "turnstile/organizer", "turnstile/producer", "turnstile/reader"]
    assert scopes == {
        "POST /events": ["turnstile/admin", "turnstile/organizer"],
        "GET /events": reads,
        "GET /events/{event_id}/signups": reads,
        "POST /events/{event_id}/close": ["turnstile/admin", "turnstile/organizer"],
        "PATCH /events/{event_id}": ["turnstile/admin", "turnstile/organizer"],
        "POST /events/{event_id}/signups": ["turnstile/admin", "turnstile/producer"],
        "POST /events/{event_id}/signups/{signup_id}/confirm": [
            "turnstile/admin",
            "turnstile/producer",
        ],
        "POST /events/{event_id}/signups/{signup_id}/cancel": [
            "turnstile/admin",
            "turnstile/producer",
        ],
        "GET /events/{event_id}": reads,
        "GET /events/{event_id}/signups/{signup_id}": reads,
        "GET /events/{event_id}/signups/{signup_id}/decision": reads,
        # Any valid token: the API's document and index, its own 404/405 for unknown paths.
        "GET /": None,
        "GET /openapi.json": None,
    } | dict.fromkeys(CORS_CATCH_ALL) | {
        key: sorted({role.scope for role in allowed_roles(key)} | {"turnstile/admin"})
        for key in set(SERVED) - set(ROUTE_KEYS)  # routes added since, mapped as they say
    }


def test_iam_routes_carry_no_scopes(template: Template) -> None:
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    assert all("AuthorizationScopes" not in r["Properties"] for r in routes.values())


# --- throttling per route -------------------------------------------------------------------


def _route_settings(template: Template) -> dict[str, object]:
    _, stage = only(template.find_resources("AWS::ApiGatewayV2::Stage"))
    return stage["Properties"]["RouteSettings"]


def test_signups_and_reads_are_throttled_apart(template: Template) -> None:
    signups = {"ThrottlingRateLimit": 500, "ThrottlingBurstLimit": 1000}
    reads = {"ThrottlingRateLimit": 1000, "ThrottlingBurstLimit": 2000}
    waits = {"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100}
    assert _route_settings(template) == {
        "GET /events/{event_id}/signups/{signup_id}/decision": waits,
        "POST /events/{event_id}/signups": signups,
        # A producer's requests share its signups' limits.
        "POST /events/{event_id}/signups/{signup_id}/confirm": signups,
        "POST /events/{event_id}/signups/{signup_id}/cancel": signups,
        "GET /events": reads,
        "GET /events/{event_id}": reads,
        "GET /events/{event_id}/signups": reads,
        "GET /events/{event_id}/signups/{signup_id}": reads,
    } | {
        key: reads
        for key in SERVED
        if ROUTE_ROLES.get(key) == CallerRole.READER and key not in ROUTE_KEYS | WAITING
    }


def test_route_throttling_follows_its_options(variant_template: Template) -> None:
    settings = _route_settings(variant_template)
    assert settings["POST /events/{event_id}/signups"] == {
        "ThrottlingRateLimit": VARIANT_SETTINGS.signup_rate_limit,
        "ThrottlingBurstLimit": VARIANT_SETTINGS.signup_burst_limit,
    }
    assert settings["GET /events/{event_id}/signups/{signup_id}"] == {
        "ThrottlingRateLimit": VARIANT_SETTINGS.read_rate_limit,
        "ThrottlingBurstLimit": VARIANT_SETTINGS.read_burst_limit,
    }
    assert settings["GET /events/{event_id}/signups/{signup_id}/decision"] == {
        "ThrottlingRateLimit": VARIANT_SETTINGS.wait_rate_limit,
        "ThrottlingBurstLimit": VARIANT_SETTINGS.wait_burst_limit,
    }


def test_the_stage_waits_for_the_routes_it_throttles(template: Template) -> None:
    """API Gateway rejects route settings for a route key that does not exist yet."""
    _, stage = only(template.find_resources("AWS::ApiGatewayV2::Stage"))
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    throttled = {
        route_id
        for route_id, route in routes.items()
        if route["Properties"]["RouteKey"] in stage["Properties"]["RouteSettings"]
    }
    assert len(throttled) == len(stage["Properties"]["RouteSettings"])
    assert throttled <= set(stage["DependsOn"])


def test_api_keeps_responses_out_of_traces(template: Template) -> None:
    """Responses carry signups' attributes (personal data); Powertools' tracer must not
    record them as trace metadata."""
    _, function = function_by_handler(template, "turnstile.handlers.api.handler")
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"


def test_admin_principals_reach_the_api_function(
    template: Template, variant_template: Template
) -> None:
    _, function = function_by_handler(template, "turnstile.handlers.api.handler")
    assert "TURNSTILE_ADMIN_PRINCIPALS" not in function["Properties"]["Environment"]["Variables"]
    _, function = function_by_handler(variant_template, "turnstile.handlers.api.handler")
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["TURNSTILE_ADMIN_PRINCIPALS"] == ",".join(VARIANT_SETTINGS.admin_principals)


# --- waiting status reads -------------------------------------------------------------------


def test_the_function_outlasts_the_longest_wait(template: Template) -> None:
    """A status read may wait MAX_WAIT_S and stops WAIT_MARGIN_S before the invocation's
    deadline; API Gateway gives up on the integration at 30 s."""
    from turnstile.web.api import MAX_WAIT_S, WAIT_MARGIN_S

    _, function = function_by_handler(template, "turnstile.handlers.api.handler")
    assert MAX_WAIT_S + WAIT_MARGIN_S < function["Properties"]["Timeout"] < 30
    for integration in template.find_resources("AWS::ApiGatewayV2::Integration").values():
        # Unset means API Gateway's default and maximum: 30 s.
        assert integration["Properties"].get("TimeoutInMillis", 30_000) == 30_000


# --- CORS -----------------------------------------------------------------------------------


def test_cors_is_off_by_default(template: Template) -> None:
    _, api = only(template.find_resources("AWS::ApiGatewayV2::Api"))
    assert "CorsConfiguration" not in api["Properties"]
    routes = template.find_resources("AWS::ApiGatewayV2::Route")
    assert "ANY /{proxy+}" in {r["Properties"]["RouteKey"] for r in routes.values()}


def test_cors_allows_the_configured_origins(variant_template: Template) -> None:
    _, api = only(variant_template.find_resources("AWS::ApiGatewayV2::Api"))
    assert api["Properties"]["CorsConfiguration"] == {
        "AllowOrigins": list(VARIANT_SETTINGS.api_cors_origins),
        "AllowMethods": ["GET", "PATCH", "POST"],
        "AllowHeaders": [
            "authorization",
            "content-type",
            "x-amz-content-sha256",
            "x-amz-date",
            "x-amz-security-token",
        ],
        "ExposeHeaders": ["location", "retry-after"],
        "MaxAge": 600,
    }
    # No route takes OPTIONS: a preflight is API Gateway's to answer, never refused by
    # the authorizer of a catch-all route.
    routes = variant_template.find_resources("AWS::ApiGatewayV2::Route")
    keys = {r["Properties"]["RouteKey"] for r in routes.values()}
    assert not any(key.split(" ")[0] in ("OPTIONS", "ANY") for key in keys)
