"""cdk-nag AwsSolutions: no unacknowledged finding, and every acknowledgment says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs

from turnstile_cdk.application import cdk_json_context, create_app, enable_nag
from turnstile_cdk.nag import acknowledgments, read_findings

from .conftest import DEFAULT_STACK, Synthesized


def test_no_unacknowledged_findings(synthesized: Synthesized) -> None:
    findings = read_findings(synthesized.outdir)
    assert [str(f) for f in findings] == []
    assert synthesized.validation_error is None


def test_the_check_fails_on_a_finding(tmp_path: Path) -> None:
    """The test above can fail: a bare queue (no SSL policy, no DLQ) is reported and stops synth."""
    app = App(outdir=str(tmp_path))
    sqs.Queue(Stack(app, "Canary"), "BareQueue")
    enable_nag(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    rules = {f.rule for f in read_findings(tmp_path)}
    assert {"AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= rules


def test_the_real_app_fails_synthesis_on_a_finding(tmp_path: Path) -> None:
    """cdk-nag is wired into create_app() itself: the app `cdk synth` runs, given one
    resource that breaks a rule, refuses to synthesize and names it. (An empty report alone
    proves nothing: it looks the same with no plugin at all.)"""
    context = {**cdk_json_context(), "aws:cdk:bundling-stacks": []}
    app, stack = create_app(context=context, outdir=str(tmp_path))
    sqs.Queue(stack, "BareQueue")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    found = {(f.rule, f.path) for f in read_findings(tmp_path)}
    queue = f"{DEFAULT_STACK}/BareQueue/Resource"
    assert ("AwsSolutions-SQS4", queue) in found  # no SSL-only policy
    assert {path for _, path in found} == {queue}  # and nothing else in the stack


def test_acknowledgments_are_specific_and_explained(synthesized: Synthesized) -> None:
    acknowledged = acknowledgments(synthesized.app)
    assert acknowledged, "expected the documented acknowledgments (X-Ray, runtime, ...)"
    for ack in acknowledged:
        # Only AwsSolutions rules, each on the construct it concerns, never the whole app.
        assert ack.rule.startswith("AwsSolutions-"), ack
        assert ack.path.count("/") >= 2, f"{ack.rule} acknowledged too broadly at {ack.path}"
        # A reason a reviewer can check: says what is allowed and why it cannot be narrower.
        assert len(ack.reason) >= 80, f"{ack.rule} at {ack.path}: reason too thin"
    # Only these rules are accepted anywhere; each new one needs a reviewer's look here.
    allowed = re.compile(
        r"AwsSolutions-L1"  # python3.12 pinned with its Powertools layer
        r"|AwsSolutions-SQS3"  # the on-failure queue is itself the dead-letter destination
        r"|AwsSolutions-SMG4"  # the log key: a pseudonymization key, rotation would only hurt
        r"|AwsSolutions-IAM5\[Resource::\*\]"  # X-Ray / dynamodb:ListStreams
        r"|AwsSolutions-IAM5\[Resource::<Sweeper\w+\.Arn>:\*\]"  # invoke the sweeper's versions
        r"|AwsSolutions-IAM5\[Resource::<DueHolds\w+\.Arn>:\*\]"  # ... the due-holds function's
        # A caller role's route: this API, the $default stage, one method; '*' only as a
        # whole path segment (a path parameter).
        r"|AwsSolutions-IAM5\[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:"
        r"<AWS::AccountId>:<ApiHttpApi\w+>/\$default/(GET|POST|PATCH|PUT|DELETE)(/([\w.-]+|\*))+\]"
    )
    assert [a.rule for a in acknowledged if not allowed.fullmatch(a.rule)] == []
