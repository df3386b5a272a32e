"""Build the CDK app: settings from context, the stack, and cdk-nag's AwsSolutions checks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from .settings import TurnstileSettings
from .stack import TurnstileStack

__all__ = ["CDK_JSON", "add_turnstile_stack", "cdk_json_context", "create_app", "enable_nag"]

#: The repository's cdk.json: the CLI's app command and the context (feature flags, options).
CDK_JSON = Path(__file__).resolve().parents[2] / "cdk.json"


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The context the CDK CLI passes from cdk.json, for synthesizing without the CLI."""
    return dict(json.loads(path.read_text()).get("context", {}))


def add_turnstile_stack(app: App, settings: TurnstileSettings) -> TurnstileStack:
    """The stack under its CloudFormation name (construct id and stack name are the same)."""
    return TurnstileStack(app, settings.stack_name, settings=settings)


def enable_nag(app: App) -> None:
    """AwsSolutions findings fail the synthesis; each accepted one is acknowledged with a
    reason next to the construct it concerns (``Validations.of(...).acknowledge``)."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def create_app(
    *, context: Mapping[str, Any] | None = None, outdir: str | None = None
) -> tuple[App, TurnstileStack]:
    """The app ``cdk.json`` runs; ``context`` adds to what the CLI passes (``-c``)."""
    app = App(context=dict(context or {}), outdir=outdir)
    settings = TurnstileSettings.from_context(app.node.try_get_context)
    stack = add_turnstile_stack(app, settings)
    enable_nag(app)
    return app, stack
