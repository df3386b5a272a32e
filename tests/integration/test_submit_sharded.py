"""Sharded events from the producer's side: ``turnstile event create --shards``, ``turnstile
submit``, ``status``, ``confirm``, ``signups list`` (in-process, on moto), and the client's
``intake_key`` for producers who write intake directly. Every signup lands under its
shard's key, and the stream processor, fed the intake stream, decides it there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.conftest import StreamReader
from tests.helpers import put_raw_intake
from turnstile.base.contract import MAX_SHARDS, STREAM_SOURCE, Status, shard_key, signup_key
from turnstile.handlers import stream as stream_handler
from turnstile.service import usecases
from turnstile.storage.store import SignupStore
from turnstile_tools import cli
from turnstile_tools.client import TurnstileClient, intake_key
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter


@pytest.fixture(autouse=True)
def fresh(aws):
    stream_handler._processor = None
    usecases.forget_known_shards()
    yield
    stream_handler._processor = None
    usecases.forget_known_shards()


def run(capsys, *argv: str) -> tuple[int, Any, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def decide(stream: StreamReader) -> None:
    records = stream.read_new()
    passed = [
        r for r in records if any(matches_filter(p, r) for p in STREAM_SOURCE.filter_patterns)
    ]
    if passed:
        event = json.loads(json.dumps({"Records": passed}))
        assert stream_handler.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}


def test_the_cli_creates_a_sharded_event_and_places_each_signup(
    capsys, store: SignupStore, stream: StreamReader
):
    # GIVEN a sharded event of 3 seats, created by the CLI, with holds
    code, event, _ = run(
        capsys,
        "event",
        "create",
        "fest",
        "--capacity",
        "3",
        "--shards",
        "4",
        "--hold-seconds",
        "600",
    )
    assert code == 0 and event["shards"] == 4
    assert store.get_event("fest").shards == 4
    # WHEN 8 signups are submitted through `turnstile submit`
    fans = [f"fan{i}" for i in range(8)]
    for sid in fans:
        code, body, _ = run(capsys, "submit", "fest", sid)
        assert code == 0 and body["event_id"] == "fest"
    # THEN each is under its own shard's key, none under the event's own id
    assert {i["signup_id"]: i["event_id"] for i in store.intake_items()} == {
        sid: signup_key("fest", sid, 4) for sid in fans
    }
    # AND the processor decides them: 3 held, 5 refused, read back by the event's own id
    decide(stream)
    statuses = {}
    for sid in fans:
        code, body, _ = run(capsys, "status", "fest", sid)
        assert code == 0 and body["event_id"] == "fest"
        statuses[sid] = body["status"]
    assert sorted(statuses.values()).count(Status.HELD) == 3
    held = next(sid for sid, status in statuses.items() if status == Status.HELD)
    # a confirm through the CLI reaches the held signup's shard
    code, body, _ = run(capsys, "confirm", "fest", held)
    assert code == 0 and body == {"event_id": "fest", "signup_id": held, "request": "confirm"}
    decide(stream)
    assert run(capsys, "status", "fest", held)[1]["status"] == Status.ACCEPTED
    # the listing has every signup once, the event's totals sum its shards
    code, page, _ = run(capsys, "signups", "list", "fest", "--limit", "100")
    assert code == 0 and sorted(s["signup_id"] for s in page["signups"]) == sorted(fans)
    assert {s["event_id"] for s in page["signups"]} == {"fest"}
    code, shown, _ = run(capsys, "event", "show", "fest")
    assert (shown["taken"], shown["status_counts"].get(Status.ACCEPTED)) == (3, 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shards", "0"], f"shards must be an integer from 1 to {MAX_SHARDS}"),
        (["--shards", "33"], f"shards must be an integer from 1 to {MAX_SHARDS}"),
        (["--shards", "2", "--waitlist", "-1"], "waitlist must be an integer from 0 to"),
    ],
)
def test_the_cli_refuses_bad_shards_in_one_line(capsys, store: SignupStore, argv, message):
    code, out, err = run(capsys, "event", "create", "bad", "--capacity", "5", *argv)
    assert code == 2 and out is None
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert store.get_event("bad") is None


def test_the_cli_refuses_shards_that_are_no_number_in_one_line(capsys):
    code, _, err = run(capsys, "event", "create", "bad", "--capacity", "5", "--shards", "x")
    assert code == 2 and "--shards" in err and "Traceback" not in err


def test_intake_key_is_the_documented_rule():
    # one shard: the event's own id
    assert intake_key("gig", "ada", 1) == "gig"
    # many: BLAKE2b-64 of the UTF-8 id, big-endian, modulo the shards, two digits
    for sid in ("ada", "bob", "zoë", "user-42"):
        digest = hashlib.blake2b(sid.encode("utf-8"), digest_size=8).digest()
        expected = f"gig#{int.from_bytes(digest, 'big') % 7:02d}"
        assert intake_key("gig", sid, 7) == expected == signup_key("gig", sid, 7)
    for bad in (0, MAX_SHARDS + 1):
        with pytest.raises(ValueError):
            intake_key("gig", "ada", bad)


def test_a_direct_producer_using_intake_key_is_decided_and_read_back(
    capsys, client, store: SignupStore, stream: StreamReader
):
    # GIVEN a sharded event, and a producer writing intake itself with intake_key
    assert run(capsys, "event", "create", "raw", "--capacity", "2", "--shards", "3")[0] == 0
    for sid in ("p1", "p2", "p3"):
        put_raw_intake(
            client,
            intake_key("raw", sid, 3),
            sid,
            seats={"N": "1"},
            submitted_at={"S": "2026-01-01T00:00:00Z"},
        )
    decide(stream)
    # THEN none is rejected invalid_request, and each reads back by the event's own id
    got = [run(capsys, "status", "raw", sid)[1] for sid in ("p1", "p2", "p3")]
    assert all(g["event_id"] == "raw" for g in got)
    assert sorted(g["status"] for g in got) == [Status.ACCEPTED, Status.ACCEPTED, Status.REJECTED]
    assert {g["reason"] for g in got} <= {None, "capacity_full"}
    # while a record under the event's own id is rejected, naming its key
    put_raw_intake(client, "raw", "p4", seats={"N": "1"}, submitted_at={"S": "2026-01-01"})
    decide(stream)
    wrong = store.get_decision("raw", "p4")
    assert wrong["reason"] == "invalid_request" and intake_key("raw", "p4", 3) in wrong["detail"]


def test_the_client_sends_shards_on_create():
    sent: list[tuple[str, str, Any]] = []

    class Recording(TurnstileClient):
        def _call(self, method: str, path: str, view: Any, body: Any = None, **_: Any) -> Any:
            sent.append((method, path, body))
            return None

    client = Recording("http://127.0.0.1:1")
    client.create_event("gig", 10, shards=4)
    client.create_event("flat", 10)
    assert sent == [
        ("POST", "/events", {"event_id": "gig", "capacity": 10, "shards": 4}),
        ("POST", "/events", {"event_id": "flat", "capacity": 10}),
    ]
    assert shard_key("gig", 3) == "gig#03"


def test_a_wait_polls_the_decision_in_the_signups_shard(capsys, store: SignupStore, stream):
    # GIVEN a pending signup of a sharded event
    assert run(capsys, "event", "create", "poll", "--capacity", "2", "--shards", "4")[0] == 0
    assert run(capsys, "submit", "poll", "late")[0] == 0
    now = [0.0]

    def sleep(seconds: float) -> None:
        # the processor decides during the first pause
        now[0] += seconds
        decide(stream)

    # WHEN the use case waits for its decision
    status = usecases.await_decision(store, "poll", "late", 5.0, sleep=sleep, clock=lambda: now[0])
    # THEN its poll of the shard's decision item finds it
    assert (status["event_id"], status["status"]) == ("poll", Status.ACCEPTED)
    assert now[0] < 1.0
