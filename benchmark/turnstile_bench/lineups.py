"""``turnstile bench --lineup``: what a commit costs as an event's lineup grows.

One event with holds and a waitlist is signed up for in batches of 100 random-uuid signups,
through the stream processor (as the processor's role) on the embedded endpoint, until its
lineup holds ``capacity + waitlist`` entries. Every request is metered by DynamoDB's rules
(``turnstile_bench.metering``: a write unit a KB of item, twice inside a transaction), the
control table's (the commits: the event item and its lineup pages) apart from the main
table's (the decision items). It runs twice: with pages, as deployed, and with pages
switched off (the lineup always on the event item, as before pages), the second only up
to ``inline_up_to`` entries (the bound before pages was 1,000). Then, on the full lineup,
one batch of confirms and cancels, one a page, and what it costs.

A row per batch is kept; the table shows the batches that start at the sizes asked for.
The processor's CPU is the calling thread's (``time.thread_time``): boto3's work is in it,
the endpoint's (another thread) is not.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from turnstile.base.contract import Attr, ControlKey, Function, Status
from turnstile.base.itemsize import typed_item_size
from turnstile.jobs.processor import StreamProcessor, StreamRecord, utc_now
from turnstile.storage.store import SignupStore
from turnstile_bench.endpoint import LocalEndpoint, quiet_handler_environment
from turnstile_bench.metering import ItemSizes, Meter, MeteredClient, MeterSnapshot
from turnstile_bench.progress import Progress

__all__ = ["LINEUP", "QUICK_LINEUP", "LineupWorkload", "render_lineup", "run_lineup"]

BATCH = 100
EVENT = "lineup"
METHOD = (
    "one event with 600-second holds and a waitlist, batches of 100 random-uuid signups "
    "through the stream processor (signing as its role) on the embedded endpoint, the "
    "clock fixed so no hold lapses; units by DynamoDB's rules from the items written (a "
    "write unit a KB, twice inside a transaction); 'commit' is the control table's writes "
    "(the event item and its lineup pages), 'processor' adds the decision items; CPU is "
    "the processor thread's (boto3 included, the endpoint excluded)"
)


@dataclass(frozen=True)
class LineupWorkload:
    """The event's size and the batches measured."""

    capacity: int = 50_000
    waitlist: int = 10_000
    #: Lineup sizes (entries before a batch) whose batch the table shows.
    sizes: tuple[int, ...] = (0, 200, 300, 500, 900, 2_000, 5_000, 10_000, 20_000, 35_000, 59_900)
    #: The run with pages switched off stops here (the bound before pages: 1,000).
    inline_up_to: int = 1_000
    #: Confirms and cancels on the full lineup, one a page (half each).
    requests: int = 50
    seed: int = 7

    @property
    def entries(self) -> int:
        return self.capacity + self.waitlist


LINEUP = LineupWorkload()
QUICK_LINEUP = LineupWorkload(
    capacity=1_500, waitlist=500, sizes=(0, 200, 300, 500, 900, 1_500, 1_900), requests=20
)


@dataclass
class BatchRow:
    """One batch of the growth: the lineup before it and what its commit cost."""

    entries_before: int
    decisions: int
    commit_write_units: float
    commit_requests: int
    processor_write_units: float
    processor_read_units: float
    processor_requests: int
    event_item_bytes: int
    pages: int
    cpu_ms: float

    def figures(self) -> dict[str, Any]:
        n = max(1, self.decisions)
        return {
            "entries_before": self.entries_before,
            "decisions": self.decisions,
            "commit_wu_per_decision": round(self.commit_write_units / n, 3),
            "processor_wu_per_decision": round(self.processor_write_units / n, 3),
            "processor_ru_per_decision": round(self.processor_read_units / n, 3),
            "processor_requests_per_decision": round(self.processor_requests / n, 3),
            "event_item_bytes": self.event_item_bytes,
            "pages": self.pages,
            "cpu_us_per_decision": round(1000 * self.cpu_ms / n, 1),
        }


