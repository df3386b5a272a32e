"""What a waitlist costs a sharded event: ``python -m turnstile_bench.waitlists``.

One sharded event, run twice on a fresh embedded endpoint: without a waitlist, then with
one, the same signups and the same cancels. Signups arrive in small batches per shard
(``--batch``), round after round over the shards, until ``--signups``; then ``--cancels``
seated signups, drawn at random (seeded), cancel one at a time, and after each every
wake-up written to the control table is delivered, as the control table's stream would
deliver it (a seat given back in one shard reaching another shard's line). The stream
processor signs as its deployed role; every request it makes is metered
(``turnstile_bench.metering``: units by DynamoDB's rules, from the items written).

Per transition (first decisions, cancels, promotions: every move the decision items'
histories record), side by side: write units, read units and requests, and the wake-ups
written. And what must hold: the seats given at most the capacity; the pool counting
exactly who waits, within the waitlist; nobody waiting for seats the event has free.
docs/hot-events.md ("Waitlists across shards") quotes its output. Figures, not a test.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from turnstile.base.contract import MAX_SHARDS
from turnstile_bench.inprocess import local_environment
from turnstile_bench.options import whole

__all__ = ["WaitlistWorkload", "main", "render", "run_waitlists"]

EVENT = "wl-bench"
NOW = "2026-01-01T00:00:00.000000Z"


@dataclass(frozen=True)
class WaitlistWorkload:
    shards: int = 4
    capacity: int = 100
    waitlist: int = 50
    signups: int = 400
    cancels: int = 60
    #: Signups a shard's batch carries.
    batch: int = 5
    seed: int = 7


def run_waitlists(workload: WaitlistWorkload) -> dict[str, Any]:
    """Both runs (no waitlist, then ``workload.waitlist``), as one JSON document."""
    local_environment()
    from turnstile_bench.endpoint import quiet_handler_environment

    quiet_handler_environment()
    runs = [_run(workload, 0), _run(workload, workload.waitlist)]
    return {"workload": asdict(workload), "runs": runs}


def _run(workload: WaitlistWorkload, waitlist: int) -> dict[str, Any]:
    from turnstile.base.contract import Attr, ControlKey, Function, Status, shard_key, shard_of
    from turnstile.jobs.processor import StreamProcessor, StreamRecord
    from turnstile.storage.escrow import Escrow
    from turnstile.storage.store import SignupStore
    from turnstile_bench.endpoint import LocalEndpoint
    from turnstile_bench.metering import ItemSizes, Meter, MeteredClient
    from turnstile_tools.stream_reader import list_shards, read_page, shard_iterator

    with LocalEndpoint(f"wl{waitlist}") as endpoint:
        tables = {
            "intake_table": endpoint.intake_table,
            "main_table": endpoint.main_table,
            "control_table": endpoint.control_table,
        }
        plain = SignupStore(endpoint.client, sleep=lambda _: None, **tables)
        plain.create_event(EVENT, workload.capacity, NOW, shards=workload.shards, waitlist=waitlist)
        sizes, meter = ItemSizes(), Meter("processor")
        role = endpoint.client_as(Function.PROCESSOR)
        metered = MeteredClient(role, meter, sizes, observer=endpoint.client)
        store = SignupStore(metered, sleep=lambda _: None, **tables)
        processor = StreamProcessor(store, clock=lambda: NOW)
        arn = endpoint.stream_arn(endpoint.control_table)
        shard = list_shards(endpoint.streams, arn)[0]
        position = shard_iterator(endpoint.streams, arn, shard.shard_id, "TRIM_HORIZON")
        sequence = iter(range(10**20, 10**21))
        wakes = 0

        def record(key: str, signup_id: str, **image: Any) -> StreamRecord:
            keys = {Attr.EVENT_ID: key, Attr.SIGNUP_ID: signup_id}
            name = "MODIFY" if "request" in image else "INSERT"
            return StreamRecord(str(next(sequence)), name, keys, {**keys, **image})

        def process(records: Sequence[StreamRecord]) -> None:
            result = processor.process(records)
            if result.failures or result.parked_events:
                raise RuntimeError(
                    f"the processor failed a batch: {result}; refused: {endpoint.denials()}"
                )

        def deliver_wakes() -> None:
            """Every wake-up written since the last call, to the processor, until none."""
            nonlocal position, wakes
            for _ in range(50):
                page = read_page(endpoint.streams, position)
                position = page.next_iterator or position
                woken = {
                    r["dynamodb"]["Keys"]["pk"]["S"]
                    for r in page.records
                    if r["dynamodb"]["Keys"]["pk"]["S"].startswith(ControlKey.WAKE_PREFIX)
                }
                if not woken:
                    return
                wakes += len(woken)
                for pk in sorted(woken):
                    keys = {ControlKey.PK: pk, ControlKey.SK: ControlKey.WAKE_SK}
                    process([StreamRecord(str(next(sequence)), "MODIFY", keys)])
            raise RuntimeError("wake-ups kept coming")

        ids = [f"s{i:05d}" for i in range(workload.signups)]
        by_shard: dict[int, list[str]] = {}
        for sid in ids:
            by_shard.setdefault(shard_of(sid, workload.shards), []).append(sid)
        image = {Attr.SEATS: Decimal(1), "submitted_at": NOW}
        deepest = max(len(v) for v in by_shard.values())
        for start in range(0, deepest, workload.batch):
            for k, mine in sorted(by_shard.items()):
                chunk = mine[start : start + workload.batch]
                if chunk:
                    process([record(shard_key(EVENT, k), sid, **image) for sid in chunk])
        deliver_wakes()

        def decided() -> dict[tuple[str, str], dict[str, Any]]:
            return {
                (item[Attr.EVENT_ID], item[Attr.SIGNUP_ID]): item
                for k in range(workload.shards)
                for item in plain.decision_items(shard_key(EVENT, k))
            }

        seated = sorted(k for k, v in decided().items() if v[Attr.STATUS] == Status.ACCEPTED)
        rng = random.Random(workload.seed)
        for key, sid in rng.sample(seated, min(workload.cancels, len(seated))):
            process([record(key, sid, request="cancel", request_count=Decimal(1))])
            deliver_wakes()

        items = decided()
        transitions = sum(1 + len(v.get(Attr.HISTORY) or []) for v in items.values())
        statuses: dict[str, int] = {}
        for v in items.values():
            statuses[v[Attr.STATUS]] = statuses.get(v[Attr.STATUS], 0) + 1
        pool, shares = Escrow(plain).snapshot(EVENT, workload.shards)
        assert pool is not None
        given = sum(s.taken for s in shares)
        waiting = [
            int(v.get(Attr.SEATS, 1)) for v in items.values() if v[Attr.STATUS] == Status.WAITLISTED
        ]
        snap = meter.snapshot()
        return {
            "waitlist": waitlist,
            "transitions": transitions,
            "statuses": dict(sorted(statuses.items())),
            "write_units": snap.total_write_units,
            "read_units": snap.total_read_units,
            "requests": snap.total_requests,
            "failed_write_units": snap.failed_write_units,
            "wakes": wakes,
            "per_transition": {
                "write_units": round(snap.total_write_units / transitions, 3),
                "read_units": round(snap.total_read_units / transitions, 3),
                "requests": round(snap.total_requests / transitions, 3),
            },
            "checks": {
                "oversold": max(0, given - pool.capacity),
                "pool_counts_who_waits": pool.waiting == len(waiting) <= pool.waitlist,
                "waiting_for_a_free_seat": sum(
                    1 for seats in waiting if seats <= pool.capacity - given
                ),
            },
        }


def render(doc: dict[str, Any]) -> str:
    w = doc["workload"]
    lines = [
        f"waitlists: one event of {w['capacity']} seats over {w['shards']} shards, "
        f"{w['signups']} signups in batches of {w['batch']} a shard, then {w['cancels']} "
        "cancels (wake-ups delivered after each); the stream processor under its role",
        "",
        f"{'waitlist':>9} {'transitions':>11} {'WU/tr':>7} {'RU/tr':>7} {'req/tr':>7} "
        f"{'wake-ups':>8} {'oversold':>8} {'waiting beside a free seat':>27} "
        f"{'pool counts who waits':>21}",
    ]
    for r in doc["runs"]:
        p, c = r["per_transition"], r["checks"]
        lines.append(
            f"{r['waitlist']:>9} {r['transitions']:>11} {p['write_units']:>7.3f} "
            f"{p['read_units']:>7.3f} {p['requests']:>7.3f} {r['wakes']:>8} "
            f"{c['oversold']:>8} {c['waiting_for_a_free_seat']:>27} "
            f"{'yes' if c['pool_counts_who_waits'] else 'NO':>21}"
        )
    for r in doc["runs"]:
        lines.append(f"  waitlist {r['waitlist']}: {r['statuses']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnstile_bench.waitlists")
    defaults = WaitlistWorkload()
    parser.add_argument("--shards", type=whole(2, "2 shards or more"), default=defaults.shards)
    parser.add_argument("--capacity", type=whole(1, "1 seat or more"), default=defaults.capacity)
    parser.add_argument("--waitlist", type=whole(1, "1 or more"), default=defaults.waitlist)
    parser.add_argument("--signups", type=whole(1, "1 or more"), default=defaults.signups)
    parser.add_argument("--cancels", type=whole(0, "0 or more"), default=defaults.cancels)
    parser.add_argument("--batch", type=whole(1, "1 or more"), default=defaults.batch)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args(argv)
    if args.shards > MAX_SHARDS:
        parser.error(f"argument --shards: expected 2 to {MAX_SHARDS} shards, got '{args.shards}'")
    workload = WaitlistWorkload(
        shards=args.shards,
        capacity=args.capacity,
        waitlist=args.waitlist,
        signups=args.signups,
        cancels=args.cancels,
        batch=args.batch,
    )
    doc = run_waitlists(workload)
    print(render(doc))
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
