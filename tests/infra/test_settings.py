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
    assert (settings.signup_rate_limit, settings.signup_burst_limit) == (500, 1000)
    assert (settings.read_rate_limit, settings.read_burst_limit) == (1000, 2000)
    assert (settings.wait_rate_limit, settings.wait_burst_limit) == (50, 100)
    assert settings.intake_retention_days == 30
    assert settings.decision_retention_days == 365  # decisions expire a year on
    assert settings.processor_reserved_concurrency == 10
    assert settings.sweeper_reserved_concurrency == 1
    assert settings.api_reserved_concurrency == 100
    assert settings.waiter_reserved_concurrency == 50
    assert settings.due_holds_reserved_concurrency == 1
    assert settings.retention_environment == {
        "TURNSTILE_INTAKE_RETENTION_DAYS": "30",
        "TURNSTILE_DECISION_RETENTION_DAYS": "365",
    }
    assert settings.api_cors_origins == ()  # no CORS unless asked for


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
            ContextKey.SIGNUP_RATE_LIMIT: "5",
            ContextKey.SIGNUP_BURST_LIMIT: "6",
            ContextKey.READ_RATE_LIMIT: "7",
            ContextKey.READ_BURST_LIMIT: "8",
            ContextKey.WAIT_RATE_LIMIT: "3",
            ContextKey.WAIT_BURST_LIMIT: "4",
            ContextKey.INTAKE_RETENTION_DAYS: "14",
            ContextKey.DECISION_RETENTION_DAYS: "365",
            ContextKey.PROCESSOR_RESERVED_CONCURRENCY: "none",
            ContextKey.SWEEPER_RESERVED_CONCURRENCY: "0",
            ContextKey.API_RESERVED_CONCURRENCY: "25",
            ContextKey.WAITER_RESERVED_CONCURRENCY: "none",
            ContextKey.DUE_HOLDS_RESERVED_CONCURRENCY: "none",
            ContextKey.API_CORS_ORIGINS: "https://app.example.com, http://localhost:3000",
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
        signup_rate_limit=5,
        signup_burst_limit=6,
        read_rate_limit=7,
        read_burst_limit=8,
        wait_rate_limit=3,
        wait_burst_limit=4,
        intake_retention_days=14,
        decision_retention_days=365,
        processor_reserved_concurrency=None,
        sweeper_reserved_concurrency=None,
        api_reserved_concurrency=25,
        waiter_reserved_concurrency=None,
        due_holds_reserved_concurrency=None,
        api_cors_origins=("https://app.example.com", "http://localhost:3000"),
    )
    assert settings.uses_jwt
    assert settings.retention_environment == {
        "TURNSTILE_INTAKE_RETENTION_DAYS": "14",
        "TURNSTILE_DECISION_RETENTION_DAYS": "365",
    }


def test_cdk_json_values_are_accepted() -> None:
    settings = _from(
        {
            ContextKey.RETAIN_TABLES: True,
            ContextKey.JWT_AUDIENCE: ["a"],
            ContextKey.JWT_ISSUER: "https://issuer.example.com",
            ContextKey.API_CORS_ORIGINS: ["*"],
        }
    )
    assert settings.retain_tables is True
    assert settings.jwt_audience == ("a",)
    assert settings.api_cors_origins == ("*",)


def test_cdk_json_numbers_and_none_are_accepted() -> None:
    settings = _from(
        {
            ContextKey.DECISION_RETENTION_DAYS: 90,
            ContextKey.PROCESSOR_RESERVED_CONCURRENCY: 0,
            ContextKey.SWEEPER_RESERVED_CONCURRENCY: 2,
        }
    )
    assert settings.decision_retention_days == 90
    assert settings.processor_reserved_concurrency is None
    assert settings.sweeper_reserved_concurrency == 2
    assert _from({ContextKey.DECISION_RETENTION_DAYS: "none"}).decision_retention_days is None


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
        {ContextKey.SIGNUP_RATE_LIMIT: "0"},
        {ContextKey.READ_BURST_LIMIT: "none"},
        {ContextKey.INTAKE_RETENTION_DAYS: "0"},
        {ContextKey.INTAKE_RETENTION_DAYS: "none"},
        {ContextKey.DECISION_RETENTION_DAYS: "0"},  # not "keep": it would read as "delete"
        {ContextKey.PROCESSOR_RESERVED_CONCURRENCY: "-1"},
        {ContextKey.SWEEPER_RESERVED_CONCURRENCY: "one"},
        {ContextKey.API_CORS_ORIGINS: "https://app.example.com/"},  # a path, not an origin
        {ContextKey.API_CORS_ORIGINS: "app.example.com"},  # no scheme
        {ContextKey.API_CORS_ORIGINS: "https://*.example.com"},
        {ContextKey.ADMIN_PRINCIPALS: "ops-team"},  # no ARN
        {ContextKey.CONFINED_PRODUCERS: "shop-a=shop-a-*"},  # no JSON
        {ContextKey.CONFINED_PRODUCERS: '{"shop-a": []}'},  # no events
        {ContextKey.CONFINED_PRODUCERS: '{"shop-a": ["shop a"]}'},  # no id
        {ContextKey.CONFINED_PRODUCERS: ["shop-a-*"]},  # no names
    ],
)
def test_bad_options_fail_the_synth_with_a_reason(context: dict[str, Any]) -> None:
    key = next(iter(context))
    with pytest.raises(ValueError, match=key):
        _from(context)


@pytest.mark.parametrize("days", ["30", "10"])
def test_decisions_must_outlive_intake_records(days: str) -> None:
    """A decision deleted before its intake record makes the record look undecided: the
    sweeper would re-emit it and the processor decide it a second time."""
    with pytest.raises(ValueError, match=ContextKey.DECISION_RETENTION_DAYS):
        _from({ContextKey.DECISION_RETENTION_DAYS: days})
    assert _from({ContextKey.DECISION_RETENTION_DAYS: "31"}).decision_retention_days == 31


def test_admins_and_confined_producers_from_cli_strings_and_cdk_json() -> None:
    text = '{"shop-a": ["shop-a-*", "gala"], "shop-b": ["shop-b-*"]}'
    for producers in (text, {"shop-a": ["shop-a-*", "gala"], "shop-b": ["shop-b-*"]}):
        settings = _from(
            {
                ContextKey.CONFINED_PRODUCERS: producers,
                ContextKey.ADMIN_PRINCIPALS: "arn:aws:iam::1:role/ops-*, arn:aws:iam::1:user/x",
            }
        )
        assert settings.confined_producers == (
            ("shop-a", ("shop-a-*", "gala")),
            ("shop-b", ("shop-b-*",)),
        )
        assert settings.admin_principals == ("arn:aws:iam::1:role/ops-*", "arn:aws:iam::1:user/x")
