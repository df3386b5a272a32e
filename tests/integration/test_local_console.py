"""The local stack's console sources: the decision hook of the worker's processor, and the
closing count of what the tables hold."""

from __future__ import annotations

import pytest

from tests.helpers import put_raw_intake
from turnstile.base.contract import MAIN_TABLE
from turnstile.handlers import stream as stream_handler
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.stack import DecisionStats, TableCounts, count_tables, counting_processor

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(autouse=True)
def fresh_processor():
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def test_the_hook_sees_each_decision_made_once_and_the_count_is_exact(aws, stream):
    client = aws.client("dynamodb")
    store = SignupStore(client, sleep=lambda _: None)
    store.create_event("gig", 1, NOW)
    for signup_id in ("a", "b"):
        put_raw_intake(client, "gig", signup_id, seats={"N": "1"}, submitted_at={"S": NOW})
    seen = []
    stats = DecisionStats()
    stream_handler._processor = counting_processor(store, stats, seen.append)
    records = stream.read_new()
    # WHEN a batch is decided, then delivered again (as a retry would)
    for _ in range(2):
        stream_handler.handler({"Records": records}, LocalLambdaContext())
    # THEN the hook saw each decision once, in order, with what the console prints
    assert [(d.event_id, d.decision.signup_id, d.decision.status) for d in seen] == [
        ("gig", "a", "ACCEPTED"),
        ("gig", "b", "REJECTED"),
    ]
    assert [d.submitted_at for d in seen] == [NOW, NOW]
    assert stats.decided == 2
    # GIVEN one more signup not yet decided, and b's decision item not yet written out
    # (only in the event's journal, as after a crash between commit and materialize)
    put_raw_intake(client, "gig", "c", seats={"N": "1"})
    client.delete_item(
        TableName=MAIN_TABLE.name, Key={"event_id": {"S": "gig"}, "signup_id": {"S": "b"}}
    )
    # THEN the count has b decided and c pending
    assert count_tables(10.0, session=aws) == TableCounts(events=1, decided=2, pending=1)


def test_a_count_over_its_budget_gives_up(aws):
    assert count_tables(-1.0, session=aws) is None


def test_a_hook_that_fails_does_not_fail_the_batch(aws, stream):
    client = aws.client("dynamodb")
    store = SignupStore(client, sleep=lambda _: None)
    store.create_event("gig", 1, NOW)
    put_raw_intake(client, "gig", "a", seats={"N": "1"})

    def broken(_: object) -> None:
        raise OSError("stdout is gone")

    stream_handler._processor = counting_processor(store, DecisionStats(), broken)
    response = stream_handler.handler({"Records": stream.read_new()}, LocalLambdaContext())
    # The decision is committed before the hook runs: the batch succeeded all the same.
    assert response == {"batchItemFailures": []}
    assert store.get_decision("gig", "a")["status"] == "ACCEPTED"


def test_the_local_worker_keeps_decisions_the_retention_it_is_given(aws, stream, monkeypatch):
    # The local worker's processor reads the same setting as the Lambda's
    monkeypatch.setenv("TURNSTILE_DECISION_RETENTION_DAYS", "7")
    client = aws.client("dynamodb")
    store = SignupStore(client, sleep=lambda _: None)
    store.create_event("gig", 1, NOW)
    # (an intake record gone long before: the decision's retention alone counts)
    put_raw_intake(
        client, "gig", "a", seats={"N": "1"}, submitted_at={"S": NOW}, expires_at={"N": "1"}
    )
    stream_handler._processor = counting_processor(store, DecisionStats())
    stream_handler.handler({"Records": stream.read_new()}, LocalLambdaContext())
    item = store.get_decision("gig", "a")
    assert item is not None
    from datetime import datetime

    decided = int(datetime.fromisoformat(item["decided_at"]).timestamp())
    assert item.get("expires_at") == decided + 7 * 86_400
