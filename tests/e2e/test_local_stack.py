"""End to end: producers (boto3 threads, the AWS CLI, the turnstile CLI) against
``turnstile local``; every signup decided; ``turnstile audit`` clean; a full replay of the
stream with ``turnstile worker --from-start`` changes nothing."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from typing import Any

import pytest

from tests.e2e.conftest import BIN, RunningStack
from turnstile.base.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE

pytestmark = pytest.mark.e2e

CAPACITIES = {"e2e-solo": 1, "e2e-trio": 3, "e2e-ten": 10, "e2e-big": 40}
PRODUCERS = 8
PER_PRODUCER = 40  # 320 signups from boto3
CLI_SIGNUPS = 4  # from the AWS CLI, while the producers write


def client(stack: RunningStack) -> Any:
    return stack.dynamodb(max_attempts=5)


def scan(c: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = c.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def produce(stack: RunningStack, producer: int, errors: list[BaseException]) -> None:
    """One producer: conditional puts into intake, as the data contract in docs/design.md says."""
    try:
        c = client(stack)
        rng = random.Random(producer)
        for i in range(PER_PRODUCER):
            event_id = rng.choice([*CAPACITIES, "e2e-nowhere"] if i % 13 == 0 else list(CAPACITIES))
            c.put_item(
                TableName=INTAKE_TABLE.name,
                Item={
                    "event_id": {"S": event_id},
                    "signup_id": {"S": f"p{producer}-{i}"},
                    "seats": {"N": str(rng.randint(1, 3))},
                    "submitted_at": {"S": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                    "attributes": {"M": {"producer": {"N": str(producer)}}},
                },
                ConditionExpression="attribute_not_exists(signup_id)",
            )
    except BaseException as exc:
        errors.append(exc)


#: This test's events: the stack is the session's, so other tests' signups may be in it.
OURS = {*CAPACITIES, "e2e-nowhere"}


def wait_all_decided(c: Any, expected: int, timeout: float = 180) -> list[dict[str, Any]]:
    """The decisions, one per key, once every intake record has one (a scan of pages taken
    while the processor writes may see one item twice and miss another: a count alone could
    be reached early), or whatever there is at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        decided = {
            (i["event_id"]["S"], i["signup_id"]["S"]): i
            for i in scan(c, MAIN_TABLE.name)
            if "status" in i and i["event_id"]["S"] in OURS
        }
        wanted = {
            (i["event_id"]["S"], i["signup_id"]["S"])
            for i in scan(c, INTAKE_TABLE.name)
            if i["event_id"]["S"] in OURS
        }
        if (len(decided) >= expected and wanted <= decided.keys()) or time.monotonic() > deadline:
            return list(decided.values())
        time.sleep(1)


