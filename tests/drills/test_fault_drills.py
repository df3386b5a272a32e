"""Fault drills: invariants 1, 2, 4, 5 and 6 under crashes, faults, replays and hostile records.

Each drill runs real processes against a fresh ``turnstile local --no-worker``: workers are
``turnstile worker`` subprocesses (killed with SIGKILL, run twice at once, run with faults
injected), and each drill ends with ``turnstile audit`` clean. ``TURNSTILE_DRILL_SCALE``
(``make drills``) multiplies the load; the default keeps all drills to a few minutes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.e2e.conftest import BIN, running_local_stack
from turnstile.base.contract import (
    CONTROL_TABLE,
    INTAKE_TABLE,
    MAIN_TABLE,
    ControlKey,
    shard_key,
    shard_of,
    signup_key,
    undecided_shard,
)
from turnstile.engine.rules import id_problem

pytestmark = pytest.mark.drill

SCALE = max(1, int(os.environ.get("TURNSTILE_DRILL_SCALE", "1")))
STATS_LINE = "turnstile worker: stats "
#: Every process a drill starts retries a failed batch after 20 ms, doubling to 320 ms, not
#: the poller's 200 ms to 3.2 s: the drills test which paths run, not how long Lambda waits
#: (a third of a drill's time was these waits).
DRILL_ENV = {"TURNSTILE_RETRY_BASE_DELAY_MS": "20"}
FIGURES: dict[str, dict[str, Any]] = {}

#: Hostile records mixed into the load, by kind: what a producer with PutItem on intake can
#: write (the hostile-producer tests cover every shape; these are the ones a drill's real
#: processes must also take in their stride). Each kind changes a valid signup, and says the
#: decision it must get: ``invalid_request``, ``unknown_event``, or ``None`` (decided on its
#: merits, like any valid signup).
HOSTILE: dict[str, tuple[dict[str, Any], str | None]] = {
    "seats-zero": ({"seats": {"N": "0"}}, "invalid_request"),
    "seats-fraction": ({"seats": {"N": "2.5"}}, "invalid_request"),
    "seats-string": ({"seats": {"S": "3"}}, "invalid_request"),
    "seats-list": ({"seats": {"L": [{"N": "1"}]}}, "invalid_request"),
    "attributes-not-a-map": ({"attributes": {"S": "x"}}, "invalid_request"),
    "attributes-over-4kb": (
        {"attributes": {"M": {"note": {"S": "x" * 5000}}}},
        "invalid_request",
    ),
    "attributes-binary-and-sets": (
        {
            "attributes": {
                "M": {
                    "blob": {"B": bytes(range(256))},
                    "tags": {"SS": ["a", "b"]},
                    "deep": {"L": [{"M": {"n": {"N": "1e100"}}}]},
                }
            }
        },
        None,
    ),
    "submitted-naive": ({"submitted_at": {"S": "2026-01-01T00:00:00"}}, None),
    "submitted-future": ({"submitted_at": {"S": "2999-01-01T00:00:00Z"}}, None),
    "submitted-junk": ({"submitted_at": {"S": "yesterday, around noon"}}, None),
    "submitted-a-number": ({"submitted_at": {"N": "1700000000"}}, None),
    "submitted-missing": ({"submitted_at": None}, None),
    "item-350kb": ({"blob": {"S": "x" * 350_000}}, None),
    "unknown-event": ({"event_id": {"S": "no-such-event"}}, "unknown_event"),
}

#: Keys turnstile once kept its own items under, or keeps them under now in the control
#: table: written as intake records, each only gets its own ``invalid_request`` decision.
RESERVED_KEYS = [
    ("{event}", "#EVENT"),
    ("#sweeper", "#lease"),
    ("#sweeper-runs", "{prefix}"),
    ("EVENT#{event}", "EVENT"),
    ("PARK#{event}", "HOLD"),  # the parking marker's key before it was renamed
    ("PARK#{event}", "PARKED"),
    ("SWEEPER", "LEASE"),
]


def hostile_kind(signup_id: str) -> str | None:
    """The hostile kind a signup id was written as (None: a plain signup)."""
    return signup_id.rsplit("-hostile-", 1)[1] if "-hostile-" in signup_id else None


class Drill:
    """A fresh local endpoint without a worker, and the means to run workers against it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self._start_stack()
        self.workers: list[subprocess.Popen] = []

    def _start_stack(self) -> None:
        self._stack = running_local_stack(self.tmp / "stack", "--no-worker")
        running = self._stack.__enter__()
        self.stack_process = running.process
        self.endpoint = running.endpoint
        self.env = running.env
        self.client = running.dynamodb(max_attempts=10)

    def kill_and_restart_stack(self) -> None:
        """SIGKILL the whole ``turnstile local`` and start it again on its state (new ports)."""
        self.stack_process.send_signal(signal.SIGKILL)
        self.stack_process.wait(timeout=30)
        self._stack.__exit__(None, None, None)
        self._start_stack()

    def turnstile(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300):
        return subprocess.run(
            [str(BIN / "turnstile"), *args],
            env={**self.env, **DRILL_ENV, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_worker(self, name: str, *args: str, env: dict[str, str] | None = None):
        log = open(self.tmp / f"worker-{name}.log", "a")  # noqa: SIM115 - lives with the process
        process = subprocess.Popen(
            [str(BIN / "turnstile"), "worker", "--state-dir", str(self.tmp / name), *args],
            env={**self.env, **DRILL_ENV, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(process)
        return process

    def kill_once_deciding(
        self, name: str, rng: random.Random, env: dict[str, str] | None = None
    ) -> None:
        """Start a worker, wait until it polls and then until it decides something (a
        loaded machine starts it slowly: no fixed sleep decides whether it got that far),
        and SIGKILL it a random moment later."""
        log = self.tmp / f"worker-{name}.log"
        started = log.read_text().count("polling") if log.exists() else 0
        items = self.count(MAIN_TABLE.name)
        worker = self.start_worker(name, env=env)
        deadline = time.monotonic() + 60
        while self.worker_log(name).count("polling") == started:
            assert worker.poll() is None and time.monotonic() < deadline, "worker did not start"
            time.sleep(0.05)
        deadline = time.monotonic() + 20  # nothing may be left to decide: then kill anyway
        while self.count(MAIN_TABLE.name) == items and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 0.5))
        worker.send_signal(signal.SIGKILL)
        worker.wait()

    def create_events(self, capacities: dict[str, int]) -> None:
        for event_id, capacity in capacities.items():
            result = self.turnstile("event", "create", event_id, "--capacity", str(capacity))
            assert result.returncode == 0, result.stderr

    def produce(
        self,
        capacities: dict[str, int],
        count: int,
        prefix: str,
        threads: int = 4,
        hostile_every: int = 0,
    ) -> int:
        """Write ``count`` signups from several threads, every ``hostile_every``-th of them
        made hostile (``HOSTILE``, kinds in turn); the total written."""
        errors: list[BaseException] = []
        written = [0] * threads

        def producer(n: int) -> None:
            rng = random.Random(f"{prefix}-{n}")
            c = self.producer_client()
            try:
                for i in range(n, count, threads):
                    item = {
                        "event_id": {"S": rng.choice(list(capacities))},
                        "signup_id": {"S": f"{prefix}-{i}"},
                        "seats": {"N": str(rng.randint(1, 3))},
                        "submitted_at": {"S": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                    }
                    if hostile_every and i % hostile_every == 0:
                        kind = list(HOSTILE)[(i // hostile_every) % len(HOSTILE)]
                        item.update(HOSTILE[kind][0])
                        item = {k: v for k, v in item.items() if v is not None}
                        item["signup_id"] = {"S": f"{prefix}-{i}-hostile-{kind}"}
                    c.put_item(
                        TableName=INTAKE_TABLE.name,
                        Item=item,
                        ConditionExpression="attribute_not_exists(signup_id)",
                    )
                    written[n] += 1
            except BaseException as exc:
                errors.append(exc)

        pool = [threading.Thread(target=producer, args=(n,)) for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert errors == []
        return sum(written)

    def producer_client(self) -> Any:
        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"mode": "standard", "max_attempts": 10}),
        )

    def produce_reserved(self, event_id: str, prefix: str) -> list[tuple[str, str]]:
        """Intake records under the keys of ``RESERVED_KEYS`` (one valid signup each, on its
        keys); their keys."""
        c = self.producer_client()
        keys = [
            (pk.format(event=event_id, prefix=prefix), sk.format(event=event_id, prefix=prefix))
            for pk, sk in RESERVED_KEYS
        ]
        for pk, sk in keys:
            c.put_item(
                TableName=INTAKE_TABLE.name,
                Item={"event_id": {"S": pk}, "signup_id": {"S": sk}, "seats": {"N": "1"}},
            )
        return keys

    def hostile_decided_as_they_must(self, reserved: list[tuple[str, str]] = ()) -> dict[str, int]:
        """Every hostile and reserved-key record has its one decision, with the reason its kind
        must get; the count per kind, every kind at least once."""
        decided = self.decisions()
        intake = self.scan(INTAKE_TABLE.name)
        counts: dict[str, int] = {}
        for key in intake:
            kind = hostile_kind(key[1])
            if kind is None and key not in reserved:
                continue
            if kind:
                expected = HOSTILE[kind][1]
            elif id_problem(key[0], "event_id") or id_problem(key[1], "signup_id"):
                expected = "invalid_request"
            else:
                expected = "unknown_event"  # e.g. ("SWEEPER", "LEASE"): no such event
            assert key in decided, f"{key}: no decision"
            reason = decided[key].get("reason", {}).get("S")
            if expected is None:
                assert reason != "invalid_request", (key, decided[key])
            else:
                assert reason == expected, (key, decided[key])
            counts[kind or "reserved-key"] = counts.get(kind or "reserved-key", 0) + 1
        assert set(counts) == {*HOSTILE, *(["reserved-key"] if reserved else [])}, counts
        assert counts.get("reserved-key", 0) == len(reserved), counts
        return counts

    def scan(self, table: str) -> dict[tuple[str, str], dict[str, Any]]:
        items: dict[tuple[str, str], dict[str, Any]] = {}
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        while True:
            page = self.client.scan(**kwargs)
            for i in page["Items"]:
                key = ("pk", "sk") if "pk" in i else ("event_id", "signup_id")
                items[(i[key[0]]["S"], i[key[1]]["S"])] = i
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def count(self, table: str) -> int:
        total = 0
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True, "Select": "COUNT"}
        while True:
            page = self.client.scan(**kwargs)
            total += page["Count"]
            if "LastEvaluatedKey" not in page:
                return total
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def decisions(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {k: v for k, v in self.scan(MAIN_TABLE.name).items() if "status" in v}

    def finish(self, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        """Run one worker until the stream is quiet; its closing summary."""
        result = self.turnstile(
            "worker",
            "--state-dir",
            str(self.tmp / "finisher"),
            "--until-idle",
            "1",
            *args,
            env=env,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return worker_summary(result.stdout)

    def undecided(self) -> set[tuple[str, str]]:
        return set(self.scan(INTAKE_TABLE.name)) - set(self.decisions())

    def parked_events(self) -> set[str]:
        markers = [k for k in self.scan(CONTROL_TABLE.name) if k[1] == ControlKey.PARKED_SK]
        return {pk.removeprefix(ControlKey.PARK_PREFIX) for pk, _ in markers}

    def sweep_until_decided(self, name: str, runs: int = 6) -> list[dict[str, Any]]:
        """Sweep runs (a running worker decides what they re-emit and release) until every
        intake record has its decision; each run's summary."""
        done: list[dict[str, Any]] = []
        while undecided := self.undecided():
            assert len(done) < runs, (sorted(undecided)[:10], done)
            sweep = self.turnstile("sweep", "--min-age", "0", "--run-id", f"{name}-{len(done)}")
            assert sweep.returncode == 0, sweep.stdout + sweep.stderr
            [run] = json.loads(sweep.stdout)
            assert run["status"] == "succeeded", run
            done.append(run)
            deadline = time.monotonic() + 20
            while self.undecided() and time.monotonic() < deadline:
                time.sleep(0.5)
        return done

    def worker_log(self, name: str) -> str:
        return (self.tmp / f"worker-{name}.log").read_text()

    def checkpoint(self, name: str) -> int:
        """The highest sequence number a worker's poller has checkpointed (0: none yet)."""
        path = self.tmp / name / "checkpoints.json"
        if not path.exists():
            return 0
        shards = json.loads(path.read_text()).values()
        return max((int(seq) for shard in shards for seq in shard.values()), default=0)

    def audit_clean(self) -> dict[str, Any]:
        result = self.turnstile("audit", "--json")
        assert result.stdout, result.stderr
        body = json.loads(result.stdout)
        assert result.returncode == 0 and body["ok"], json.dumps(body, indent=1)[:3000]
        return body

    def figures(self, written: int, **extra: Any) -> dict[str, Any]:
        """lost, doubled and oversold, counted from the tables."""
        intake = self.scan(INTAKE_TABLE.name)
        decided = self.decisions()
        control = self.scan(CONTROL_TABLE.name).values()
        events = {v["event_id"]["S"]: v for v in control if "capacity" in v}
        oversold = 0
        doubled = 0
        for event_id, event in events.items():
            # a hold's seats are taken as an acceptance's (docs/lifecycle.md, invariant 1)
            accepted = [
                d
                for k, d in decided.items()
                if k[0] == event_id and d["status"]["S"] in ("ACCEPTED", "HELD")
            ]
            seats = sum(int(d["seats"]["N"]) for d in accepted)
            oversold += max(0, seats - int(event["capacity"]["N"]))
            positions = [int(d["position"]["N"]) for d in accepted]
            doubled += len(positions) - len(set(positions))
        return {
            "signups": written,
            "lost": len(set(intake) - set(decided)),
            "doubled": doubled + len(set(decided) - set(intake)),
            "oversold": oversold,
            **extra,
        }

    def close(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.kill()
            w.wait()
        self._stack.__exit__(None, None, None)


def ask(c: Any, key: tuple[str, str], kind: str) -> None:
    """A holder's request, as a producer makes it: an update of its own intake item."""
    c.update_item(
        TableName=INTAKE_TABLE.name,
        Key={"event_id": {"S": key[0]}, "signup_id": {"S": key[1]}},
        UpdateExpression="SET #r = :kind, #u = :shard ADD #n :one",
        ExpressionAttributeNames={"#r": "request", "#u": "undecided", "#n": "request_count"},
        ExpressionAttributeValues={
            ":kind": {"S": kind},
            ":shard": {"S": undecided_shard(*key)},
            ":one": {"N": "1"},
        },
    )


def worker_summary(output: str) -> dict[str, Any]:
    """The last summary a ``turnstile worker`` printed (its closing "stats" line)."""
    lines = [line for line in output.splitlines() if line.startswith(STATS_LINE)]
    assert lines, output[-2000:]
    return json.loads(lines[-1][len(STATS_LINE) :])


@pytest.fixture
def drill(tmp_path) -> Iterator[Drill]:
    d = Drill(tmp_path)
    try:
        yield d
    finally:
        d.close()


def report(name: str, figures: dict[str, Any]) -> None:
    FIGURES[name] = figures
    print(f"\nDRILL {name}: {json.dumps(figures)}")
    assert (figures["lost"], figures["doubled"], figures["oversold"]) == (0, 0, 0), figures


def test_drill_worker_killed_with_sigkill_and_restarted(drill):
    capacities = {"k-one": 1, "k-small": 15, "k-mid": 120, "k-big": 700}
    drill.create_events(capacities)
    total = 1000 * SCALE
    kills = 0
    #: Kills that landed mid-batch: the worker had decided records it had not yet
    #: checkpointed, so the next worker is handed decisions already made.
    mid_batch = 0
    produced: list[int] = []
    reserved = drill.produce_reserved("k-mid", "kill")
    producer = threading.Thread(
        target=lambda: produced.append(drill.produce(capacities, total, "kill", hostile_every=37))
    )
    producer.start()
    rng = random.Random(2026)
    snapshot: dict[tuple[str, str], dict[str, Any]] = {}
    last_before = 0  # the last sequence number decided before this worker started
    while producer.is_alive() or kills < 5 + SCALE:
        drill.kill_once_deciding("killed", rng)
        kills += 1
        decided = drill.decisions()
        last_decided = max((int(d["sequence_number"]["S"]) for d in decided.values()), default=0)
        mid_batch += last_decided > max(last_before, drill.checkpoint("killed"))
        last_before = last_decided
        if kills == 3:
            snapshot = decided
    producer.join()
    drill.finish()
    # Kills landed while decisions were being made, not only between batches.
    assert mid_batch >= 1, f"none of {kills} kills landed mid-batch"
    # Decisions made before later kills were never changed (invariant 2).
    final = drill.decisions()
    changed = [k for k, v in snapshot.items() if final.get(k) != v]
    assert snapshot and changed == []
    hostile = drill.hostile_decided_as_they_must(reserved)
    drill.audit_clean()
    report(
        "sigkill",
        drill.figures(
            produced[0] + len(reserved),
            kills=kills,
            kills_mid_batch=mid_batch,
            hostile=sum(hostile.values()),
        ),
    )


def test_drill_throttling_and_5xx_reach_every_failure_path(drill):
    """A tenth of the worker's calls fail and its store retries once, so faults reach the
    processor: groups fail, the poller retries from the failed record. One event's partition
    stays throttled: its batches exhaust their retries and go to the on-failure queue, and
    once the throttling is over the redrive gets them decided."""
    capacities = {"f-a": 40, "f-b": 200}
    drill.create_events({**capacities, "f-stuck": 5})
    reserved = drill.produce_reserved("f-a", "fault")
    written = drill.produce(capacities, 600 * SCALE, "fault", hostile_every=20) + len(reserved)
    stuck = drill.produce({"f-stuck": 5}, 12, "stuck")
    faults = {
        "TURNSTILE_FAULT_RATE": "0.1",
        "TURNSTILE_STORE_MAX_ATTEMPTS": "2",
        "TURNSTILE_FAULT_STUCK_EVENT": "f-stuck",
    }
    stats = drill.finish(env=faults)
    seen = json.dumps(stats)
    # THEN every failure path ran, each at least once
    assert stats["faults_injected"] > 0, seen
    assert stats["store_retries"] > 0, seen  # the store retried a throttled call
    assert stats["failed_groups"] > 0, seen  # ... and gave up: the group failed
    assert stats["partial_failures"] > 0, seen  # batchItemFailures reached the poller
    assert stats["retries"] > 0, seen  # which redelivered from the failed record
    assert stats["sent_to_failure_destination"] >= stuck, seen  # retries exhausted
    # AND the stuck event held nobody else up: it alone is undecided, the others went on,
    # but for an event whose own group failed on its own faults and was parked, its records
    # parked in arrival order until a release
    undecided_events = {k[0] for k in drill.undecided()}
    assert undecided_events - drill.parked_events() == {"f-stuck"}, undecided_events
    # WHEN the throttling is over: the worker resumes past the failed batches, and the
    # redrive re-emits what the on-failure queue points at
    worker = drill.start_worker("finisher")
    redrive = drill.turnstile("redrive", "--wait", "60")
    assert redrive.returncode == 0, redrive.stdout + redrive.stderr
    redriven = json.loads(redrive.stdout)
    assert redriven["deleted"] >= 1 and redriven["re_emitted"] >= stuck, redriven
    # AND an event whose group failed past the store's retries was parked, its records
    # with it: nothing of it is decided until a release, which a later record of the
    # event or the sweeper's next run sets off (every 5 minutes on AWS; here at once).
    sweeps = drill.sweep_until_decided("release")
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=60)
    drill.hostile_decided_as_they_must(reserved)
    drill.audit_clean()
    summary = {k: stats[k] for k in ("faults_injected", "calls", "failed_groups", "retries")}
    report(
        "faults-10pct",
        drill.figures(
            written + stuck,
            **summary,
            partial_batch_responses=stats["partial_failures"],
            sent_to_failure_queue=stats["sent_to_failure_destination"],
            redriven=redriven["re_emitted"],
            parked_events_released=sum(run["releases_triggered"] for run in sweeps),
        ),
    )


def test_drill_two_workers_on_one_stream(drill):
    """Two workers on one stream, each deciding every record it is handed: their
    collisions end in conflicts, never in a lost, doubled or oversold decision.

    Who does what is arranged by events, never left to timing (a loaded machine): worker b
    stops at its first commit (the drill's commit gate) while a decides the first wave, so
    b's commit meets a version that moved on; then a is paused while b alone decides the
    second wave; the last waves run with both free."""
    capacities = {"t-a": 7, "t-b": 90, "t-c": 300}
    drill.create_events(capacities)
    gate = drill.tmp / "commit-gate"
    workers = {
        "a": drill.start_worker("a"),
        "b": drill.start_worker("b", env={"TURNSTILE_FAULT_COMMIT_GATE": str(gate)}),
    }
    a, b = workers["a"], workers["b"]

    def until(condition: Any, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert all(w.poll() is None for w in workers.values()), f"a worker died: {what}"
            assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
            time.sleep(0.05)

    until(lambda: all("polling" in drill.worker_log(n) for n in workers), "both polling")
    # Wave 0: b reads the events and decides, and stops before its commit ...
    a.send_signal(signal.SIGSTOP)
    written = drill.produce(capacities, 200 * SCALE, "twin0")
    until(lambda: Path(f"{gate}.reached").exists(), "b at its first commit")
    # ... while a decides the whole wave, moving every event's version on
    a.send_signal(signal.SIGCONT)
    until(lambda: len(drill.decisions()) == written, "a decided wave 0")
    gate.touch()  # b's commit now conflicts: it reads again and finds the wave decided
    # Wave 1: b alone
    a.send_signal(signal.SIGSTOP)
    written += drill.produce(capacities, 200 * SCALE, "twin1")
    until(lambda: len(drill.decisions()) == written, "b decided wave 1")
    a.send_signal(signal.SIGCONT)
    # Waves 2 and 3: both free, both handed every record
    for wave in (2, 3):
        written += drill.produce(capacities, 200 * SCALE, f"twin{wave}")
    drill.finish()
    for w in (a, b):
        assert w.poll() is None, "a worker died before the end of the drill"
        w.send_signal(signal.SIGTERM)
        w.wait(timeout=60)
    stats = {name: worker_summary(drill.worker_log(name)) for name in ("a", "b")}
    sa, sb = stats["a"], stats["b"]
    # Both decided, over overlapping spans of time, and the version guard turned b's
    # collision (and any later ones) into conflicts: the loser read again and re-decided.
    assert sa["decided"] > 0 and sb["decided"] > 0, stats
    assert sa["first_batch_at"] < sb["last_batch_at"], stats
    assert sb["first_batch_at"] < sa["last_batch_at"], stats
    assert sb["conflicts"] >= 1, stats
    drill.audit_clean()
    report(
        "two-workers",
        drill.figures(
            written,
            decided_by_a=sa["decided"],
            decided_by_b=sb["decided"],
            conflicts=sa["conflicts"] + sb["conflicts"],
        ),
    )


def test_drill_whole_stream_replayed_three_times(drill):
    capacities = {"r-a": 5, "r-b": 60}
    drill.create_events(capacities)
    reserved = drill.produce_reserved("r-a", "replay")
    written = drill.produce(capacities, 400 * SCALE, "replay", hostile_every=19) + len(reserved)
    drill.finish()
    drill.hostile_decided_as_they_must(reserved)

    def state() -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Decisions and event items (the sweeper's own items may move meanwhile)."""
        events = {k: v for k, v in drill.scan(CONTROL_TABLE.name).items() if "capacity" in v}
        return drill.scan(MAIN_TABLE.name), events

    before = state()
    for i in range(3):
        result = drill.turnstile(
            "worker",
            "--from-start",
            "--until-idle",
            "1",
            "--state-dir",
            str(drill.tmp / f"replay-{i}"),
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
        assert state() == before, f"replay {i + 1} changed a decision or an event item"
    # The whole local stack killed and restarted: its state comes back from disk, the
    # finisher resumes from its checkpoint (the stream ARN is the same), nothing changes.
    drill.kill_and_restart_stack()
    assert state() == before, "the restart lost or changed a decision or an event item"
    summary = drill.finish()
    assert summary["decided"] == 0, summary
    assert state() == before
    drill.audit_clean()
    report("replay-x3", drill.figures(written, replays=3, stack_restarts=1))


def test_drill_worker_down_past_retention_then_the_sweeper_decides(drill):
    capacities = {"s-a": 25, "s-b": 100}
    drill.create_events(capacities)
    reserved = drill.produce_reserved("s-a", "late")
    written = drill.produce(capacities, 300 * SCALE, "late", hostile_every=13) + len(reserved)
    retention = {"TURNSTILE_MAX_RECORD_AGE_S": "4"}
    time.sleep(5)  # the worker was down: every record is now past the (shortened) age
    drill.finish(env=retention)
    assert len(drill.decisions()) == 0, "records past retention must not be decided"
    # The worker is back (same short retention) while the sweeper re-emits what is left.
    worker = drill.start_worker("back", env=retention)
    runs: list[dict[str, Any]] = []
    while not runs or runs[-1]["undecided"]:
        # A run re-emits for at most --max-run seconds; the next run does the rest. On
        # moto every transaction copies the tables, so a large backlog takes a few runs.
        assert len(runs) < 6, runs
        sweep = drill.turnstile("sweep", "--min-age", "0", "--run-id", f"drill-{len(runs)}")
        assert sweep.returncode == 0, sweep.stdout + sweep.stderr
        [run] = json.loads(sweep.stdout)
        assert run["status"] == "succeeded", run
        runs.append(run)
        drill.finish(env=retention)
    re_emitted = sum(r["re_emitted"] for r in runs)
    assert runs[0]["undecided"] == written and re_emitted >= written
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=60)
    # The on-failure queue still points at the aged-out batches: redrive clears it. No
    # worker runs now, so what it finds undecided stays so: waiting longer changes nothing.
    redrive = drill.turnstile("redrive", "--wait", "1")
    assert redrive.returncode == 0, redrive.stdout + redrive.stderr
    assert json.loads(redrive.stdout)["deleted"] >= 1
    drill.hostile_decided_as_they_must(reserved)
    drill.audit_clean()
    report("past-retention", drill.figures(written, re_emitted=re_emitted, sweep_runs=len(runs)))


def test_drill_lifecycle_requests_and_lapsing_holds_under_sigkill_and_faults(drill):
    """Holds, confirmations, cancellations and a waitlist under SIGKILLed workers with a
    tenth of their calls failing: producers confirm some holds, cancel some seats and let
    other holds lapse, as the docs tell them to (an update of their own intake item), while
    workers are killed mid-batch. Nothing is lost, doubled or oversold; every request is
    answered once; every hold ends; every history is one the lifecycle allows."""
    from turnstile.engine.lifecycle import ALLOWED_TRANSITIONS
    from turnstile.storage.items import history_of

    options = {
        "l-hold": {"capacity": 25, "waitlist": 40, "hold_seconds": 2},
        "l-wait": {"capacity": 30, "waitlist": 30, "hold_seconds": 0},
    }
    drill.create_events({e: o["capacity"] for e, o in options.items()})
    for event_id, o in options.items():  # the organizer's options, on the event item
        drill.client.update_item(
            TableName=CONTROL_TABLE.name,
            Key={"pk": {"S": f"EVENT#{event_id}"}, "sk": {"S": "EVENT"}},
            UpdateExpression="SET waitlist = :w, hold_seconds = :h",
            ExpressionAttributeValues={
                ":w": {"N": str(o["waitlist"])},
                ":h": {"N": str(o["hold_seconds"])},
            },
        )
    capacities = {e: o["capacity"] for e, o in options.items()}
    produced: list[int] = []
    producer = threading.Thread(
        target=lambda: produced.append(drill.produce(capacities, 250 * SCALE, "life"))
    )
    requested: dict[tuple[str, str], list[str]] = {}
    rng = random.Random(15)
    c = drill.producer_client()

    def request(key: tuple[str, str], kind: str) -> None:
        ask(c, key, kind)
        requested.setdefault(key, []).append(kind)

    def requester(rounds: int) -> None:
        """Looks at the decisions now and then and asks as a producer would: most holds
        confirmed (the rest lapse), a fifth of the seats given back, a few leave the line."""
        for _ in range(rounds):
            for key, d in drill.decisions().items():
                status = d["status"]["S"]
                asked = requested.get(key, [])
                if status == "HELD" and not asked:
                    if rng.random() < 0.7:
                        request(key, "confirm")
                    else:
                        requested[key] = []  # left to lapse
                elif (status == "ACCEPTED" and "cancel" not in asked and rng.random() < 0.2) or (
                    status == "WAITLISTED" and not asked and rng.random() < 0.1
                ):
                    request(key, "cancel")
            time.sleep(0.5)

    producer.start()
    asker = threading.Thread(target=requester, args=(12,))
    asker.start()
    kills = 0
    faults = {"TURNSTILE_FAULT_RATE": "0.1", "TURNSTILE_STORE_MAX_ATTEMPTS": "2"}
    while producer.is_alive() or asker.is_alive() or kills < 4:
        started = drill.worker_log("life").count("polling") if kills else 0
        worker = drill.start_worker("life", env=faults if kills % 2 else None)
        # killed once it is polling (a loaded machine starts it slowly), a moment later
        deadline = time.monotonic() + 60
        while drill.worker_log("life").count("polling") == started:
            assert worker.poll() is None and time.monotonic() < deadline, "worker did not start"
            time.sleep(0.05)
        time.sleep(rng.uniform(1.0, 2.5))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        kills += 1
    producer.join()
    asker.join()
    # Every hold has lapsed by now (2 s): a wake-up of each event lets the processor see it,
    # as the due-holds release does (turnstile local --no-worker runs none).
    time.sleep(2.5)
    # every hold due before this moment must lapse at the step that follows (invariant 4)
    ticked_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    from turnstile.storage.store import SignupStore

    for event_id in options:
        SignupStore(drill.client).wake(event_id, "hold_due")
    worker = drill.start_worker("finisher-life")
    sweeps = drill.sweep_until_decided("life")
    # requests the sweeper re-emits are answered too: wait until every one is
    deadline = time.monotonic() + 120
    while True:
        intake = drill.scan(INTAKE_TABLE.name)
        decided = drill.decisions()
        unanswered = [
            k
            for k, i in intake.items()
            if int(i.get("request_count", {}).get("N", "0"))
            > int(decided.get(k, {}).get("request_count", {}).get("N", "0"))
        ]
        # ... and every hold due at the tick has ended: the finisher reads both streams from
        # their start, so it reaches the wake-ups only after all that came before them (a
        # while, on a loaded machine): wait for that outcome, never for a time
        lapsed = [
            k
            for k, d in decided.items()
            if d["status"]["S"] == "HELD" and d["hold_expires_at"]["S"] <= ticked_at
        ]
        if (not unanswered and not lapsed) or time.monotonic() > deadline:
            break
        drill.turnstile("sweep", "--min-age", "0", "--run-id", f"life-answer-{time.time()}")
        time.sleep(1)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=60)
    assert unanswered == [], unanswered[:10]
    statuses: dict[str, int] = {}
    for key, d in decided.items():
        status = d["status"]["S"]
        statuses[status] = statuses.get(status, 0) + 1
        plain = {
            "status": status,
            "history": [
                {k: v.get("S") for k, v in h["M"].items()}
                for h in d.get("history", {}).get("L", [])
            ]
            or None,
            "decided_at": d.get("decided_at", {}).get("S"),
            "sequence_number": d["sequence_number"]["S"],
        }
        if plain["history"] is None:
            del plain["history"]
        moves = [(h["from"], h["to"]) for h in history_of(plain)]
        assert all(m in ALLOWED_TRANSITIONS for m in moves), (key, moves)
        assert len(moves) == len(set(moves)), (key, moves)
        # every hold ends: the ones left were given at the last tick or after it
        if status == "HELD" and d["hold_expires_at"]["S"] <= ticked_at:
            event = drill.client.get_item(
                TableName=CONTROL_TABLE.name,
                Key={"pk": {"S": f"EVENT#{key[0]}"}, "sk": {"S": "EVENT"}},
                ConsistentRead=True,
            ).get("Item")
            log = [
                line for line in drill.worker_log("finisher-life").splitlines() if key[0] in line
            ]
            raise AssertionError(f"hold never ended: {key} {d}\nevent: {event}\nlog: {log[-30:]}")
    # the lifecycle was exercised: holds confirmed and lapsed, seats given back, promotions
    assert {"CANCELLED", "EXPIRED", "ACCEPTED"} <= set(statuses), statuses
    promoted = sum(
        1
        for d in decided.values()
        for h in d.get("history", {}).get("L", [])
        if h["M"]["cause"]["S"] == "promotion"
    )
    assert promoted > 0, statuses
    drill.audit_clean()
    report(
        "lifecycle",
        drill.figures(
            produced[0],
            kills=kills,
            requests=sum(len(v) for v in requested.values()),
            promoted=promoted,
            sweep_runs=len(sweeps),
            **{s.lower(): n for s, n in sorted(statuses.items())},
        ),
    )


def _unanswered(
    decided: dict[tuple[str, str], dict[str, Any]], asked: set[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The sharded event's holds asked to confirm or cancel and still HELD (a signup
    promoted from the line later holds a seat no one asked about)."""
    return [k for k in asked if decided[k]["status"]["S"] == "HELD"]


def _seats_and_line(decisions: dict[tuple[str, str], dict[str, Any]]) -> tuple[int, int]:
    """The sharded drill's event: its seats held or accepted, and how many wait."""
    seats = line = 0
    for (key, _), v in decisions.items():
        if key.startswith("s-drop#"):
            status = v["status"]["S"]
            seats += int(v["seats"]["N"]) if status in ("HELD", "ACCEPTED") else 0
            line += status == "WAITLISTED"
    return seats, line


def test_drill_sharded_event_under_sigkill_and_faults(drill):
    """A sharded event (4 shards, holds of 5 minutes, a waitlist of 40) beside a plain one.
    Producers place each signup under its shard's key (every 25th under a wrong one), some
    holders confirm and some cancel; workers are SIGKILLed at random moments, then one whose
    calls fail a tenth of the time finishes, and the sweeper releases what its failures
    parked. Never oversold, never undersold: the event ends with exactly its seats held or
    accepted, each seat cancelled taken by a signup that waited (in whichever shard), the
    line only ever as long as the event's waitlist, every record has its one decision, and
    no first decision changed."""
    created = drill.turnstile(
        "event", "create", "s-drop", "--capacity", "60", "--shards", "4", "--hold-seconds",
        "300", "--waitlist", "40",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    drill.create_events({"s-plain": 30})
    c = drill.producer_client()
    total = 400 * SCALE
    wrong: set[tuple[str, str]] = set()

    def produce(prefix: str, count: int) -> None:
        for i in range(count):
            sid = f"{prefix}-{i}"
            event = "s-plain" if i % 5 == 0 else "s-drop"
            key = signup_key(event, sid, 4 if event == "s-drop" else 1)
            if event == "s-drop" and i % 25 == 1:
                key = shard_key("s-drop", (shard_of(sid, 4) + 1) % 4)
                wrong.add((key, sid))
            c.put_item(
                TableName=INTAKE_TABLE.name,
                Item={"event_id": {"S": key}, "signup_id": {"S": sid}, "seats": {"N": "1"}},
                ConditionExpression="attribute_not_exists(signup_id)",
            )

    producer = threading.Thread(target=produce, args=("shard", total))
    producer.start()
    rng = random.Random(29)
    kills = 0
    snapshot: dict[tuple[str, str], dict[str, Any]] = {}
    while producer.is_alive() or kills < 3 or not snapshot:
        drill.kill_once_deciding("sharded", rng)
        kills += 1
        if kills >= 2 and not snapshot:
            snapshot = drill.decisions()
    producer.join()
    drill.finish()  # every signup decided: each holder's request below finds its hold
    # Holders of the sharded event confirm (every other one) or cancel (every fifth),
    # each by updating its intake record, as a producer does.
    requests = 0
    asked: set[tuple[str, str]] = set()
    for (key, sid), item in drill.decisions().items():
        if key.startswith("s-drop#") and item["status"]["S"] == "HELD":
            asked.add((key, sid))
            kind = "confirm" if requests % 2 == 0 else "cancel"
            if requests % 5 == 4:
                kind = "cancel"
            c.update_item(
                TableName=INTAKE_TABLE.name,
                Key={"event_id": {"S": key}, "signup_id": {"S": sid}},
                UpdateExpression="SET #r = :r, #u = :shard ADD #n :one",
                ExpressionAttributeNames={
                    "#r": "request",
                    "#u": "undecided",
                    "#n": "request_count",
                },
                ExpressionAttributeValues={
                    ":r": {"S": kind},
                    ":shard": {"S": undecided_shard(key, sid)},
                    ":one": {"N": "1"},
                },
            )
            requests += 1
    faults = {"TURNSTILE_FAULT_RATE": "0.1", "TURNSTILE_STORE_MAX_ATTEMPTS": "2"}
    drill.finish(env=faults)
    worker = drill.start_worker("sharded-after")
    drill.sweep_until_decided("sharded")
    deadline = time.monotonic() + 60  # every request answered (its item's request_count)
    while time.monotonic() < deadline and _unanswered(drill.decisions(), asked):
        time.sleep(0.5)
    # and each seat given back taken by a signup that waited (a wake-up of its shard away)
    while time.monotonic() < deadline and _seats_and_line(drill.decisions())[0] < 60:
        time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=60)
    final = drill.decisions()
    assert requests > 0

    # A first decision is fixed (its time and the record it decided, and a seat's position);
    # a hold may move on, and a signup that waited is given a position when promoted.
    def first(item: dict[str, Any] | None, waited: bool = False) -> Any:
        position = None if waited else (item or {}).get("position")
        return item and (item["sequence_number"], item["decided_at"], position)

    changed = [
        k
        for k, v in snapshot.items()
        if first(final.get(k), v["status"]["S"] == "WAITLISTED")
        != first(v, v["status"]["S"] == "WAITLISTED")
    ]
    assert snapshot and changed == []
    assert [k for k, v in snapshot.items() if k[0] == "s-plain" and final.get(k) != v] == []
    for key in wrong:
        assert final[key]["reason"]["S"] == "invalid_request", final[key]
    seated = sum(
        int(v["seats"]["N"])
        for (key, _), v in final.items()
        if key.startswith("s-drop#") and v["status"]["S"] in ("HELD", "ACCEPTED")
    )
    refused = [
        v
        for (key, _), v in final.items()
        if key.startswith("s-drop#") and v.get("reason", {}).get("S") == "capacity_full"
    ]
    cancelled = sum(
        1
        for (key, _), v in final.items()
        if key.startswith("s-drop#") and v["status"]["S"] == "CANCELLED"
    )
    # Exactly the seats: every one given (signups were refused for want of them, once the
    # line was full), and each one cancelled after taken by a signup that waited, from
    # any shard's line: 36 cancels, 40 waiting.
    promoted = sum(
        1
        for (key, _), v in final.items()
        if key.startswith("s-drop#")
        and any(
            h["M"].get("cause", {}).get("S") == "promotion"
            for h in v.get("history", {}).get("L", [])
        )
    )
    seats, line = _seats_and_line(final)
    assert refused and cancelled and _unanswered(final, asked) == []
    assert (seats, seated) == (60, 60), (seated, cancelled, promoted, line)
    assert promoted == cancelled and line + promoted == 40, (cancelled, promoted, line)
    drill.audit_clean()
    report(
        "sharded",
        drill.figures(total, kills=kills, requests=requests, seated=seated, wrong_key=len(wrong)),
    )
