"""Direct producers confined to their own events: the policies the stack makes for
``turnstile:confinedProducers``, evaluated by the local IAM model as AWS would evaluate
them, request by request (docs/producers.md)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from turnstile_cdk.local_roles import render
from turnstile_cdk.producers import output_key
from turnstile_tools.local.iam import Authorizer
from turnstile_tools.local.roles import LocalRoles

REGION, ACCOUNT = "us-east-1", "123456789012"


@pytest.fixture(scope="module")
def producers(variant_template: Template) -> Authorizer:
    """shop-a's and shop-b's policies as the variant stack synthesizes them."""
    template = variant_template.to_json()
    roles: dict[str, Any] = {}
    for name in ("shop-a", "shop-b"):
        ref = template["Outputs"][output_key(name)]["Value"]["Ref"]
        policy = template["Resources"][ref]
        assert policy["Type"] == "AWS::IAM::ManagedPolicy"
        statements = render(policy["Properties"]["PolicyDocument"]["Statement"])
        roles[name] = {"statements": statements}
    resources = {
        logical_id: resource["Type"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::DynamoDB::Table"
    }
    return LocalRoles({"resources": resources, "roles": roles}).authorizer()


def allowed(authorizer: Authorizer, who: str, action: str, **params: Any) -> bool:
    return authorizer.check(who, "dynamodb", action, params, REGION, ACCOUNT) is None


def key(event_id: str, signup_id: str = "u1") -> dict[str, Any]:
    return {"event_id": {"S": event_id}, "signup_id": {"S": signup_id}}


@pytest.mark.parametrize("event_id", ["shop-a-gig", "gala"])
def test_a_producer_writes_and_reads_its_own_events(producers: Authorizer, event_id: str):
    item = {**key(event_id), "seats": {"N": "1"}}
    assert allowed(producers, "shop-a", "PutItem", TableName="turnstile-intake", Item=item)
    assert allowed(
        producers,
        "shop-a",
        "UpdateItem",
        TableName="turnstile-intake",
        Key=key(event_id),
        UpdateExpression="SET #r = :r",
        ExpressionAttributeNames={"#r": "request"},
        ExpressionAttributeValues={":r": {"S": "cancel"}},
    )
    assert allowed(producers, "shop-a", "GetItem", TableName="turnstile-main", Key=key(event_id))


@pytest.mark.parametrize(
    ("action", "params"),
    [
        ("PutItem", {"TableName": "turnstile-intake", "Item": key("shop-b-gig")}),
        ("DeleteItem", {"TableName": "turnstile-intake", "Key": key("shop-b-gig")}),
        (
            "UpdateItem",
            {
                "TableName": "turnstile-intake",
                "Key": key("shop-b-gig"),
                "UpdateExpression": "SET #r = :r",
                "ExpressionAttributeNames": {"#r": "request"},
                "ExpressionAttributeValues": {":r": {"S": "cancel"}},
            },
        ),
        ("GetItem", {"TableName": "turnstile-main", "Key": key("shop-b-gig")}),
        (
            "Query",
            {
                "TableName": "turnstile-intake",
                "KeyConditionExpression": "event_id = :e",
                "ExpressionAttributeValues": {":e": {"S": "shop-b-gig"}},
            },
        ),
        # one of its own and one of another's in a batch: the whole batch is refused
        (
            "BatchWriteItem",
            {
                "RequestItems": {
                    "turnstile-intake": [
                        {"PutRequest": {"Item": key("shop-a-gig")}},
                        {"DeleteRequest": {"Key": key("shop-b-gig")}},
                    ]
                }
            },
        ),
        # no leading key at all: never allowed
        ("Scan", {"TableName": "turnstile-intake"}),
        # nothing of turnstile's own tables beyond its events
        (
            "GetItem",
            {
                "TableName": "turnstile-control",
                "Key": {"pk": {"S": "EVENT#shop-a-gig"}, "sk": {"S": "EVENT"}},
            },
        ),
    ],
)
def test_a_producer_cannot_touch_another_events_records(
    producers: Authorizer, action: str, params: dict[str, Any]
):
    assert not allowed(producers, "shop-a", action, **params)


def test_each_producer_is_confined_to_its_own(producers: Authorizer):
    item = key("shop-a-gig")
    assert not allowed(producers, "shop-b", "PutItem", TableName="turnstile-intake", Item=item)
    assert allowed(
        producers, "shop-b", "PutItem", TableName="turnstile-intake", Item=key("shop-b-x")
    )


def test_the_default_stack_makes_no_producer_policy(template: Template):
    assert not [k for k in template.to_json()["Outputs"] if k.endswith("DirectProducerPolicyArn")]
