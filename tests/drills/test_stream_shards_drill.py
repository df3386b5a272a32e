"""The worker's emulated stream shards (``--stream-shards N``) as an operator runs them:
``turnstile worker --stream-shards N`` subprocesses against a real ``turnstile local
--no-worker`` (``tests.drills.test_fault_drills.Drill``), SIGKILLed and restarted with other
shard counts, a stuck lane, and a whole ``turnstile local --stream-shards 4`` with holds,
requests, waitlists and closes. Minutes of subprocesses: run by ``make drills``
(``TURNSTILE_DRILL_SCALE`` 2 or more), not by ``make test``, which runs the lanes' own
attacks (tests/hostile/test_stream_shards_attacks.py). A bug still open is an
``xfail(strict=True)`` naming its cause.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.drills.test_fault_drills import SCALE, Drill, ask, worker_summary
from turnstile.base.contract import (
    CONTROL_TABLE,
    INTAKE_TABLE,
    MAIN_TABLE,
    signup_key,
)


def until(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.02)


EVENTS: dict[str, dict[str, int]] = {
    "k-plain": {"capacity": 40},
    "k-tiny": {"capacity": 2},
    "k-hold": {"capacity": 12, "waitlist": 8, "hold_seconds": 300},
    "k-shard": {"capacity": 24, "shards": 4, "hold_seconds": 300},
}


pytestmark = pytest.mark.skipif(
    SCALE < 2, reason="minutes of worker subprocesses: make drills (TURNSTILE_DRILL_SCALE >= 2)"
)


@pytest.fixture
def drill(tmp_path) -> Iterator[Drill]:
    d = Drill(tmp_path)
    try:
        yield d
    finally:
        d.close()


def create(drill: Drill, events: dict[str, dict[str, int]]) -> None:
    for event_id, options in events.items():
        args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
        done = drill.turnstile("event", "create", event_id, *args)
        assert done.returncode == 0, done.stderr


def write_signups(c: Any, events: dict[str, dict[str, int]], prefix: str, count: int) -> None:
    rng = random.Random(prefix)
    for i in range(count):
        event_id = list(events)[i % len(events)]
        sid = f"{prefix}-{i}"
        shards = events[event_id].get("shards", 1)
        c.put_item(
            TableName=INTAKE_TABLE.name,
            Item={
                "event_id": {"S": signup_key(event_id, sid, shards)},
                "signup_id": {"S": sid},
                "seats": {"N": str(rng.randint(1, 2))},
            },
            ConditionExpression="attribute_not_exists(signup_id)",
        )


def unanswered(drill: Drill) -> list[tuple[str, str]]:
    """Intake items whose requests outnumber the ones their decision answered."""
    intake = drill.scan(INTAKE_TABLE.name)
    decided = drill.decisions()
    return [
        k
        for k, i in intake.items()
        if int(i.get("request_count", {}).get("N", "0"))
        > int(decided.get(k, {}).get("request_count", {}).get("N", "0"))
    ]


def first(item: dict[str, Any] | None) -> Any:
    """A first decision: the record it decided, when, its status then (the first move's
    ``from``, if it moved since) and a position given then (a hold may move on later, a
    waitlisted signup be promoted to a position; these never change)."""
    if item is None:
        return None
    history = item.get("history", {}).get("L", [])
    status = history[0]["M"]["from"]["S"] if history else item["status"]["S"]
    position = item.get("position") if status in ("HELD", "ACCEPTED") else None
    return item["sequence_number"], item["decided_at"], status, position


def seated(drill: Drill) -> dict[str, int]:
    """Seats held or accepted per event (a sharded event's shards summed)."""
    seats: dict[str, int] = {}
    for (key, _), d in drill.decisions().items():
        if d["status"]["S"] in ("HELD", "ACCEPTED"):
            event_id = key.split("#")[0]
            seats[event_id] = seats.get(event_id, 0) + int(d["seats"]["N"])
    return seats


def run_worker(drill: Drill, name: str, *args: str, env: dict[str, str] | None = None):
    """``turnstile worker --state-dir <name> --until-idle 3 ARGS``: its closing stats."""
    done = drill.turnstile(
        "worker", "--state-dir", str(drill.tmp / name), "--until-idle", "3", *args, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return worker_summary(done.stdout), done.stdout + done.stderr


def test_sigkill_and_restart_with_other_shard_counts_skips_and_changes_nothing(drill):
    """Workers on ONE state dir (so a checkpoint that skipped a record would leave it
    undecided), SIGKILLed once deciding, restarted as 4, 1, 8 and 4 stream shards, with a
    wave of signups before each and holders' requests mid-way; a last one (2 shards)
    finishes from the same checkpoint."""
    create(drill, EVENTS)
    c = drill.producer_client()
    rng = random.Random(825)
    snapshot: dict[tuple[str, str], dict[str, Any]] = {}
    asked = 0
    behind = 0
    for wave, shards in enumerate(("4", "1", "8", "4")):
        write_signups(c, EVENTS, f"w{wave}", 80)
        if wave == 2:  # holders confirm or cancel, while workers keep being killed
            for key, d in drill.decisions().items():
                if d["status"]["S"] == "HELD":
                    ask(c, key, "confirm" if asked % 3 else "cancel")
                    asked += 1
        drill.kill_once_deciding("w", rng, env={"TURNSTILE_STREAM_SHARDS": shards})
        decided = drill.decisions().values()
        last = max(int(d["sequence_number"]["S"]) for d in decided)
        behind += last > drill.checkpoint("w")  # killed with decisions past its checkpoint
        if wave == 1:
            snapshot = drill.decisions()
    # the kills landed with decisions past the checkpoint: each restart was handed again
    # records already decided, by other lanes than decided them
    assert behind >= 1, behind
    stats, output = run_worker(drill, "w", "--stream-shards", "2")
    # THEN nothing was skipped: the same checkpoint's worker left nothing undecided ...
    assert drill.undecided() == set()
    assert unanswered(drill) == []
    # ... no first decision changed, nothing lost, doubled or oversold
    final = drill.decisions()
    assert snapshot and asked
    changed = {
        str(k): (v, final.get(k)) for k, v in snapshot.items() if first(final[k]) != first(v)
    }
    assert changed == {}, json.dumps(changed, indent=1)[:3000]
    figures = drill.figures(4 * 80)
    assert (figures["lost"], figures["doubled"]) == (0, 0), figures
    for event_id, taken in seated(drill).items():
        assert taken <= EVENTS[event_id]["capacity"], (event_id, taken)
    assert seated(drill)["k-tiny"] == 2 and seated(drill)["k-plain"] == 40
    # ... no failure anywhere: no group failed, nothing sent to the on-failure queue
    assert (stats["failed_groups"], stats["sent_to_failure_destination"]) == (0, 0), stats
    assert '"level":"ERROR"' not in drill.worker_log("w") + output
    drill.audit_clean()


def test_a_stuck_lane_goes_to_the_on_failure_queue_and_is_redriven_while_others_decide(drill):
    """One event's partition throttled on every call (TURNSTILE_FAULT_STUCK_EVENT): its
    lane's batches exhaust their retries and go to the on-failure queue, the checkpoint
    passes them only then, and every other event is decided meanwhile; a healthy worker on
    the same checkpoint and a redrive get the stuck ones decided."""
    events = {"f-stuck": {"capacity": 5}, **{f"f-{n}": {"capacity": 20} for n in "abc"}}
    create(drill, events)
    c = drill.producer_client()
    write_signups(c, {"f-stuck": {}}, "stuck", 3)
    write_signups(c, {k: v for k, v in events.items() if k != "f-stuck"}, "ok", 90)
    faults = {"TURNSTILE_FAULT_STUCK_EVENT": "f-stuck", "TURNSTILE_STORE_MAX_ATTEMPTS": "2"}
    stats, _ = run_worker(drill, "w", "--stream-shards", "4", env=faults)
    # THEN the stuck lane's records went to the on-failure queue, the others were decided
    assert stats["sent_to_failure_destination"] >= 3, stats
    assert {k[0] for k in drill.undecided()} == {"f-stuck"}
    last = max(int(d["sequence_number"]["S"]) for d in drill.decisions().values())
    assert drill.checkpoint("w") >= last  # past everything: as Lambda after an on-failure
    # WHEN the throttling is over, a worker (same checkpoint) runs and the queue is redriven
    worker = drill.start_worker("w", "--stream-shards", "4")
    redrive = drill.turnstile("redrive", "--wait", "60")
    assert redrive.returncode == 0, redrive.stdout + redrive.stderr
    until(lambda: not drill.undecided(), "the stuck records decided", 60)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    after = worker_summary(drill.worker_log("w"))
    assert after["sent_to_failure_destination"] == 0, after
    seats = seated(drill)
    assert seats.pop("f-stuck") <= 5 and seats == {"f-a": 20, "f-b": 20, "f-c": 20}, seats
    drill.audit_clean()


def test_the_worker_says_when_a_lane_sends_a_batch_to_the_on_failure_queue(drill):
    """It never did: Powertools' SuppressFilter('turnstile'), put on the root handler by
    the stream handler's Logger, dropped every record whose logger name contains
    'turnstile' (turnstile_tools.*); the worker's own loggers have a handler of their own
    now (in make test: tests/e2e/test_worker_logs.py)."""
    create(drill, {"age": {"capacity": 5}})
    write_signups(drill.producer_client(), {"age": {}}, "old", 4)
    time.sleep(3)  # the records are older than the (drill's) maximum record age of 1 s
    stats, output = run_worker(
        drill, "w", "--stream-shards", "4", env={"TURNSTILE_MAX_RECORD_AGE_S": "1"}
    )
    assert stats["sent_to_failure_destination"] == 4, stats
    assert "on-failure destination" in output, output[-2000:]


def scan(client: Any, table: str) -> dict[tuple[str, str], dict[str, Any]]:
    items: dict[tuple[str, str], dict[str, Any]] = {}
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        for i in page["Items"]:
            key = ("pk", "sk") if "pk" in i else ("event_id", "signup_id")
            items[(i[key[0]]["S"], i[key[1]]["S"])] = i
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_holds_requests_waitlists_closes_and_wake_ups_under_four_lanes(tmp_path):
    """``turnstile local --stream-shards 4`` as an operator runs it (its due-holds job,
    sweeper and the wake-ups' shared container beside the lanes): short holds that lapse,
    confirmations and cancellations, a waitlist that promotes, a sharded event and a plain
    one closed while signups still come. Never oversold, every record decided, every
    request answered, every due hold ended, every history one the lifecycle allows, the
    audit clean and no error in the stack's log."""
    from tests.e2e.conftest import running_local_stack
    from turnstile.engine.lifecycle import ALLOWED_TRANSITIONS
    from turnstile.storage.items import history_of

    events = {
        "l-hold": {"capacity": 6, "waitlist": 10, "hold_seconds": 2},
        "l-wait": {"capacity": 5, "waitlist": 5},
        "l-shard": {"capacity": 10, "shards": 4, "hold_seconds": 2},
        "l-plain": {"capacity": 8},
    }
    state = tmp_path / "state"
    with running_local_stack(state, "--in-memory", "--stream-shards", "4") as stack:
        for event_id, options in events.items():
            args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
            done = stack.turnstile("event", "create", event_id, *args)
            assert done.returncode == 0, done.stderr
        c = stack.dynamodb(max_attempts=10)
        rng = random.Random(4)
        asked: dict[tuple[str, str], list[str]] = {}

        def decisions() -> dict[tuple[str, str], dict[str, Any]]:
            return {k: v for k, v in scan(c, MAIN_TABLE.name).items() if "status" in v}

        seen: set[tuple[str, str, str]] = set()

        def ask_some() -> None:
            """Each signup, once in each status: most holds confirmed (the rest lapse), a
            fifth of the acceptances and some waitlisted signups cancelled."""
            for key, d in decisions().items():
                status = d["status"]["S"]
                if (*key, status) in seen:
                    continue
                seen.add((*key, status))
                odds = {"HELD": 0.6, "ACCEPTED": 0.2, "WAITLISTED": 0.15}.get(status, 0)
                if rng.random() < odds:
                    kind = "confirm" if status == "HELD" else "cancel"
                    ask(c, key, kind)
                    asked.setdefault(key, []).append(kind)

        write_signups(c, events, "a", 100)
        for _ in range(4):
            time.sleep(0.5)
            ask_some()
        for event_id in ("l-plain", "l-shard"):  # closes, while signups still arrive
            done = stack.turnstile("event", "close", event_id)
            assert done.returncode == 0, done.stderr
        write_signups(c, events, "b", 40)

        def settled() -> bool:
            ask_some()
            intake, decided = scan(c, INTAKE_TABLE.name), decisions()
            now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3))
            return (
                set(intake) <= set(decided)
                and all(
                    int(i.get("request_count", {}).get("N", "0"))
                    <= int(decided[k].get("request_count", {}).get("N", "0"))
                    for k, i in intake.items()
                )
                and not any(
                    d["status"]["S"] == "HELD" and d["hold_expires_at"]["S"] < now
                    for d in decided.values()
                )
            )

        until(settled, "everything decided, answered and every due hold ended", 90)
        audit = stack.turnstile("audit", "--json")
        assert audit.returncode == 0 and json.loads(audit.stdout)["ok"], audit.stdout[-3000:]
        decided = decisions()
        events_items = {k[0]: v for k, v in scan(c, CONTROL_TABLE.name).items() if "capacity" in v}
    statuses: dict[str, int] = {}
    seats: dict[str, int] = {}
    for (key, sid), d in decided.items():
        status = d["status"]["S"]
        statuses[status] = statuses.get(status, 0) + 1
        event_id = key.split("#")[0]
        if status in ("HELD", "ACCEPTED"):
            seats[event_id] = seats.get(event_id, 0) + int(d["seats"]["N"])
        plain = {
            "status": status,
            "decided_at": d["decided_at"]["S"],
            "sequence_number": d["sequence_number"]["S"],
            "history": [
                {k: v.get("S") for k, v in h["M"].items()}
                for h in d.get("history", {}).get("L", [])
            ],
        }
        moves = [(h["from"], h["to"]) for h in history_of(plain)]
        assert all(m in ALLOWED_TRANSITIONS for m in moves), (key, sid, moves)
        if sid.startswith("b-") and event_id in ("l-plain", "l-shard"):
            assert d.get("reason", {}).get("S") == "event_closed", (key, sid, d)
    for event_id, taken in seats.items():
        assert taken <= events[event_id]["capacity"], (event_id, taken)
    # the lifecycle ran: holds lapsed, seats given back, signups refused, promotions made
    assert {"EXPIRED", "CANCELLED", "ACCEPTED", "REJECTED"} <= set(statuses), statuses
    causes = {
        h["M"]["cause"]["S"] for d in decided.values() for h in d.get("history", {}).get("L", [])
    }
    assert {"promotion", "expiry"} <= causes, causes
    assert any(v.get("state", {}).get("S") == "CLOSED" for v in events_items.values())
    log = (state / "local.log").read_text()
    assert "polling the intake stream as 4 stream shards" in log
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


