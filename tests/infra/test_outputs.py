"""The stack's name and outputs: what the CLI (turnstile_tools.stack_outputs) looks up."""

from __future__ import annotations

from aws_cdk.assertions import Template

from turnstile_tools.stack_outputs import ENVIRONMENT_BY_OUTPUT, OutputKey

from .conftest import DEFAULT_STACK, Synthesized


def test_default_stack_name_is_turnstile(synthesized: Synthesized) -> None:
    assert synthesized.stacks[DEFAULT_STACK].stack_name == "Turnstile"
    assert synthesized.template_path("Turnstile").is_file()


def test_outputs_carry_the_exact_keys_the_cli_reads(template: Template) -> None:
    outputs = template.to_json()["Outputs"]
    assert set(OutputKey.ALL) <= set(outputs)
    assert set(ENVIRONMENT_BY_OUTPUT) == set(OutputKey.ALL)
    assert outputs["IntakeTableName"]["Value"] == {"Ref": "IntakeTable"}
    assert outputs["MainTableName"]["Value"] == {"Ref": "MainTable"}
    api_id = outputs["ApiUrl"]["Value"]["Fn::GetAtt"][0]
    assert outputs["ApiUrl"]["Value"] == {"Fn::GetAtt": [api_id, "ApiEndpoint"]}
    queue_id = outputs["FailureQueueUrl"]["Value"]["Ref"]
    resources = template.to_json()["Resources"]
    assert resources[api_id]["Type"] == "AWS::ApiGatewayV2::Api"
    assert resources[queue_id]["Type"] == "AWS::SQS::Queue"


def test_alarm_topic_is_an_output_too(template: Template) -> None:
    outputs = template.to_json()["Outputs"]
    topic_id = outputs["AlarmTopicArn"]["Value"]["Ref"]
    assert template.to_json()["Resources"][topic_id]["Type"] == "AWS::SNS::Topic"


def test_alarm_email_subscribes_when_given(variant_template: Template) -> None:
    variant_template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@example.com"}
    )