def test_many_producers_every_signup_decided_audit_clean_replay_harmless(local_stack):
    stack = local_stack
    # GIVEN events of small capacities, created with the CLI
    for event_id, capacity in CAPACITIES.items():
        created = stack.turnstile("event", "create", event_id, "--capacity", str(capacity))
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["capacity"] == capacity

    # WHEN 8 producer threads and the AWS CLI write signups at the same time
    errors: list[BaseException] = []
    threads = [threading.Thread(target=produce, args=(stack, p, errors)) for p in range(PRODUCERS)]
    for t in threads:
        t.start()
    for i in range(CLI_SIGNUPS):
        item = {
            "event_id": {"S": list(CAPACITIES)[i % len(CAPACITIES)]},
            "signup_id": {"S": f"cli-{i}"},
            "seats": {"N": str(1 + i % 3)},
        }
        put = stack.aws(
            "dynamodb",
            "put-item",
            "--table-name",
            INTAKE_TABLE.name,
            "--item",
            json.dumps(item),
            "--condition-expression",
            "attribute_not_exists(signup_id)",
        )
        assert put.returncode == 0, put.stderr
    for t in threads:
        t.join()
    assert errors == []
    submitted = stack.turnstile("submit", "e2e-big", "via-cli", "--seats", "2")
    assert submitted.returncode == 0, submitted.stderr
    total = PRODUCERS * PER_PRODUCER + CLI_SIGNUPS + 1

    # THEN every signup gets exactly one decision
    c = client(stack)
    decided = wait_all_decided(c, total)
    intake = [i for i in scan(c, INTAKE_TABLE.name) if i["event_id"]["S"] in OURS]
    assert {(i["event_id"]["S"], i["signup_id"]["S"]) for i in intake} == {
        (d["event_id"]["S"], d["signup_id"]["S"]) for d in decided
    }
    assert len(decided) == total
    # and each event is filled to capacity or as far as its requests allowed
    by_reason: dict[str, int] = {}
    for d in decided:
        by_reason[d.get("reason", {}).get("S", "accepted")] = (
            by_reason.get(d.get("reason", {}).get("S", "accepted"), 0) + 1
        )
    assert by_reason.get("capacity_full", 0) > 0
    assert by_reason.get("unknown_event", 0) > 0

    # and a client polling with the CLI sees the final word
    status = stack.turnstile("status", "e2e-big", "via-cli", "--wait", "10")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] in {"ACCEPTED", "REJECTED"}

    # and the audit finds every invariant intact
    report = stack.turnstile("audit", "--json")
    assert report.returncode == 0, report.stdout + report.stderr
    body = json.loads(report.stdout)
    assert body["ok"] is True and body["totals"]["pending"] == 0
    for event in body["events"]:
        if event["event_id"] in CAPACITIES:
            assert event["seats_counted"] == event["taken"] <= event["capacity"]

    # WHEN the whole stream is replayed from the start by a second worker
    events = lambda: [i for i in scan(c, CONTROL_TABLE.name) if "capacity" in i]  # noqa: E731
    before = scan(c, MAIN_TABLE.name)
    events_before = events()
    replay = stack.turnstile(
        "worker",
        "--from-start",
        "--until-idle",
        "3",
        "--state-dir",
        str(stack.state_dir / "replay"),
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr
    delivered = int(replay.stdout.split(" records delivered")[0].rsplit(" ", 1)[-1])
    assert delivered >= total
    # THEN the decisions and the event items are exactly as they were
    after = scan(c, MAIN_TABLE.name)
    key = lambda i: (i["event_id"]["S"], i["signup_id"]["S"])  # noqa: E731
    assert sorted(after, key=key) == sorted(before, key=key)
    by_id = lambda i: i["event_id"]["S"]  # noqa: E731
    assert sorted(events(), key=by_id) == sorted(events_before, key=by_id)
    assert stack.turnstile("audit").returncode == 0


def test_status_of_an_unknown_signup_is_one_clear_line(local_stack):
    result = local_stack.turnstile("status", "e2e-nothing", "nobody")
    assert result.returncode == 2
    assert result.stderr.strip() == "turnstile: no signup 'nobody' for event 'e2e-nothing'"


def test_cli_errors_are_one_line_without_a_traceback(local_stack):
    env = dict(local_stack.env, AWS_ENDPOINT_URL="http://127.0.0.1:9")  # nothing listens
    result = subprocess.run(
        [str(BIN / "turnstile"), "event", "show", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("turnstile: ") and result.stderr.count("\n") == 1


def test_submit_and_status_through_the_http_api(local_stack):
    stack = local_stack
    assert stack.turnstile("event", "create", "e2e-api", "--capacity", "1").returncode == 0
    env_api = ["--api-url", stack.api_url]
    first = stack.turnstile("submit", "e2e-api", "first", *env_api)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["status"] == "PENDING"
    second = stack.turnstile("submit", "e2e-api", "second", "--seats", "1", *env_api)
    assert second.returncode == 0, second.stderr
    done = stack.turnstile("status", "e2e-api", "second", "--wait", "30", *env_api)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["status"], body["reason"]) == ("REJECTED", "capacity_full")
    # A different body for the same signup is a conflict, reported in one line
    clash = stack.turnstile("submit", "e2e-api", "first", "--seats", "2", *env_api)
    assert clash.returncode == 2 and clash.stderr.startswith("turnstile: API error 409")


def test_local_api_with_cors_lists_and_waits(tmp_path):
    """`turnstile local --cors-origin`: a browser's preflight is answered and replies name
    the origin; a client waiting for a decision gets it from the running worker, while
    another request is answered meanwhile; the lists show what happened."""
    import urllib.request

    from tests.e2e.conftest import running_local_stack
    from turnstile_tools.client import TurnstileClient

    origin = "http://localhost:3000"
    with running_local_stack(tmp_path, "--cors-origin", origin) as stack:
        preflight = urllib.request.Request(
            f"{stack.api_url}/events",
            method="OPTIONS",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        )
        with urllib.request.urlopen(preflight, timeout=10) as response:
            assert response.status == 204
            assert response.headers["Access-Control-Allow-Origin"] == origin
        read = urllib.request.Request(f"{stack.api_url}/", headers={"Origin": origin})
        with urllib.request.urlopen(read, timeout=10) as response:
            assert response.headers["Access-Control-Allow-Origin"] == origin
            assert json.loads(response.read())["openapi"] == "/openapi.json"

        client = TurnstileClient(stack.api_url)
        client.create_event("cors-gig", capacity=1)
        client.submit("cors-gig", "first")
        decided: dict[str, Any] = {}
        waiter = threading.Thread(
            target=lambda: decided.update(client.wait("cors-gig", "first", timeout_s=60))
        )
        waiter.start()
        assert client.get_event("cors-gig")["event_id"] == "cors-gig"  # not held up
        waiter.join(timeout=90)
        assert decided["status"] == "ACCEPTED"
        accepted = client.list_signups("cors-gig", status="ACCEPTED")
        assert [s["signup_id"] for s in accepted["signups"]] == ["first"]
        assert "cors-gig" in [e["event_id"] for e in client.list_events()["events"]]
