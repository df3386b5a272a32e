"""The metrics the alarms watch, as the handlers emit them (EMF on stdout), under the names
and the one dimension the stack's alarms use (tests/infra/test_monitoring.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.helpers import FaultyClient, put_raw_intake
from turnstile.handlers import stream as stream_handler
from turnstile.handlers import sweeper as sweeper_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"
TICK = {"scheduled_time": "2026-11-21T22:07:00Z"}


class Context:
    aws_request_id = "req-1"
    function_name = "sweeper"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sweeper"


@pytest.fixture
def emitted(monkeypatch, capsys):
    """Returns the metric values (name -> values) printed since the last call."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    # Every Metrics of a process shares one metric set, and a flush with metrics disabled
    # (as the other tests run the handlers) leaves its values there: a handler run earlier
    # on this worker would add its counts to this test's first flush.
    sweeper_handler.metrics.clear_metrics()
    capsys.readouterr()

    def read() -> dict[str, list[float]]:
        values: dict[str, list[float]] = {}
        for line in capsys.readouterr().out.splitlines():
            if '"_aws"' not in line:
                continue
            document = json.loads(line)
            (directive,) = document["_aws"]["CloudWatchMetrics"]
            # What the alarms select on: namespace Turnstile, one dimension, service.
            assert directive["Namespace"] == "Turnstile"
            assert directive["Dimensions"] == [["service"]]
            assert document["service"] == "turnstile"
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                values.setdefault(metric["Name"], []).extend(
                    value if isinstance(value, list) else [value]
                )
        return values

    return read


def test_a_succeeded_sweep_counts_once_and_a_duplicate_tick_not_again(store, emitted):
    sweeper_handler.handler(TICK, Context())
    assert emitted()["SweepSucceeded"] == [1.0]
    sweeper_handler.handler(TICK, Context())  # already_ran: the same tick delivered twice
    assert "SweepSucceeded" not in emitted()


def test_a_sweep_that_cannot_take_the_lease_does_not_count(store, emitted):
    assert Ledger.beside(store).acquire_lease("someone-else", 600, time.time()) is not None
    result = sweeper_handler.handler(TICK, Context())
    assert [run["status"] for run in result["runs"]] == ["lease_busy"]
    assert "SweepSucceeded" not in emitted()


def test_a_failed_sweep_does_not_count(store, emitted, monkeypatch):
    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("scan failed")

    monkeypatch.setattr("turnstile.jobs.sweeper.find_undecided", broken)
    with pytest.raises(RuntimeError, match="failed"):
        sweeper_handler.handler(TICK, Context())
    metrics = emitted()
    assert "SignupReEmitted" in metrics  # the run's metrics were flushed all the same
    assert "SweepSucceeded" not in metrics


def test_a_failed_event_group_is_counted(client, store, stream, emitted):
    store.create_event("A", 5, NOW)
    store.create_event("B", 5, NOW)
    for event_id in ("A", "B"):
        put_raw_intake(client, event_id, "u0", seats={"N": "1"}, submitted_at={"S": NOW})

    def fault(operation: str, kwargs: dict[str, Any]) -> str | None:
        # A's commits fail, and so does parking it (the control table's batch writes): the
        # group can neither be decided nor parked, so it fails back to the event source.
        key = kwargs.get("Key", {}).get("pk", {}).get("S")
        if key == "EVENT#A" and operation == "update_item":
            return "ProvisionedThroughputExceededException"
        if operation == "batch_write_item" and store.control_table in kwargs["RequestItems"]:
            return "ProvisionedThroughputExceededException"
        return None

    stream_handler._processor = StreamProcessor(
        SignupStore(FaultyClient(client, fault), sleep=lambda _: None)
    )
    try:
        response = stream_handler.handler({"Records": stream.read_new()}, LocalLambdaContext())
    finally:
        stream_handler._processor = None
    assert len(response["batchItemFailures"]) == 1
    assert emitted()["GroupFailed"] == [1.0]
