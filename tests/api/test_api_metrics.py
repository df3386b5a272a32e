"""The API handler's metrics: a request that counted something publishes one EMF document;
one that counted nothing (every read) publishes nothing and warns nothing."""

from __future__ import annotations

import json
import warnings

from tests.api.helpers import Invoke
from turnstile.handlers import api as api_handler


def emf_documents(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if '"_aws"' in line]


def test_a_write_publishes_its_count_and_a_read_publishes_nothing_without_a_warning(
    invoke: Invoke, monkeypatch, capsys
):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    capsys.readouterr()
    # WHEN an event is created: one document, with the count
    assert invoke("POST", "/events", {"event_id": "gig", "capacity": 1}).status == 201
    (document,) = emf_documents(capsys.readouterr().out)
    assert document["EventCreated"] == [1.0]
    assert document["service"] == "turnstile-api"
    # WHEN it is read (nothing to count): no document and no "No application metrics" warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert invoke("GET", "/events/gig").status == 200
    assert emf_documents(capsys.readouterr().out) == []


def test_with_metrics_disabled_counts_are_dropped_not_piled_up(invoke: Invoke, monkeypatch, capsys):
    # GIVEN metrics disabled (as on the local stack)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    capsys.readouterr()
    # WHEN more writes than Powertools keeps before it flushes on its own (100 values)
    assert invoke("POST", "/events", {"event_id": "gig", "capacity": 200}).status == 201
    for i in range(101):
        answer = invoke("POST", "/events/gig/signups", {"signup_id": f"s{i}"})
        assert answer.status == 202
        # THEN each request leaves nothing behind ...
        assert api_handler.metrics.metric_set == {}
    # ... and nothing is ever printed
    assert emf_documents(capsys.readouterr().out) == []
