"""Logs name a signup by a keyed reference (HMAC-SHA-256 under the stack's log key), so a
log reader cannot check a guessed e-mail address against it; the key comes from the
environment (the local stack), or from the stack's secret, read once per process."""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterator

import pytest

from turnstile.base import personal_data
from turnstile.base.personal_data import LOG_KEY_ENV, LOG_KEY_SECRET_ENV, reset_log_key, signup_ref

EMAIL = "ada@example.com"


@pytest.fixture(autouse=True)
def fresh_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(LOG_KEY_ENV, raising=False)
    monkeypatch.delenv(LOG_KEY_SECRET_ENV, raising=False)
    reset_log_key()
    yield
    reset_log_key()


def keyed(key: str) -> str:
    message = f"gala/{EMAIL}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()[:16]


def test_a_reference_is_the_hmac_under_the_key_never_a_plain_hash(monkeypatch):
    monkeypatch.setenv(LOG_KEY_ENV, "k1")
    reference = signup_ref("gala", EMAIL)
    assert reference == keyed("k1")
    # whoever guesses the address cannot check it without the key
    assert reference != hashlib.sha256(f"gala/{EMAIL}".encode()).hexdigest()[:16]
    assert signup_ref("gala", EMAIL) == reference  # stable: log lines correlate
    assert signup_ref("other", EMAIL) != reference
    monkeypatch.setenv(LOG_KEY_ENV, "k2")
    reset_log_key()
    assert signup_ref("gala", EMAIL) == keyed("k2") != reference


def test_the_key_is_read_from_the_stacks_secret_once(aws, monkeypatch):
    secrets = aws.client("secretsmanager")
    arn = secrets.create_secret(Name="log-key", SecretString="from-the-secret")["ARN"]
    monkeypatch.setenv(LOG_KEY_SECRET_ENV, arn)
    assert signup_ref("gala", EMAIL) == keyed("from-the-secret")
    secrets.put_secret_value(SecretId=arn, SecretString="changed")
    assert signup_ref("gala", EMAIL) == keyed("from-the-secret")  # read once per process


def test_an_unreadable_secret_costs_the_correlation_never_the_request(aws, monkeypatch, caplog):
    monkeypatch.setenv(LOG_KEY_SECRET_ENV, "arn:aws:secretsmanager:us-east-1:1:secret:gone")
    with caplog.at_level(logging.WARNING, logger=personal_data.__name__):
        reference = signup_ref("gala", EMAIL)
    assert len(reference) == 16 and reference == signup_ref("gala", EMAIL)
    assert "log key secret unreadable" in caplog.text
