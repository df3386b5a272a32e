"""The three functions: code asset, runtime, Powertools layer, environment, tracing, logs."""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from tests.imports import ROOT, declared_names, import_closure, module_name, undeclared
from turnstile.web.api import MAX_WAIT_S, WAIT_MARGIN_S
from turnstile_cdk.functions import POWERTOOLS_VERSION

from .conftest import VARIANT_SETTINGS, VARIANT_STACK, Synthesized, function_by_handler, render

HANDLERS = (
    "turnstile.handlers.stream.handler",
    "turnstile.handlers.api.handler",
    "turnstile.handlers.api.waiter",
    "turnstile.handlers.sweeper.handler",
    "turnstile.handlers.due_holds.handler",
)


@pytest.mark.parametrize("handler", HANDLERS)
def test_function_runtime_tracing_and_environment(template: Template, handler: str) -> None:
    _, function = function_by_handler(template, handler)
    properties = function["Properties"]
    assert properties["Runtime"] == "python3.12"
    assert properties["Architectures"] == ["arm64"]
    assert properties["TracingConfig"] == {"Mode": "Active"}
    # Responses of the API carry signups' attributes: never recorded in traces.
    api_only = (
        {"POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false"}
        if handler.endswith(("api.handler", "api.waiter"))
        else {}
    )
    # The functions that log signups read the key of their references.
    (secret,) = template.find_resources("AWS::SecretsManager::Secret")
    log_key = (
        {"TURNSTILE_LOG_KEY_SECRET": {"Ref": secret}}
        if handler.endswith(("api.handler", "stream.handler"))
        else {}
    )
    if handler.endswith("api.handler"):  # one organizer creates 1,000 events at most
        api_only = {**api_only, "TURNSTILE_MAX_EVENTS_PER_ORGANIZER": "1000"}
    # A sweep run reads the whole intake table (not just its index) once a day, and at
    # once for a note in the on-failure queue.
    queue = template.find_outputs("FailureQueueUrl")["FailureQueueUrl"]["Value"]
    sweeper_only = (
        {"TURNSTILE_SWEEP_FULL_SCAN_EVERY_S": "86400", "TURNSTILE_FAILURE_QUEUE_URL": queue}
        if "sweeper" in handler
        else {}
    )
    assert properties["Environment"]["Variables"] == {
        "TURNSTILE_INTAKE_TABLE": {"Ref": "IntakeTable"},
        "TURNSTILE_MAIN_TABLE": {"Ref": "MainTable"},
        "TURNSTILE_CONTROL_TABLE": {"Ref": "ControlTable"},
        "POWERTOOLS_SERVICE_NAME": "turnstile",
        "POWERTOOLS_METRICS_NAMESPACE": "Turnstile",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        # Intake records expire after 30 days, decisions a year after their last move.
        "TURNSTILE_INTAKE_RETENTION_DAYS": "30",
        "TURNSTILE_DECISION_RETENTION_DAYS": "365",
        **api_only,
        **sweeper_only,
        **log_key,
    }
    assert 1 <= properties["Timeout"] <= 300
    assert 128 <= properties["MemorySize"] <= 1024


def test_timeouts_fit_their_callers(template: Template) -> None:
    _, api = function_by_handler(template, "turnstile.handlers.api.handler")
    _, sweeper = function_by_handler(template, "turnstile.handlers.sweeper.handler")
    _, waiter = function_by_handler(template, "turnstile.handlers.api.waiter")
    assert api["Properties"]["Timeout"] < 30  # API Gateway's integration timeout
    # The longest wait, the margin it stops before its deadline, within API Gateway's 30 s.
    assert MAX_WAIT_S + WAIT_MARGIN_S <= waiter["Properties"]["Timeout"] < 30
    assert sweeper["Properties"]["Timeout"] < 5 * 60  # less than the sweep interval


