"""Sharded events decided by the stream processor on moto (docs/hot-events.md).

A sharded event's signups are written under their shards' keys (``<event>#<kk>``); each shard
is decided as an event of its own, from the seats its pool dealt it, drawing more and taking
other shards' slack in its commit when it runs short. Through the real stream handler (its
deployed role, the event source's filter) and with one processor per shard.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from tests.helpers import decisions, ids_in, put_raw_intake
from turnstile.base.contract import (
    CONTROL_TABLE,
    STREAM_SOURCE,
    Attr,
    Reason,
    Status,
    shard_key,
    shard_of,
    signup_key,
)
from turnstile.base.errors import CapacityBelowTakenError
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key, from_item
from turnstile.storage.escrow import Escrow
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(autouse=True)
def fresh_processor(aws):
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def deliver(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    passed = [
        r for r in records if any(matches_filter(p, r) for p in STREAM_SOURCE.filter_patterns)
    ]
    return stream_handler.handler(json.loads(json.dumps({"Records": passed})), LocalLambdaContext())


def submit(client, event_id: str, shards: int, *signup_ids: str, key: str | None = None) -> None:
    """Producers writing each signup under its own shard's key (or under ``key``)."""
    for sid in signup_ids:
        where = key if key is not None else signup_key(event_id, sid, shards)
        put_raw_intake(client, where, sid, seats={"N": "1"}, submitted_at={"S": "2026-01-01"})


def statuses(client, event_id: str) -> Counter[tuple[str, str | None]]:
    return Counter(
        (item["status"]["S"], item.get("reason", {}).get("S"))
        for (key, _), item in decisions(client).items()
        if key == event_id or key.startswith(f"{event_id}#")
    )


def escrow_state(store: SignupStore, event_id: str, shards: int) -> tuple[int, int, list, int]:
    """(capacity, dealt, [(quota, taken)] per shard, seats given in all)."""
    pool, shares = Escrow(store).snapshot(event_id, shards)
    assert pool is not None
    return (
        pool.capacity,
        pool.dealt,
        [(s.quota, s.taken) for s in shares],
        sum(s.taken for s in shares),
    )


def test_a_sharded_event_gives_exactly_its_capacity_and_refuses_the_rest(client, store, stream):
    # GIVEN an event of 10 seats over 4 shards, and 40 signups spread over them
    store.create_event("drop", 10, NOW, shards=4)
    submit(client, "drop", 4, *(f"fan{i:02}" for i in range(40)))
    # WHEN the stream's records are decided, in batches of 7 as the event source may send
    records = stream.read_new()
    for start in range(0, len(records), 7):
        assert deliver(records[start : start + 7]) == {"batchItemFailures": []}
    # THEN exactly 10 seats were given and 30 refused capacity_full: none oversold, none left
    assert statuses(client, "drop") == {
        (Status.ACCEPTED, None): 10,
        (Status.REJECTED, Reason.CAPACITY_FULL): 30,
    }
    capacity, dealt, shares, given = escrow_state(store, "drop", 4)
    assert (capacity, dealt, given) == (10, 10, 10)
    assert sum(q for q, _ in shares) == dealt and all(t <= q for q, t in shares)
    assert audit(store).ok


def test_no_two_shards_give_the_same_position(client, store, stream):
    # GIVEN an event of 30 seats over 4 shards, and 40 signups spread over them
    store.create_event("seats", 30, NOW, shards=4)
    submit(client, "seats", 4, *(f"p{i:02}" for i in range(40)))
    records = stream.read_new()
    for start in range(0, len(records), 9):
        assert deliver(records[start : start + 9]) == {"batchItemFailures": []}
    given = {
        (key, sid): (int(item["position"]["N"]), int(item["sequence_number"]["S"]))
        for (key, sid), item in decisions(client).items()
        if key.startswith("seats#") and "position" in item
    }
    # THEN every seat given has a position of its own across the event ...
    positions = [p for p, _ in given.values()]
    assert len(positions) == 30 and len(set(positions)) == 30
    # ... shard k's are k + 1, k + 1 + 4, ..., in the order its records arrived
    for shard in range(4):
        mine = sorted(
            (seq, p) for (key, _), (p, seq) in given.items() if key == f"seats#{shard:02}"
        )
        assert all((p - 1 - shard) % 4 == 0 for _, p in mine), mine
        assert [p for _, p in mine] == sorted(p for _, p in mine)
    assert audit(store).ok


