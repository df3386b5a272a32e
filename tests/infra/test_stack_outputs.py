"""turnstile_tools.stack_outputs against a stubbed CloudFormation client (botocore Stubber)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from turnstile_tools.stack_outputs import (
    StackNotFoundError,
    environment_for_stack,
    find_stack_outputs,
)

OUTPUTS = {
    "IntakeTableName": "Turnstile-IntakeTable-1A2B",
    "MainTableName": "Turnstile-MainTable-3C4D",
    "ControlTableName": "Turnstile-ControlTable-5E6F",
    "ApiUrl": "https://abc123.execute-api.eu-west-1.amazonaws.com",
    "FailureQueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/Turnstile-Failure",
    "AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:Turnstile-Alarm",
}


@pytest.fixture
def cloudformation() -> Iterator[tuple[object, Stubber]]:
    client = boto3.client("cloudformation", region_name="eu-west-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _stack(outputs: dict[str, str]) -> dict[str, object]:
    return {
        "Stacks": [
            {
                "StackName": "Turnstile",
                "CreationTime": datetime(2025, 1, 1, tzinfo=UTC),
                "StackStatus": "CREATE_COMPLETE",
                "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
            }
        ]
    }


def test_outputs_by_key(cloudformation: tuple[object, Stubber]) -> None:
    client, stubber = cloudformation
    stubber.add_response("describe_stacks", _stack(OUTPUTS), {"StackName": "Turnstile"})
    assert find_stack_outputs("Turnstile", cloudformation_client=client) == OUTPUTS


def test_environment_for_stack() -> None:
    assert environment_for_stack(OUTPUTS) == {
        "TURNSTILE_INTAKE_TABLE": "Turnstile-IntakeTable-1A2B",
        "TURNSTILE_MAIN_TABLE": "Turnstile-MainTable-3C4D",
        "TURNSTILE_CONTROL_TABLE": "Turnstile-ControlTable-5E6F",
        "TURNSTILE_API_URL": "https://abc123.execute-api.eu-west-1.amazonaws.com",
        "TURNSTILE_FAILURE_QUEUE_URL": (
            "https://sqs.eu-west-1.amazonaws.com/123456789012/Turnstile-Failure"
        ),
    }


def test_unknown_stack_is_a_clear_error(cloudformation: tuple[object, Stubber]) -> None:
    client, stubber = cloudformation
    stubber.add_client_error(
        "describe_stacks",
        service_error_code="ValidationError",
        service_message="Stack with id Nope does not exist",
        http_status_code=400,
        expected_params={"StackName": "Nope"},
    )
    with pytest.raises(StackNotFoundError, match="'Nope' not found") as caught:
        find_stack_outputs("Nope", cloudformation_client=client)
    assert isinstance(caught.value.__cause__, ClientError)


def test_other_errors_are_not_disguised(cloudformation: tuple[object, Stubber]) -> None:
    client, stubber = cloudformation
    stubber.add_client_error("describe_stacks", service_error_code="AccessDenied")
    with pytest.raises(ClientError):
        find_stack_outputs("Turnstile", cloudformation_client=client)


def test_missing_output_names_every_missing_key(cloudformation: tuple[object, Stubber]) -> None:
    # GIVEN a stack still being created: only some outputs exist yet
    client, stubber = cloudformation
    partial = {"IntakeTableName": OUTPUTS["IntakeTableName"]}
    stubber.add_response("describe_stacks", _stack(partial), {"StackName": "Turnstile"})
    outputs = find_stack_outputs("Turnstile", cloudformation_client=client)
    # WHEN / THEN
    with pytest.raises(StackNotFoundError) as caught:
        environment_for_stack(outputs)
    for key in ("MainTableName", "ApiUrl", "FailureQueueUrl"):
        assert key in str(caught.value)
    assert "IntakeTableName" not in str(caught.value)


def test_stack_without_outputs(cloudformation: tuple[object, Stubber]) -> None:
    client, stubber = cloudformation
    stubber.add_response("describe_stacks", _stack({}), {"StackName": "Turnstile"})
    assert find_stack_outputs("Turnstile", cloudformation_client=client) == {}