class _ByTable:
    """The processor's client: the control table's requests (and transactions naming it:
    the paged commits) metered on ``control``, the rest on ``other``."""

    def __init__(self, control_table: str, control: Any, other: Any) -> None:
        self._table = control_table
        self._control = control
        self._other = other

    def _names_control(self, kwargs: dict[str, Any]) -> bool:
        if kwargs.get("TableName") == self._table:
            return True
        for action in kwargs.get("TransactItems", ()):
            if any(op.get("TableName") == self._table for op in action.values()):
                return True
        return self._table in kwargs.get("RequestItems", {})

    def __getattr__(self, operation: str) -> Any:
        def call(**kwargs: Any) -> Any:
            target = self._control if self._names_control(kwargs) else self._other
            return getattr(target, operation)(**kwargs)

        return call


def _delta(after: MeterSnapshot, before: MeterSnapshot) -> tuple[float, float, int]:
    return (
        after.total_write_units - before.total_write_units,
        after.total_read_units - before.total_read_units,
        after.total_requests - before.total_requests,
    )


@contextmanager
def _pages_off() -> Iterator[None]:
    """The code as it was before pages: the lineup is always encoded on the event item."""
    from turnstile.engine import lineup
    from turnstile.storage import items, lineups

    saved = (lineups.is_paged, items.MAX_ENCODED_ENTRIES)
    lineups.is_paged = lambda before, inline_bytes: False  # type: ignore[assignment]
    items.MAX_ENCODED_ENTRIES = 10**9
    try:
        yield
    finally:
        lineups.is_paged, items.MAX_ENCODED_ENTRIES = saved
        assert lineup.is_paged is saved[0]