def test_a_shard_with_all_the_demand_takes_the_slack_the_others_were_dealt(client, store):
    # GIVEN 40 seats over 2 shards: shard 1 gets one signup (and is dealt a chunk of 5)
    store.create_event("gig", 40, NOW, shards=2)
    one = StreamProcessor(store, clock=lambda: NOW)
    zero = StreamProcessor(store, clock=lambda: NOW)
    lone = ids_in(1, 2, 1, "lone")
    assert _decide(one, shard_key("gig", 1), lone, 1) == [Status.ACCEPTED]
    assert escrow_state(store, "gig", 2)[2][1] == (5, 1)
    # WHEN shard 0 gets 50 signups: the pool has 35 left, shard 1 has 4 to spare
    crowd = ids_in(0, 2, 50, "crowd")
    got = _decide(zero, shard_key("gig", 0), crowd, 100)
    # THEN shard 0 gives the 35 and the 4 it takes, in arrival order, and refuses the rest
    assert got == [Status.ACCEPTED] * 39 + [Status.REJECTED] * 11
    _, dealt, shares, given = escrow_state(store, "gig", 2)
    assert (dealt, given) == (40, 40)
    assert shares == [(39, 39), (1, 1)]
    assert audit(store).ok


def test_a_take_whose_giver_moved_meanwhile_decides_again(client, store, monkeypatch):
    # GIVEN shard 1 with slack, and shard 0 about to take it
    store.create_event("gig", 16, NOW, shards=2)
    one = StreamProcessor(store, clock=lambda: NOW)
    zero = StreamProcessor(store, clock=lambda: NOW)
    _decide(one, shard_key("gig", 1), ids_in(1, 2, 1, "a"), 1)
    _decide(zero, shard_key("gig", 0), ids_in(0, 2, 14, "b"), 10)
    assert escrow_state(store, "gig", 2)[2] == [(14, 14), (2, 1)]
    # WHEN shard 1 gives its spare seat between shard 0's plan and its commit
    secure = store.secure

    def secured_then_giver_moves(*args):
        planned = secure(*args)
        if planned.takes:
            _decide(one, shard_key("gig", 1), ids_in(1, 2, 1, "late"), 20)
        return planned

    monkeypatch.setattr(store, "secure", secured_then_giver_moves)
    got = _decide(zero, shard_key("gig", 0), ids_in(0, 2, 2, "c"), 30)
    # THEN shard 0's commit conflicted, and decided again from what is left: nothing
    assert got == [Status.REJECTED, Status.REJECTED]
    assert escrow_state(store, "gig", 2)[2:] == ([(14, 14), (2, 2)], 16)


def test_shards_deciding_in_turn_never_oversell(client, store):
    # GIVEN 25 seats over 5 shards, a processor per shard and 20 signups per shard
    store.create_event("gig", 25, NOW, shards=5)
    processors = [StreamProcessor(store, clock=lambda: NOW) for _ in range(5)]
    waves = [ids_in(k, 5, 20, f"s{k}-") for k in range(5)]
    # WHEN the shards decide their signups in small batches, in turn
    got: Counter[str] = Counter()
    seq = itertools.count(1)
    for wave in range(10):
        for k in (wave % 5, (wave + 2) % 5, (wave + 4) % 5, (wave + 1) % 5, (wave + 3) % 5):
            ids = waves[k][wave * 2 : wave * 2 + 2]
            got.update(_decide(processors[k], shard_key("gig", k), ids, next(seq) * 10))
    # THEN exactly the capacity was given, the rest refused capacity_full
    assert got == {Status.ACCEPTED: 25, Status.REJECTED: 75}
    _, dealt, shares, given = escrow_state(store, "gig", 5)
    assert given == 25 and sum(q for q, _ in shares) == dealt <= 25
    assert audit(store).ok


