"""Find a deployed turnstile stack's outputs and turn them into turnstile's environment.

The CDK stack names its outputs with the keys in :class:`OutputKey`; the CLI looks a stack up
by name (``turnstile redrive --stack Turnstile``) instead of asking the user to copy table
names and URLs by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

__all__ = [
    "ENVIRONMENT_BY_OUTPUT",
    "OutputKey",
    "StackNotFoundError",
    "environment_for_stack",
    "find_stack_outputs",
]


class OutputKey:
    """CloudFormation output keys of the turnstile stack (the CDK stack uses these names)."""

    INTAKE_TABLE_NAME = "IntakeTableName"
    MAIN_TABLE_NAME = "MainTableName"
    CONTROL_TABLE_NAME = "ControlTableName"
    API_URL = "ApiUrl"
    FAILURE_QUEUE_URL = "FailureQueueUrl"

    ALL = (INTAKE_TABLE_NAME, MAIN_TABLE_NAME, CONTROL_TABLE_NAME, API_URL, FAILURE_QUEUE_URL)


#: Which environment variable each output becomes.
ENVIRONMENT_BY_OUTPUT: dict[str, str] = {
    OutputKey.INTAKE_TABLE_NAME: "TURNSTILE_INTAKE_TABLE",
    OutputKey.MAIN_TABLE_NAME: "TURNSTILE_MAIN_TABLE",
    OutputKey.CONTROL_TABLE_NAME: "TURNSTILE_CONTROL_TABLE",
    OutputKey.API_URL: "TURNSTILE_API_URL",
    OutputKey.FAILURE_QUEUE_URL: "TURNSTILE_FAILURE_QUEUE_URL",
}


class StackNotFoundError(Exception):
    """The stack does not exist (in this account and region), or lacks a turnstile output."""


def find_stack_outputs(stack_name: str, cloudformation_client: Any = None) -> dict[str, str]:
    """Return the stack's outputs as ``{OutputKey: OutputValue}``.

    Raises :class:`StackNotFoundError` when CloudFormation does not know the stack.
    """
    if cloudformation_client is None:
        import boto3  # only here: importing this module must not need AWS configuration

        cloudformation_client = boto3.client("cloudformation")
    try:
        response = cloudformation_client.describe_stacks(StackName=stack_name)
    except ClientError as exc:
        # DescribeStacks answers an unknown stack name with the code ValidationError.
        if exc.response.get("Error", {}).get("Code") == "ValidationError":
            raise StackNotFoundError(
                f"stack {stack_name!r} not found: check the name, the AWS region and the "
                f"account ({exc.response['Error'].get('Message', '')})"
            ) from exc
        raise
    stacks = response.get("Stacks") or []
    if not stacks:
        raise StackNotFoundError(f"stack {stack_name!r} not found")
    return {
        output["OutputKey"]: output["OutputValue"]
        for output in stacks[0].get("Outputs") or []
        if "OutputKey" in output and "OutputValue" in output
    }


def environment_for_stack(outputs: Mapping[str, str]) -> dict[str, str]:
    """Map the stack's outputs to TURNSTILE_* environment variables.

    Raises :class:`StackNotFoundError` naming every missing output, so a stack that is
    still being created (or is not a turnstile stack) fails clearly rather than half-way.
    """
    missing = [key for key in ENVIRONMENT_BY_OUTPUT if not outputs.get(key)]
    if missing:
        raise StackNotFoundError(
            "the stack has no output " + ", ".join(missing) + ": is it a turnstile stack, "
            "and has its deployment finished?"
        )
    return {env_var: outputs[key] for key, env_var in ENVIRONMENT_BY_OUTPUT.items()}
