"""Synthesize the CDK app once per session; tests read the templates with Template/Match/Capture.

The app is built as cdk/app.py builds it (create_app, with cdk.json's context), plus a
second stack with the non-default options (JWT, tables not retained, pinned layer number,
decisions expiring, no reserved concurrency for the processor nor the due holds),
so both shapes are synthesized, nagged and linted in that single synthesis.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "cdk", ROOT / "functions"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from turnstile_cdk.application import (  # noqa: E402
    add_turnstile_stack,
    cdk_json_context,
    create_app,
)
from turnstile_cdk.local_roles import render  # noqa: E402
from turnstile_cdk.settings import TurnstileSettings  # noqa: E402
from turnstile_cdk.stack import TurnstileStack  # noqa: E402

DEFAULT_STACK = "Turnstile"
VARIANT_STACK = "TurnstileVariant"
#: Every option away from its default, to prove each one reaches the template.
VARIANT_SETTINGS = TurnstileSettings(
    stack_name=VARIANT_STACK,
    retain_tables=False,
    jwt_issuer="https://issuer.example.com/",
    jwt_audience=("turnstile-api", "turnstile-cli"),
    powertools_layer_version=7,
    log_level="DEBUG",
    api_rate_limit=50,
    api_burst_limit=75,
    alarm_email="oncall@example.com",
    signup_rate_limit=20,
    signup_burst_limit=40,
    read_rate_limit=30,
    read_burst_limit=60,
    wait_rate_limit=7,
    wait_burst_limit=9,
    intake_retention_days=7,
    decision_retention_days=None,  # kept for good
    processor_reserved_concurrency=None,
    sweeper_reserved_concurrency=3,
    api_reserved_concurrency=40,
    waiter_reserved_concurrency=12,
    due_holds_reserved_concurrency=None,
    api_cors_origins=("https://app.example.com", "http://localhost:3000"),
    admin_principals=("arn:aws:iam::123456789012:role/ops-*",),
    confined_producers=(("shop-a", ("shop-a-*", "gala")), ("shop-b", ("shop-b-*",))),
    max_events_per_organizer=None,
    encryption_key="create",  # a customer managed key of the stack's own
)


@dataclass
class Synthesized:
    """One synthesis of the app: its stacks, the assembly directory, and cdk-nag's verdict."""

    app: App
    stacks: dict[str, TurnstileStack]
    outdir: Path
    #: The error app.synth() raised when a validation plugin (cdk-nag) reported findings.
    validation_error: str | None
    _templates: dict[str, Template] = field(default_factory=dict)

    def template(self, stack_name: str = DEFAULT_STACK) -> Template:
        if stack_name not in self._templates:
            if self.validation_error is None:
                self._templates[stack_name] = Template.from_stack(self.stacks[stack_name])
            else:
                # The synthesis wrote the templates before the plugins failed it; reading
                # them keeps the other tests meaningful while the nag test reports why.
                self._templates[stack_name] = Template.from_json(self.template_json(stack_name))
        return self._templates[stack_name]

    def template_json(self, stack_name: str = DEFAULT_STACK) -> dict[str, Any]:
        return json.loads(self.template_path(stack_name).read_text())

    def template_path(self, stack_name: str = DEFAULT_STACK) -> Path:
        return self.outdir / f"{stack_name}.template.json"


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out")
    # The context `npx cdk synth` passes (feature flags included), so tests see that app.
    context = {**cdk_json_context(), "aws:cdk:bundling-stacks": []}
    app, stack = create_app(context=context, outdir=str(outdir))
    variant = add_turnstile_stack(app, VARIANT_SETTINGS)
    error: str | None = None
    try:
        app.synth()
    except RuntimeError as exc:  # jsii surfaces the JavaScript error as RuntimeError
        if "ValidationFailed" not in str(exc):
            raise
        error = str(exc)
    return Synthesized(
        app=app,
        stacks={stack.stack_name: stack, variant.stack_name: variant},
        outdir=outdir,
        validation_error=error,
    )


@pytest.fixture(scope="session")
def template(synthesized: Synthesized) -> Template:
    return synthesized.template(DEFAULT_STACK)


@pytest.fixture(scope="session")
def variant_template(synthesized: Synthesized) -> Template:
    return synthesized.template(VARIANT_STACK)


@pytest.fixture(scope="session")
def templates(synthesized: Synthesized) -> list[tuple[str, Template]]:
    return [(name, synthesized.template(name)) for name in (DEFAULT_STACK, VARIANT_STACK)]


# --- reading templates ------------------------------------------------------------------


def only(resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The one (logical id, resource) in ``resources``; fails if there are more or none."""
    assert len(resources) == 1, f"expected exactly one resource, found {sorted(resources)}"
    return next(iter(resources.items()))


def function_by_handler(template: Template, handler: str) -> tuple[str, dict[str, Any]]:
    return only(
        template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    )


def role_permissions(template: Template, role_id: str) -> dict[str, set[str]]:
    """Every action the role's policies allow, with the resources (rendered) it is allowed on."""
    permissions: dict[str, set[str]] = {}
    policies = template.find_resources("AWS::IAM::Policy")
    for policy in policies.values():
        roles = policy["Properties"].get("Roles", [])
        if {"Ref": role_id} not in roles:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"]
            resources = statement["Resource"]
            for action in [actions] if isinstance(actions, str) else actions:
                targets = resources if isinstance(resources, list) else [resources]
                permissions.setdefault(action, set()).update(str(render(r)) for r in targets)
    return permissions


def assert_scheduler_trust(trust: dict[str, Any]) -> None:
    """Only EventBridge Scheduler, acting for this account's default schedule group, may
    assume a schedule's role (confused-deputy prevention: Scheduler's condition names the
    schedule group, never one schedule)."""
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert statement["Action"] == "sts:AssumeRole"
    assert render(statement["Condition"]) == {
        "StringEquals": {
            "aws:SourceAccount": "${AWS::AccountId}",
            "aws:SourceArn": "arn:${AWS::Partition}:scheduler:${AWS::Region}:"
            "${AWS::AccountId}:schedule-group/default",
        }
    }