@pytest.mark.parametrize("handler", HANDLERS)
def test_function_code_is_the_functions_asset(
    synthesized: Synthesized, template: Template, handler: str
) -> None:
    _, function = function_by_handler(template, handler)
    object_key = function["Properties"]["Code"]["S3Key"]
    assert re.fullmatch(r"[0-9a-f]{64}\.zip", object_key)
    asset_dir = synthesized.outdir / _asset_source(synthesized, object_key)
    # The handler module is in the asset under its import path...
    module = handler.rsplit(".", 1)[0].replace(".", "/") + ".py"
    assert (asset_dir / "turnstile" / "base" / "contract.py").is_file()
    if handler.endswith("stream.handler"):  # the others are being written alongside
        assert (asset_dir / module).is_file()
    # ...and nothing that only builds or tests it.
    files = [p.relative_to(asset_dir) for p in asset_dir.rglob("*")]
    assert not [p for p in files if p.suffix == ".pyc" or "__pycache__" in p.parts]
    assert not [p for p in files if "tests" in p.parts or p.name.endswith(".egg-info")]


def test_asset_is_the_runtime_code(synthesized: Synthesized, template: Template) -> None:
    """The asset holds every module the handlers import (at any depth, function bodies
    included), and nothing that runs elsewhere: no benchmark, no tests, no local stack, no
    CLI. Each of its modules imports only turnstile modules that are in it and the package's
    dependencies (Lambda's runtime and the Powertools layer provide them)."""
    _, function = function_by_handler(template, HANDLERS[0])
    asset_dir = synthesized.outdir / _asset_source(
        synthesized, function["Properties"]["Code"]["S3Key"]
    )
    files = sorted(str(p.relative_to(asset_dir)) for p in asset_dir.rglob("*") if p.is_file())
    assert "turnstile/handlers/stream.py" in files and "turnstile/storage/store.py" in files
    assert [f for f in files if not f.endswith(".py")] == []
    # exactly the runtime package, functions/turnstile: the operator's tools live elsewhere
    runtime = ROOT / "functions"
    assert set(files) == {
        str(p.relative_to(runtime))
        for p in runtime.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert [f for f in files if re.search(r"bench|tests?/|test_|/local/|/cli\.py$", f)] == []
    named = {module_name(asset_dir, asset_dir / f): asset_dir / f for f in files}
    # What the handlers import is there, and so is what anything else in it imports.
    source = ROOT / "functions"
    handlers = import_closure(asset_dir, [h.rsplit(".", 1)[0] for h in HANDLERS], source=source)
    assert handlers.missing == []
    assert {str(p.relative_to(asset_dir)) for p in handlers.files} <= set(files)
    assert import_closure(asset_dir, named, source=source).missing == []
    assert undeclared(named, declared_names()) == []


def test_powertools_pin_is_the_layers() -> None:
    """requirements.txt pins the Powertools the layer is chosen by."""
    pins = (ROOT / "requirements.txt").read_text()
    assert f"\naws-lambda-powertools=={POWERTOOLS_VERSION}\n" in pins


def _asset_source(synthesized: Synthesized, object_key: str) -> str:
    """The staged directory the asset manifest uploads as ``object_key``."""
    manifest = json.loads((synthesized.outdir / "Turnstile.assets.json").read_text())
    (source,) = [
        asset["source"]
        for asset in manifest["files"].values()
        if any(d["objectKey"] == object_key for d in asset["destinations"].values())
    ]
    assert source["packaging"] == "zip"
    return str(source["path"])


def test_one_asset_serves_every_function(template: Template) -> None:
    keys = {
        str(render(f["Properties"]["Code"]["S3Key"]))
        for f in template.find_resources("AWS::Lambda::Function").values()
    }
    assert len(keys) == 1


def test_powertools_layer_is_pinned_to_the_tested_version(template: Template) -> None:
    """The layer is Powertools' own SSM parameter for exactly the version requirements.txt pins."""
    assert version("aws-lambda-powertools") == POWERTOOLS_VERSION
    parameters = template.to_json()["Parameters"]
    layer_params = {
        name
        for name, p in parameters.items()
        if p["Type"] == "AWS::SSM::Parameter::Value<String>"
        and p["Default"] == f"/aws/service/powertools/python/arm64/python3.12/{POWERTOOLS_VERSION}"
    }
    (layer_param,) = layer_params
    for handler in HANDLERS:
        _, function = function_by_handler(template, handler)
        assert function["Properties"]["Layers"] == [{"Ref": layer_param}]


def test_powertools_layer_arn_can_be_pinned_by_number(synthesized: Synthesized) -> None:
    """turnstile:powertoolsLayerVersion=N: the public ARN, built in the stack's region."""
    variant = synthesized.template(VARIANT_STACK)
    expected = (
        "arn:${AWS::Partition}:lambda:${AWS::Region}:017000801446:layer:"
        "AWSLambdaPowertoolsPythonV3-python312-arm64:7"
    )
    for handler in HANDLERS:
        _, function = function_by_handler(variant, handler)
        assert [render(layer) for layer in function["Properties"]["Layers"]] == [expected]
        assert function["Properties"]["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"] == "DEBUG"


@pytest.mark.parametrize("handler", HANDLERS)
def test_function_logs_to_its_own_log_group_with_retention(
    template: Template, handler: str
) -> None:
    _, function = function_by_handler(template, handler)
    log_group_id = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    log_group = template.to_json()["Resources"][log_group_id]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == 30


@pytest.mark.parametrize("handler", HANDLERS)
def test_function_role_has_no_managed_policies(template: Template, handler: str) -> None:
    _, function = function_by_handler(template, handler)
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    role = template.to_json()["Resources"][role_id]
    assert "ManagedPolicyArns" not in role["Properties"]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
        }
    ]