def test_a_signup_under_another_shard_or_the_events_own_id_is_rejected_naming_its_key(
    client, store, stream
):
    store.create_event("gig", 5, NOW, shards=4)
    sid = "wanderer"
    owner = shard_of(sid, 4)
    wrong = shard_key("gig", (owner + 1) % 4)
    submit(client, "gig", 4, sid, key=wrong)
    submit(client, "gig", 4, "plain", key="gig")
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    items = decisions(client)
    for key, signup, right in (
        (wrong, sid, shard_key("gig", owner)),
        ("gig", "plain", shard_key("gig", shard_of("plain", 4))),
    ):
        item = items[(key, signup)]
        assert (item["status"]["S"], item["reason"]["S"]) == (
            Status.REJECTED,
            Reason.INVALID_REQUEST,
        )
        assert f"belongs under event_id {right}" in item["detail"]["S"]
    # the event's own item is never committed to: it stays the pool
    pool = from_item(client.get_item(TableName=CONTROL_TABLE.name, Key=event_key("gig"))["Item"])
    assert Attr.JOURNAL not in pool and Attr.VERSION not in pool
    assert escrow_state(store, "gig", 4)[3] == 0


@pytest.mark.parametrize(
    "key",
    ["gig#3", "gig#32", "gig#99", "gig##00", "gig#00#00", "nope#00", "gig#-1"],
)
def test_keys_that_name_no_shard_are_rejected_and_never_reach_the_pool(client, store, stream, key):
    store.create_event("gig", 5, NOW, shards=4)
    submit(client, "gig", 4, "x", key=key)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    item = decisions(client)[(key, "x")]
    assert item["status"]["S"] == Status.REJECTED
    assert item["reason"]["S"] in (Reason.INVALID_REQUEST, Reason.UNKNOWN_EVENT)
    assert escrow_state(store, "gig", 4)[:2] == (5, 0)


def test_an_unsharded_event_is_written_as_before(client, store):
    store.create_event("plain", 5, NOW)
    store.create_event("split", 5, NOW, shards=3)
    items = {
        (i["pk"]["S"]): i
        for i in client.scan(TableName=CONTROL_TABLE.name)["Items"]
        if i["pk"]["S"].startswith("EVENT#")
    }
    assert sorted(items) == [
        "EVENT#plain",
        "EVENT#split",
        "EVENT#split#00",
        "EVENT#split#01",
        "EVENT#split#02",
    ]
    assert sorted(items["EVENT#plain"]) == [
        "capacity",
        "created_at",
        "event_id",
        "pk",
        "sk",
        "state",
    ]
    assert items["EVENT#split"]["shards"] == {"N": "3"}
    assert items["EVENT#split#01"]["capacity"] == {"N": "0"}
    assert items["EVENT#split#01"]["event_id"] == {"S": "split#01"}


def _decide(
    processor: StreamProcessor, key: str, signup_ids: Sequence[str], first_seq: int
) -> list[str]:
    """Decide ``signup_ids`` under ``key`` as one batch; their statuses, in order."""
    records = [
        StreamRecord(
            str(first_seq + i),
            "INSERT",
            {"event_id": key, "signup_id": sid},
            {"event_id": key, "signup_id": sid, "seats": 1, "submitted_at": "2026-01-01"},
        )
        for i, sid in enumerate(signup_ids)
    ]
    result = processor.process(records)
    assert not result.failures and not result.parked_events, result
    by_id = {d.decision.signup_id: d.decision.status for d in result.decided}
    return [by_id[sid] for sid in signup_ids]