@pytest.fixture(scope="module")
def four_lanes_run(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """400 signups over 8 events, every one written before ``turnstile worker
    --stream-shards 4 --until-idle 3`` starts: its stats, its output, the tables after."""
    d = Drill(tmp_path_factory.mktemp("four-lanes"))
    try:
        events = {f"c-{i}": {"capacity": 30} for i in range(8)}
        create(d, events)
        write_signups(d.producer_client(), events, "c", 400)
        stats, output = run_worker(d, "w", "--stream-shards", "4")
        yield {
            "stats": stats,
            "output": output,
            "decisions": d.decisions(),
            "seated": seated(d),
            "audit": d.audit_clean(),
        }
    finally:
        d.close()


def test_the_stats_count_every_lane_once(four_lanes_run):
    stats, output = four_lanes_run["stats"], four_lanes_run["output"]
    batches = [json.loads(line) for line in output.splitlines() if '"batch processed"' in line]
    # every signup decided once, counted once, over several lanes' invocations
    assert len(four_lanes_run["decisions"]) == 400
    assert stats["decided"] == 400 and stats["records_delivered"] == 400, stats
    assert stats["invocations"] == len(batches) >= 4, stats
    assert sum(b["records"] for b in batches) == sum(b["decided"] for b in batches) == 400
    assert (stats["failed_groups"], stats["retries"], stats["store_retries"]) == (0, 0, 0)
    assert stats["first_batch_at"] <= stats["last_batch_at"]
    assert four_lanes_run["seated"] == {f"c-{i}": 30 for i in range(8)}


def test_four_lanes_do_not_overflow_a_shared_connection_pool(four_lanes_run):
    assert "Connection pool is full" not in four_lanes_run["output"]


def test_each_lane_invocation_logs_under_its_own_request_id(four_lanes_run):
    """It did not: inject_lambda_context appends each invocation's context to the one
    formatter the lanes' 'containers' share, so a lane's 'batch processed' line carried
    another lane's function_request_id; in_container puts it in Powertools' thread-safe
    keys now (in make test, whatever the lanes' pace:
    tests/integration/test_local_containers_logs.py)."""
    batches = [
        json.loads(line)
        for line in four_lanes_run["output"].splitlines()
        if '"batch processed"' in line
    ]
    assert len({b["function_request_id"] for b in batches}) == len(batches), batches