def test_functions_dir_is_the_repository_package() -> None:
    from turnstile_cdk.functions import FUNCTIONS_DIR

    assert Path(__file__).resolve().parents[2] / "functions" == FUNCTIONS_DIR
    assert (FUNCTIONS_DIR / "turnstile" / "base" / "contract.py").is_file()


@pytest.mark.parametrize("handler", HANDLERS)
def test_retention_options_reach_every_function(
    template: Template, variant_template: Template, handler: str
) -> None:
    _, function = function_by_handler(template, handler)
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["TURNSTILE_DECISION_RETENTION_DAYS"] == "365"  # the default
    _, function = function_by_handler(variant_template, handler)
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["TURNSTILE_INTAKE_RETENTION_DAYS"] == str(
        VARIANT_SETTINGS.intake_retention_days
    )
    assert "TURNSTILE_DECISION_RETENTION_DAYS" not in variables  # kept for good


def test_every_function_has_reserved_concurrency(template: Template) -> None:
    """Isolation: a flood at the processor, a stuck sweeper or a storm of long-polling
    status reads cannot starve the others; the release of due holds always has room."""
    concurrency = {
        handler: function_by_handler(template, handler)[1]["Properties"].get(
            "ReservedConcurrentExecutions"
        )
        for handler in HANDLERS
    }
    assert concurrency == {
        "turnstile.handlers.stream.handler": 10,
        "turnstile.handlers.api.handler": 100,
        "turnstile.handlers.api.waiter": 50,
        "turnstile.handlers.sweeper.handler": 1,
        "turnstile.handlers.due_holds.handler": 1,
    }


def test_reserved_concurrency_can_be_changed_or_turned_off(variant_template: Template) -> None:
    _, processor = function_by_handler(variant_template, "turnstile.handlers.stream.handler")
    _, sweeper = function_by_handler(variant_template, "turnstile.handlers.sweeper.handler")
    _, api = function_by_handler(variant_template, "turnstile.handlers.api.handler")
    _, due = function_by_handler(variant_template, "turnstile.handlers.due_holds.handler")
    _, waiter = function_by_handler(variant_template, "turnstile.handlers.api.waiter")
    assert waiter["Properties"]["ReservedConcurrentExecutions"] == 12
    assert "ReservedConcurrentExecutions" not in processor["Properties"]
    assert sweeper["Properties"]["ReservedConcurrentExecutions"] == 3
    assert api["Properties"]["ReservedConcurrentExecutions"] == 40
    assert "ReservedConcurrentExecutions" not in due["Properties"]
