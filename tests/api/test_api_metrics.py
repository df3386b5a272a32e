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


def test_two_local_instances_at_once_each_publish_their_own_count(store, monkeypatch, capsys):
    """The local API serves concurrent requests with instances that are threads of one
    process (``new_instance``): each request's document carries its own count. (Powertools
    keeps what is counted in dicts every ``Metrics`` of a process shares: the first flush
    published both counts, and the second published nothing.)"""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tests.api.helpers import v2_event
    from turnstile_tools.local.context import LocalLambdaContext

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    both_counted = threading.Barrier(2, timeout=30)
    publish = api_handler.publish_metrics

    def after_both_counted() -> None:
        both_counted.wait()
        publish()

    monkeypatch.setattr(api_handler, "publish_metrics", after_both_counted)
    instances = [api_handler.new_instance(lambda: store) for _ in range(2)]
    capsys.readouterr()
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = [
            pool.submit(
                instance,
                v2_event("POST", "/events", {"event_id": f"gig{n}", "capacity": 1}),
                LocalLambdaContext.api(),
            )
            for n, instance in enumerate(instances)
        ]
        assert [a.result(timeout=60)["statusCode"] for a in answers] == [201, 201]
    documents = emf_documents(capsys.readouterr().out)
    assert [d["EventCreated"] for d in documents] == [[1.0], [1.0]], documents
    assert all(d["service"] == "turnstile-api" for d in documents)
