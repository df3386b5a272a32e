"""Stack options from CDK context: strings from `-c`, JSON values from cdk.json."""

from __future__ import annotations

from typing import Any

import pytest

from turnstile_cdk.settings import ContextKey, TurnstileSettings


def _from(context: dict[str, Any]) -> TurnstileSettings:
    return TurnstileSettings.from_context(context.get)


def test_defaults_are_production_defaults() -> None:
    settings = _from({})
    assert settings == TurnstileSettings()
    assert settings.stack_name == "Turnstile"
    assert settings.retain_tables is True
    assert settings.uses_jwt is False
    assert settings.powertools_layer_version is None


def test_cli_strings_are_parsed() -> None:
    settings = _from(
        {
            ContextKey.STACK_NAME: "TurnstileDev",
            ContextKey.RETAIN_TABLES: "false",
            ContextKey.JWT_ISSUER: "https://cognito-idp.eu-west-1.amazonaws.com/pool",
            ContextKey.JWT_AUDIENCE: "client-a, client-b",
            ContextKey.POWERTOOLS_LAYER_VERSION: "12",
            ContextKey.LOG_LEVEL: "debug",
            ContextKey.API_RATE_LIMIT: "20",
            ContextKey.API_BURST_LIMIT: "40",
            ContextKey.ALARM_EMAIL: "ops@example.com",
        }
    )
    assert settings == TurnstileSettings(
        stack_name="TurnstileDev",
        retain_tables=False,
        jwt_issuer="https://cognito-idp.eu-west-1.amazonaws.com/pool",
        jwt_audience=("client-a", "client-b"),
        powertools_layer_version=12,
        log_level="DEBUG",
        api_rate_limit=20,
        api_burst_limit=40,
        alarm_email="ops@example.com",
    )
    assert settings.uses_jwt


def test_cdk_json_values_are_accepted() -> None:
    settings = _from(
        {
            ContextKey.RETAIN_TABLES: True,
            ContextKey.JWT_AUDIENCE: ["a"],
            ContextKey.JWT_ISSUER: "https://issuer.example.com",
        }
    )
    assert settings.retain_tables is True
    assert settings.jwt_audience == ("a",)


@pytest.mark.parametrize(
    "context",
    [
        {ContextKey.JWT_ISSUER: "https://issuer.example.com"},  # audience missing
        {ContextKey.JWT_AUDIENCE: "a"},  # issuer missing
        {ContextKey.JWT_ISSUER: "http://issuer.example.com", ContextKey.JWT_AUDIENCE: "a"},
        {ContextKey.RETAIN_TABLES: "maybe"},
        {ContextKey.LOG_LEVEL: "LOUD"},
        {ContextKey.API_RATE_LIMIT: "0"},
        {ContextKey.POWERTOOLS_LAYER_VERSION: "0"},
    ],
)
def test_bad_options_fail_the_synth_with_a_reason(context: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _from(context)