def test_a_close_closes_every_shard_at_once(client, store):
    # GIVEN a sharded event with seats left in its pool and in a shard
    store.create_event("gig", 20, NOW, shards=3)
    processors = [StreamProcessor(store, clock=lambda: NOW) for _ in range(3)]
    assert _decide(processors[0], shard_key("gig", 0), ids_in(0, 3, 1, "a"), 1) == [Status.ACCEPTED]
    # WHEN the organizer closes it
    record, closed = store.close_event("gig")
    assert closed and record is not None and record.event.state == "CLOSED"
    # THEN no shard gives a seat any more, the one holding slack included
    for k in range(3):
        got = _decide(processors[k], shard_key("gig", k), ids_in(k, 3, 2, "late"), 10 * (k + 1))
        assert got == [Status.REJECTED, Status.REJECTED]
    reasons = statuses(client, "gig")
    assert reasons[(Status.REJECTED, Reason.EVENT_CLOSED)] == 6
    # and a second close says it was closed already
    assert store.close_event("gig")[1] is False


def test_a_sharded_events_capacity_goes_down_to_what_was_dealt_and_up_to_more_seats(client, store):
    store.create_event("gig", 16, NOW, shards=2)
    zero = StreamProcessor(store, clock=lambda: NOW)
    _decide(zero, shard_key("gig", 0), ids_in(0, 2, 1, "a"), 1)
    dealt = escrow_state(store, "gig", 2)[1]
    assert dealt == 2  # a chunk: 16 / (2 shards * 4)
    with pytest.raises(CapacityBelowTakenError, match="2 seats dealt to its shards"):
        store.update_capacity("gig", 1)
    assert store.update_capacity("gig", 2).event.capacity == 2
    # one seat was left in shard 0's quota: the next signup takes it, the one after is refused
    got = _decide(zero, shard_key("gig", 0), ids_in(0, 2, 2, "b"), 10)
    assert got == [Status.ACCEPTED, Status.REJECTED]
    # raised again: the shards draw the new seats
    store.update_capacity("gig", 5)
    got = _decide(zero, shard_key("gig", 0), ids_in(0, 2, 4, "c"), 20)
    assert got == [Status.ACCEPTED] * 3 + [Status.REJECTED]
    assert escrow_state(store, "gig", 2)[3] == 5
    assert audit(store).ok


def test_the_audits_totals_count_a_sharded_event_once(client, store):
    store.create_event("gig", 4, NOW, shards=2)
    store.create_event("plain", 3, NOW)
    zero = StreamProcessor(store, clock=lambda: NOW)
    _decide(zero, shard_key("gig", 0), ids_in(0, 2, 3, "a"), 1)
    _decide(zero, "plain", ["p1", "p2"], 10)
    report = audit(store)
    assert report.ok
    totals = report.totals
    assert (totals["events"], totals["taken"]) == (2, 5)
    assert totals["status_counts"] == {"ACCEPTED": 5}


def test_a_big_signup_that_fits_with_another_shards_slack_is_given_its_seats(client, store):
    # GIVEN 20 seats over 2 shards: shard 1 gave 1 of the 3 it was dealt (a chunk)
    store.create_event("gig", 20, NOW, shards=2)
    one = StreamProcessor(store, clock=lambda: NOW)
    zero = StreamProcessor(store, clock=lambda: NOW)
    _decide(one, shard_key("gig", 1), ids_in(1, 2, 1, "a"), 1)
    assert escrow_state(store, "gig", 2)[2] == [(0, 0), (3, 1)]
    # WHEN shard 0 gets a signup of 19 seats: more than the pool's 17, as many as are left
    big = ids_in(0, 2, 1, "big")[0]
    record = StreamRecord(
        "10",
        "INSERT",
        {"event_id": shard_key("gig", 0), "signup_id": big},
        {"event_id": shard_key("gig", 0), "signup_id": big, "seats": 19},
    )
    result = zero.process([record])
    # THEN it is given them: the pool's 17 drawn, shard 1's 2 taken in the commit
    assert [d.decision.status for d in result.decided] == [Status.ACCEPTED]
    assert escrow_state(store, "gig", 2)[1:] == (20, [(19, 19), (1, 1)], 20)
    assert audit(store).ok
