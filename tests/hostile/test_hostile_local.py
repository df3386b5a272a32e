"""Hostile intake through real processes: ``turnstile local`` as a user starts it, hostile
items and valid signups written with boto3 against its endpoint, every record decided,
``turnstile audit`` clean, the events intact, and the sweeper still running."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.conftest import RunningStack, running_local_stack
from tests.hostile.helpers import key, scan_raw
from turnstile.base.contract import INTAKE_TABLE, MAIN_TABLE

pytestmark = pytest.mark.e2e

CAPACITIES = {"hz-a": 5, "hz-b": 2, "hz-c": 20}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    with running_local_stack(tmp_path_factory.mktemp("hostile-local")) as running:
        yield running


def dynamodb(stack: RunningStack) -> Any:
    return stack.dynamodb(max_attempts=5)


def hostile_items() -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    stamp = {"S": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return [
        {**key("hz-a", "#EVENT"), "seats": {"N": "1"}, "submitted_at": stamp},
        {**key("hz-nowhere", "#EVENT"), "seats": {"N": "1"}},
        {**key("#sweeper", "#lease"), "seats": {"N": "1"}},
        {**key("#sweeper-runs", "x"), "seats": {"N": "1"}},
        {**key("hz-b", "naive"), "submitted_at": {"S": now.replace(tzinfo=None).isoformat()}},
        {**key("hz-c", "big"), "submitted_at": {"S": stamp["S"] + "x" * 300_000}},
        {**key("hz-a", "huge-seats"), "seats": {"N": "1e125"}},
        {**key("hz-a", "string-seats"), "seats": {"S": "1"}},
        {**key("hz-c", "bin"), "attributes": {"M": {"b": {"B": b"\x00\xff"}}}},
        {**key("hz-b", "ünï cödé with spaces"), "seats": {"N": "1"}},
        {**key("hz-c", "k" * 1024), "seats": {"N": "1"}},
        {**key("hz-a", "junk-redriven"), "seats": {"N": "1"}, "redriven_at": {"S": "junk"}},
    ]


def wait_all_decided(c: Any, timeout: float = 60) -> list[tuple[str, str]]:
    """Intake keys still without a decision once all have one, or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        undecided = []
        for item in scan_raw(c, INTAKE_TABLE.name):
            k = key(item["event_id"]["S"], item["signup_id"]["S"])
            decision = c.get_item(TableName=MAIN_TABLE.name, Key=k, ConsistentRead=True)
            if "status" not in decision.get("Item", {}):
                undecided.append((k["event_id"]["S"], k["signup_id"]["S"][:40]))
        if not undecided or time.monotonic() > deadline:
            return undecided
        time.sleep(1)


def test_hostile_items_through_the_local_stack(stack):
    c = dynamodb(stack)
    for event_id, capacity in CAPACITIES.items():
        created = stack.turnstile("event", "create", event_id, "--capacity", str(capacity))
        assert created.returncode == 0, created.stderr

    # GIVEN hostile items, then valid signups written after them
    for item in hostile_items():
        c.put_item(TableName=INTAKE_TABLE.name, Item=item)
    for i in range(30):
        event_id = list(CAPACITIES)[i % len(CAPACITIES)]
        c.put_item(
            TableName=INTAKE_TABLE.name,
            Item={
                **key(event_id, f"ok-{i}"),
                "seats": {"N": str(1 + i % 2)},
                "submitted_at": {"S": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
            },
            ConditionExpression="attribute_not_exists(signup_id)",
        )

    # THEN every intake record gets a decision
    assert wait_all_decided(c) == []

    # and the audit is clean
    audited = stack.turnstile("audit", "--json")
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert json.loads(audited.stdout)["totals"]["pending"] == 0

    # and each event is intact: its capacity, and taken equal to its accepted seats
    decisions = [i for i in scan_raw(c, MAIN_TABLE.name) if "status" in i]
    for event_id, capacity in CAPACITIES.items():
        shown = stack.turnstile("event", "show", event_id)
        assert shown.returncode == 0, shown.stderr
        event = json.loads(shown.stdout)
        accepted = [
            d
            for d in decisions
            if d["event_id"]["S"] == event_id and d["status"]["S"] == "ACCEPTED"
        ]
        seats = sum(int(d["seats"]["N"]) for d in accepted)
        assert (event["capacity"], event["state"]) == (capacity, "OPEN"), event
        assert (event["taken"], event["positions_given"]) == (seats, len(accepted)), event
        assert 0 < seats <= capacity

    # and the sweeper still takes its lease and completes a run (the stack's own sweeper
    # may hold the lease for a moment: a few tries)
    for _ in range(5):
        swept = stack.turnstile("sweep", "--min-age", "0", "--run-id", f"hz-{time.time_ns()}")
        statuses = [r["status"] for r in json.loads(swept.stdout or "[]")]
        if statuses != ["lease_busy"]:
            break
        time.sleep(1)
    assert swept.returncode == 0 and statuses == ["succeeded"], swept.stdout + swept.stderr
