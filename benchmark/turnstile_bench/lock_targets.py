"""Two more ways to decide: a lock target made on purpose, changed in one transaction with
the decision.

Counting rows cannot be made safe (the rows that conflict do not exist yet), so both ways
give the conflict an item to land on, and write that item and the decision item in the
same ``TransactWriteItems``: either both change or neither does.

* ``transactional``: a counter item per event (``taken``, ``accepted``, ``version``) in a
  table of its own, beside a main table whose structure stays as it is. A producer reads
  the counter, then in one transaction updates it on the condition that its version has
  not moved and puts the decision. Two items in a transaction: twice the write units of
  each.
* ``slots``: the lock targets made in advance, one item per seat (``slot#0001`` ...) in a
  table of its own when the event is created (its set-up cost, reported apart). A producer
  reads the event's slots, picks free ones, and in one transaction claims each with a
  conditional update (the slot exists and has no ``owner``) and puts the decision. Slots
  are picked at random among those seen free (``slots``) or the lowest first
  (``slots:order``), which every producer then contends for.

A cancelled transaction says why, item by item (``CancellationReasons``):
``ConditionalCheckFailed`` where a condition failed (the counter moved, the slot was
claimed), ``TransactionConflict`` where another transaction was changing the same item at
the same time. Both count as conflicts and are retried; moto serves one request at a time
and never reports ``TransactionConflict``, so on it every conflict is a failed condition.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import Attr, ControlKey, Status
from turnstile.jobs.processor import utc_now
from turnstile_bench.accounting import Floor, decision_floor, event_items, scan_items
from turnstile_bench.endpoint import LocalEndpoint
from turnstile_bench.metering import ItemSizes, Meter, MeteredClient, item_size, write_units
from turnstile_bench.progress import Progress
from turnstile_bench.strategies import (
    Holdings,
    StrategyRun,
    TableCensus,
    _DecisionWriter,
    _Producers,
    census,
    counter_floor,
    create_events,
)
from turnstile_bench.workload import Signup, Workload, event_capacities

__all__ = [
    "SLOT_PICKS",
    "cancellation_reasons",
    "claim_slots",
    "create_lock_table",
    "create_slots",
    "is_conflict",
    "run_slots",
    "run_transactional",
    "slot_key",
]

PK, SK = ControlKey.PK, ControlKey.SK
OWNER = "owner"
COUNTER_SK = "COUNTER"
#: How a producer picks the slots it claims among those it saw free.
SLOT_PICKS = ("random", "order")
#: Conflicts a cancelled transaction can report, by cancellation reason code.
CONFLICT_REASONS = ("ConditionalCheckFailed", "TransactionConflict")


def create_lock_table(client: Any, name: str) -> str:
    """Create a way's own table (``pk``, ``sk``), unmetered: it is part of the tables, not
    of a run's cost."""
    client.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": PK, "KeyType": "HASH"},
            {"AttributeName": SK, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": PK, "AttributeType": "S"},
            {"AttributeName": SK, "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def _event_pk(event_id: str) -> dict[str, Any]:
    return {"S": f"EVENT#{event_id}"}


def cancellation_reasons(exc: ClientError) -> list[str]:
    """The reason codes of a cancelled transaction, one per action (``"None"``: that action
    was not why); raises ``exc`` itself for any other error."""
    error = exc.response.get("Error", {})
    if error.get("Code") != "TransactionCanceledException":
        raise exc
    reasons = exc.response.get("CancellationReasons")
    if not reasons:
        raise exc  # no reasons, no way to tell a conflict from anything else
    return [str(r.get("Code") or "None") for r in reasons]


def is_conflict(reasons: Sequence[str]) -> bool:
    """Whether a transaction whose last action is the decision's put was cancelled by
    contention alone: its lock target's conditions failed or another transaction was on
    the same items. A failed condition on the decision itself (made already) or any other
    reason (validation, throttling) is not a conflict and is raised."""
    *targets, decision = reasons
    return (
        decision in ("None", "TransactionConflict")
        and all(r in ("None", *CONFLICT_REASONS) for r in targets)
        and any(r != "None" for r in reasons)
    )


class _Tally:
    """Conflicts, retries and cancellation reasons, counted across producer threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.conflicts = 0
        self.retries = 0
        self.reasons: Counter[str] = Counter()

    def cancelled(self, reasons: Sequence[str]) -> None:
        with self._lock:
            self.conflicts += 1
            self.retries += 1
            self.reasons.update(r for r in reasons if r != "None")

    def retried(self) -> None:
        with self._lock:
            self.retries += 1


def _backoff(rng: random.Random, attempt: int) -> None:
    """A little jitter so the losers do not collide again in lockstep (as optimistic)."""
    time.sleep(rng.uniform(0, 0.002 * min(attempt, 5)))


# -- transactional ----------------------------------------------------------------------


def run_transactional(
    endpoint: LocalEndpoint, workload: Workload, signups: Sequence[Signup], progress: Progress
) -> StrategyRun:
    """A versioned counter per event in its own table, changed in one transaction with the
    decision's put into the main table."""
    sizes = ItemSizes()
    setup = Meter("setup")
    store = create_events(endpoint, workload, sizes, setup)
    table = create_lock_table(endpoint.client, f"bench-{endpoint.label}-counters")
    setup_client = MeteredClient(endpoint.client, setup, sizes)
    for event_id, capacity in event_capacities(workload).items():
        setup_client.put_item(
            TableName=table,
            Item={
                PK: _event_pk(event_id),
                SK: {"S": COUNTER_SK},
                Attr.CAPACITY: {"N": str(capacity)},
                Attr.TAKEN: {"N": "0"},
                Attr.ACCEPTED: {"N": "0"},
                Attr.VERSION: {"N": "0"},
            },
            ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": PK},
        )
    meter = Meter("producers")
    client = MeteredClient(endpoint.client, meter, sizes)
    writer = _DecisionWriter(store)
    tally = _Tally()
    latencies: list[float] = []

    def decide(signup: Signup) -> None:
        started = time.perf_counter()
        submitted_at = utc_now()
        key = {PK: _event_pk(signup.event_id), SK: {"S": COUNTER_SK}}
        rng = random.Random(f"{workload.seed}:{signup.signup_id}")
        attempt = 0
        while True:
            counter = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
            capacity, taken, accepted, version = (
                int(counter[name]["N"])
                for name in (Attr.CAPACITY, Attr.TAKEN, Attr.ACCEPTED, Attr.VERSION)
            )
            if signup.seats > capacity - taken:
                # taken only grows: "full" read from any version is final.
                writer.put(client, writer.item(signup, submitted_at, Status.REJECTED, None))
                break
            decision = writer.item(signup, submitted_at, Status.ACCEPTED, accepted + 1)
            try:
                client.transact_write_items(
                    TransactItems=[
                        {
                            "Update": {
                                "TableName": table,
                                "Key": key,
                                "UpdateExpression": (
                                    "SET #taken = :taken, #accepted = :accepted, #version = :next"
                                ),
                                "ConditionExpression": "#version = :expected",
                                "ExpressionAttributeNames": {
                                    "#taken": Attr.TAKEN,
                                    "#accepted": Attr.ACCEPTED,
                                    "#version": Attr.VERSION,
                                },
                                "ExpressionAttributeValues": {
                                    ":taken": {"N": str(taken + signup.seats)},
                                    ":accepted": {"N": str(accepted + 1)},
                                    ":next": {"N": str(version + 1)},
                                    ":expected": {"N": str(version)},
                                },
                            }
                        },
                        _decision_put(store.main_table, decision),
                    ]
                )
            except ClientError as exc:
                reasons = cancellation_reasons(exc)
                if not is_conflict(reasons):
                    raise
                tally.cancelled(reasons)
                attempt += 1
                _backoff(rng, attempt)
                continue
            break
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    _Producers(signups, workload.producers, progress).run(decide)
    wall = time.perf_counter() - started
    held = {
        item[PK]["S"].removeprefix("EVENT#"): int(item[Attr.TAKEN]["N"])
        for item in scan_items(endpoint.client, table, (PK, Attr.TAKEN))
    }
    recount = census(
        endpoint,
        workload,
        sizes,
        signups=signups,
        holdings=Holdings("counter item per event (a table of its own)", held),
    )
    return StrategyRun(
        name="transactional",
        signups=len(signups),
        wall_s=wall,
        latencies_s=latencies,
        census=recount,
        meters={"producers": meter.snapshot()},
        cost_roles=("producers",),
        conflicts=tally.conflicts,
        retries=tally.retries,
        setup=setup.snapshot(),
        events=workload.events,
        extra={"cancellation_reasons": dict(sorted(tally.reasons.items()))},
        floor=counter_floor(
            recount,
            event_items(scan_items(endpoint.client, table), sort_key=COUNTER_SK),
            transactional=True,
        ),
    )


def _decision_put(table: str, item: dict[str, Any]) -> dict[str, Any]:
    """The decision's put inside a transaction: once only, like ``_DecisionWriter.put``."""
    return {
        "Put": {
            "TableName": table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#sk)",
            "ExpressionAttributeNames": {"#sk": Attr.SIGNUP_ID},
        }
    }


# -- slots ------------------------------------------------------------------------------


def slot_key(event_id: str, number: int) -> dict[str, Any]:
    return {PK: _event_pk(event_id), SK: {"S": f"slot#{number:04d}"}}


def create_slots(client: Any, table: str, capacities: Mapping[str, int]) -> None:
    """One item per seat, 25 to a BatchWriteItem: the event's set-up cost."""
    for event_id, capacity in capacities.items():
        requests = [{"PutRequest": {"Item": slot_key(event_id, n)}} for n in range(1, capacity + 1)]
        for start in range(0, len(requests), 25):
            pending = {table: requests[start : start + 25]}
            while pending:
                pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems")


def _free_slots(client: Any, table: str, event_id: str) -> list[int]:
    """The event's slots without an owner, by number (one consistent Query of them all)."""
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk",
        "ProjectionExpression": "#sk, #owner",
        "ExpressionAttributeNames": {"#pk": PK, "#sk": SK, "#owner": OWNER},
        "ExpressionAttributeValues": {":pk": _event_pk(event_id)},
        "ConsistentRead": True,
    }
    free: list[int] = []
    while True:
        page = client.query(**kwargs)
        free.extend(
            int(item[SK]["S"].removeprefix("slot#"))
            for item in page.get("Items", [])
            if OWNER not in item
        )
        if "LastEvaluatedKey" not in page:
            return free
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def claim_slots(
    client: Any,
    slots_table: str,
    main_table: str,
    event_id: str,
    signup_id: str,
    numbers: Sequence[int],
    decision: dict[str, Any],
) -> None:
    """Claim ``numbers`` for ``signup_id`` and put its decision, in one transaction.

    Each claim is a conditional update: the slot exists (a slot beyond capacity was never
    made, and an update would make it) and nobody owns it. Raises the ``ClientError``
    (``TransactionCanceledException``) if any claim fails: then nothing was written.
    """
    claims = [
        {
            "Update": {
                "TableName": slots_table,
                "Key": slot_key(event_id, number),
                "UpdateExpression": "SET #owner = :owner",
                "ConditionExpression": "attribute_exists(#sk) AND attribute_not_exists(#owner)",
                "ExpressionAttributeNames": {"#sk": SK, "#owner": OWNER},
                "ExpressionAttributeValues": {":owner": {"S": signup_id}},
            }
        }
        for number in numbers
    ]
    client.transact_write_items(TransactItems=[*claims, _decision_put(main_table, decision)])


def _pick(free: Sequence[int], seats: int, how: str, rng: random.Random) -> list[int]:
    if how == "order":
        return sorted(free)[:seats]
    return sorted(rng.sample(list(free), seats))


def run_slots(
    endpoint: LocalEndpoint,
    workload: Workload,
    signups: Sequence[Signup],
    progress: Progress,
    pick: str = "random",
) -> StrategyRun:
    """One item per seat, made with the event; a signup claims free ones in one transaction
    with its decision, picked as ``pick`` says."""
    if pick not in SLOT_PICKS:
        raise ValueError(f"slots are picked {' or '.join(SLOT_PICKS)}, not {pick!r}")
    sizes = ItemSizes()
    setup = Meter("setup")
    store = create_events(endpoint, workload, sizes, setup)
    table = create_lock_table(endpoint.client, f"bench-{endpoint.label}-slots")
    create_slots(MeteredClient(endpoint.client, setup, sizes), table, event_capacities(workload))
    meter = Meter("producers")
    client = MeteredClient(endpoint.client, meter, sizes)
    writer = _DecisionWriter(store)
    tally = _Tally()
    latencies: list[float] = []
    counts = Counter[str]()
    counts_lock = threading.Lock()

    def decide(signup: Signup) -> None:
        started = time.perf_counter()
        submitted_at = utc_now()
        rng = random.Random(f"{workload.seed}:{signup.signup_id}")
        seen_free: list[int] | None = None  # None: read them again
        reads = attempt = 0
        while True:
            if seen_free is None:
                seen_free = _free_slots(client, table, signup.event_id)
                reads += 1
                if len(seen_free) < signup.seats:
                    # Slots are only ever claimed: too few free now is final.
                    writer.put(client, writer.item(signup, submitted_at, Status.REJECTED, None))
                    break
            elif len(seen_free) < signup.seats:
                seen_free = None  # what was seen is used up: look again
                tally.retried()
                continue
            numbers = _pick(seen_free, signup.seats, pick, rng)
            # position: the first seat the signup holds (its slot number).
            decision = writer.item(signup, submitted_at, Status.ACCEPTED, numbers[0])
            try:
                claim_slots(
                    client,
                    table,
                    store.main_table,
                    signup.event_id,
                    signup.signup_id,
                    numbers,
                    decision,
                )
            except ClientError as exc:
                reasons = cancellation_reasons(exc)
                if not is_conflict(reasons):
                    raise
                tally.cancelled(reasons)
                # The reasons say which slots were taken: drop those, try the others seen.
                taken = {n for n, r in zip(numbers, reasons, strict=False) if r != "None"}
                seen_free = [n for n in seen_free if n not in taken]
                attempt += 1
                _backoff(rng, attempt)
                continue
            break
        with counts_lock:
            counts["slot_reads"] += reads
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    _Producers(signups, workload.producers, progress).run(decide)
    wall = time.perf_counter() - started
    by_signup: Counter[tuple[str, str]] = Counter()
    by_event: Counter[str] = Counter()
    for item in scan_items(endpoint.client, table, (PK, OWNER)):
        if OWNER in item:
            event_id = item[PK]["S"].removeprefix("EVENT#")
            by_signup[(event_id, item[OWNER]["S"])] += 1
            by_event[event_id] += 1
    setup_snapshot = setup.snapshot()
    recount = census(
        endpoint,
        workload,
        sizes,
        signups=signups,
        holdings=Holdings(
            "one item per seat (a table of its own)", dict(by_event), dict(by_signup)
        ),
    )
    return StrategyRun(
        name="slots" if pick == "random" else f"slots:{pick}",
        signups=len(signups),
        wall_s=wall,
        latencies_s=latencies,
        census=recount,
        floor=slots_floor(recount, scan_items(endpoint.client, table)),
        meters={"producers": meter.snapshot()},
        cost_roles=("producers",),
        conflicts=tally.conflicts,
        retries=tally.retries,
        setup=setup_snapshot,
        events=workload.events,
        extra={
            "slot_pick": pick,
            "cancellation_reasons": dict(sorted(tally.reasons.items())),
            "slot_reads_per_decision": round(counts["slot_reads"] / max(1, len(signups)), 4),
        },
    )


def slots_floor(recount: TableCensus, slots: Sequence[Mapping[str, Any]]) -> Floor:
    """The floor of ``slots``: each decision written once, and each accepted signup's
    claim of its seats' slots in one transaction with its decision (twice the units of
    each item), sized on the slots as they stand, claimed."""
    decisions, decision_writes = decision_floor(
        recount.decision_sizes_by_status, transactional_statuses=(Status.ACCEPTED,)
    )
    claimed = [slot for slot in slots if OWNER in slot]
    claims = float(sum(write_units(item_size(slot), transactional=True) for slot in claimed))
    return Floor(
        contract=(
            "a decision write per decision + a slot claim per accepted seat, in one "
            "transaction with the decision (x2)"
        ),
        write_units={"decisions": decisions, "slot claims": claims},
        writes={"decisions": decision_writes, "slot claims": len(claimed)},
    )


Way = Callable[[LocalEndpoint, Workload, Sequence[Signup], Progress], StrategyRun]


def slots_picked(pick: str) -> Way:
    """``run_slots`` with its pick fixed, as ``STRATEGIES`` holds it."""

    def run(
        endpoint: LocalEndpoint, workload: Workload, signups: Sequence[Signup], progress: Progress
    ) -> StrategyRun:
        return run_slots(endpoint, workload, signups, progress, pick=pick)

    return run