class _Run:
    """One event on a fresh endpoint, and the processor deciding its batches."""

    def __init__(self, endpoint: LocalEndpoint, workload: LineupWorkload) -> None:
        self.endpoint = endpoint
        self.workload = workload
        self.sizes = ItemSizes()
        self.commit_meter = Meter("commit")
        self.decision_meter = Meter("decisions")
        tables = {
            "intake_table": endpoint.intake_table,
            "main_table": endpoint.main_table,
            "control_table": endpoint.control_table,
        }
        setup = SignupStore(MeteredClient(endpoint.client, Meter("setup"), self.sizes), **tables)
        self.now = utc_now()
        setup.create_event(
            EVENT,
            workload.capacity,
            self.now,
            waitlist=workload.waitlist,
            hold_seconds=600,
            max_seats=1,
        )
        role = endpoint.client_as(Function.PROCESSOR)
        client = _ByTable(
            endpoint.control_table,
            MeteredClient(role, self.commit_meter, self.sizes, observer=endpoint.client),
            MeteredClient(role, self.decision_meter, self.sizes, observer=endpoint.client),
        )
        self.store = SignupStore(client, sleep=lambda _: None, **tables)
        self.processor = StreamProcessor(self.store, clock=lambda: self.now)
        self.rng = random.Random(workload.seed)
        self.sequence = 4_421_584_500_000_000_017_450_439_091
        self.held: list[str] = []
        self.entries = 0
        self.rows: list[BatchRow] = []

    def _record(self, name: str, signup_id: str, image: dict[str, Any]) -> StreamRecord:
        self.sequence += self.rng.randrange(10, 10_000)
        keys = {Attr.EVENT_ID: EVENT, Attr.SIGNUP_ID: signup_id}
        return StreamRecord(str(self.sequence), name, keys, {**keys, **image})

    def _process(self, records: Sequence[StreamRecord]) -> BatchRow:
        commit_before = self.commit_meter.snapshot()
        decisions_before = self.decision_meter.snapshot()
        cpu = time.thread_time()
        result = self.processor.process(records)
        cpu_ms = 1000 * (time.thread_time() - cpu)
        if result.failures:
            raise RuntimeError(f"the processor failed a batch: {result.failures}")
        commit_w, commit_r, commit_n = _delta(self.commit_meter.snapshot(), commit_before)
        decision_w, decision_r, decision_n = _delta(
            self.decision_meter.snapshot(), decisions_before
        )
        item = self.event_item()
        directory = item.get(Attr.LINEUP_PAGES)
        return BatchRow(
            entries_before=self.entries,
            decisions=len(records),
            commit_write_units=commit_w,
            commit_requests=commit_n,
            processor_write_units=commit_w + decision_w,
            processor_read_units=commit_r + decision_r,
            processor_requests=commit_n + decision_n,
            event_item_bytes=typed_item_size(item),
            pages=len(self.page_keys()) if directory is not None else 0,
            cpu_ms=cpu_ms,
        )

    def grow(self, up_to: int, progress: Progress) -> None:
        """Batches of signups until the lineup holds ``up_to`` entries."""
        while self.entries < up_to:
            count = min(BATCH, up_to - self.entries)
            ids = [str(uuid.UUID(int=self.rng.getrandbits(128))) for _ in range(count)]
            image = {Attr.SEATS: Decimal(1), "submitted_at": self.now}
            row = self._process([self._record("INSERT", s, image) for s in ids])
            self.rows.append(row)
            seats_left = max(0, self.workload.capacity - len(self.held))
            self.held += ids[:seats_left]
            self.entries += count
            progress.advance(count)

    def requests(self, count: int) -> dict[str, Any]:
        """Confirms and cancels of holds spread over the lineup, one a page: one batch."""
        step = max(1, len(self.held) // max(1, count))
        chosen = self.held[::step][:count]
        records = []
        for i, signup_id in enumerate(chosen):
            kind = "confirm" if i % 2 == 0 else "cancel"
            image = {
                Attr.SEATS: Decimal(1),
                "request": kind,
                "request_count": Decimal(1),
                "undecided": "0",
            }
            records.append(self._record("MODIFY", signup_id, image))
        row = self._process(records)
        n = max(1, len(records))
        return {
            "requests": len(records),
            "commit_wu_per_request": round(row.commit_write_units / n, 3),
            "processor_wu_per_request": round(row.processor_write_units / n, 3),
            "processor_requests_per_request": round(row.processor_requests / n, 3),
            "cpu_us_per_request": round(1000 * row.cpu_ms / n, 1),
        }

    def event_item(self) -> dict[str, Any]:
        pk, sk = ControlKey.event(EVENT)
        key = {ControlKey.PK: {"S": pk}, ControlKey.SK: {"S": sk}}
        got = self.endpoint.client.get_item(
            TableName=self.endpoint.control_table, Key=key, ConsistentRead=True
        )
        return dict(got["Item"])

    def page_keys(self) -> list[str]:
        pk = f"{ControlKey.LINEUP_PREFIX}{EVENT}"
        keys: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.endpoint.control_table,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": ControlKey.PK},
            "ExpressionAttributeValues": {":pk": {"S": pk}},
            "ProjectionExpression": "#pk, sk",
        }
        while True:
            page = self.endpoint.client.query(**kwargs)
            keys += [i["sk"]["S"] for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return keys
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def recount(self) -> dict[str, int]:
        """The decision items by status, and the lineup a cold store reads back."""
        statuses: dict[str, int] = {}
        kwargs: dict[str, Any] = {"TableName": self.endpoint.main_table, "ConsistentRead": True}
        while True:
            page = self.endpoint.client.scan(**kwargs)
            for item in page["Items"]:
                status = item[Attr.STATUS]["S"]
                statuses[status] = statuses.get(status, 0) + 1
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        cold = SignupStore(
            self.endpoint.client,
            intake_table=self.endpoint.intake_table,
            main_table=self.endpoint.main_table,
            control_table=self.endpoint.control_table,
        )
        record = cold.load_lineup(cold.get_event(EVENT))
        return {
            **statuses,
            "lineup_holds": len(record.event.holds),
            "lineup_waiting": len(record.event.waiting),
            "taken": record.event.taken,
        }


def _shown(rows: Sequence[BatchRow], sizes: Sequence[int]) -> list[dict[str, Any]]:
    by_start = {row.entries_before: row for row in rows}
    return [by_start[s].figures() for s in sizes if s in by_start]


def run_lineup(workload: LineupWorkload, progress: Progress) -> dict[str, Any]:
    """Both runs, and the requests on the full lineup; the result document."""
    from turnstile_bench.report import machine

    quiet_handler_environment()
    inline_up_to = min(workload.inline_up_to, workload.entries)
    progress.phase("lineup: pages switched off", inline_up_to)
    with LocalEndpoint("lineup-inline") as endpoint, _pages_off():
        inline = _Run(endpoint, workload)
        inline.grow(inline_up_to, progress)
        denials = endpoint.denials()
    progress.phase("lineup: with pages", workload.entries)
    with LocalEndpoint("lineup-paged") as endpoint:
        paged = _Run(endpoint, workload)
        paged.grow(workload.entries, progress)
        after_growth = paged.recount()
        requests = paged.requests(workload.requests)
        after_requests = paged.recount()
        final_item_bytes = typed_item_size(paged.event_item())
        pages = len(paged.page_keys())
        denials += endpoint.denials()
    progress.finish()
    capacity, waitlist = workload.capacity, workload.waitlist
    confirmed = (workload.requests + 1) // 2
    checks = {
        "grown_lineup_is_what_the_decisions_say": (
            after_growth.get(Status.HELD, 0) == after_growth["lineup_holds"] == capacity
            and after_growth.get(Status.WAITLISTED, 0) == after_growth["lineup_waiting"] == waitlist
            and after_growth["taken"] == capacity
        ),
        "never_oversold": after_requests["taken"] <= capacity
        and after_requests.get(Status.HELD, 0) + after_requests.get(Status.ACCEPTED, 0) <= capacity,
        "confirms_accepted": after_requests.get(Status.ACCEPTED, 0) == confirmed,
        # the processor signed as its deployed role: nothing it did was refused
        "processor_role_refused_nothing": not denials,
    }
    return {
        "method": METHOD,
        "machine": machine(),
        "workload": asdict(workload),
        "inline": _shown(inline.rows, workload.sizes),
        "paged": _shown(paged.rows, workload.sizes),
        "requests_on_the_full_lineup": requests,
        "final": {
            "event_item_bytes": final_item_bytes,
            "pages": pages,
            **{k: v for k, v in after_requests.items()},
        },
        "checks": checks,
        "denials": denials,
    }


def render_lineup(doc: dict[str, Any]) -> str:
    """The table: each size's batch, pages off beside pages on."""
    inline = {r["entries_before"]: r for r in doc["inline"]}
    lines = [
        "turnstile bench --lineup: " + doc["method"],
        "",
        f"{'entries before':>14} | {'commit WU/decision':>28} | {'processor WU/decision':>28} "
        f"| {'event item B after':>18} | {'pages':>5} | {'CPU µs/decision':>22}",
        f"{'':>14} | {'on the item':>13}  {'in pages':>12} | {'on the item':>13}  "
        f"{'in pages':>12} | {'':>18} | {'':>5} | {'on the item':>11}  {'in pages':>8}",
    ]

    def value(row: dict[str, Any] | None, name: str, width: int) -> str:
        return f"{row[name]:>{width}}" if row is not None else f"{'-':>{width}}"

    for row in doc["paged"]:
        before = inline.get(row["entries_before"])
        lines.append(
            f"{row['entries_before']:>14,} | {value(before, 'commit_wu_per_decision', 13)}  "
            f"{row['commit_wu_per_decision']:>12} | "
            f"{value(before, 'processor_wu_per_decision', 13)}  "
            f"{row['processor_wu_per_decision']:>12} | {row['event_item_bytes']:>18,} | "
            f"{row['pages']:>5} | {value(before, 'cpu_us_per_decision', 11)}  "
            f"{row['cpu_us_per_decision']:>8}"
        )
    r = doc["requests_on_the_full_lineup"]
    final = doc["final"]
    lines += [
        "",
        f"{r['requests']} confirms and cancels on the full lineup, one a page, in one batch: "
        f"commit {r['commit_wu_per_request']} WU a request, processor "
        f"{r['processor_wu_per_request']} WU and {r['processor_requests_per_request']} "
        f"requests a request, {r['cpu_us_per_request']} µs CPU a request",
        f"after them: {final['pages']} pages, the event item {final['event_item_bytes']:,} B; "
        + ", ".join(f"{k} {v}" for k, v in final.items() if k not in ("pages", "event_item_bytes")),
        "checks: "
        + "; ".join(f"{k} {'PASS' if ok else 'FAIL'}" for k, ok in doc["checks"].items()),
    ]
    return "\n".join(lines)
