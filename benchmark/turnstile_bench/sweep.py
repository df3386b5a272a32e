"""The sweeper's units as intake grows: ``turnstile bench --sweeper``.

N decided intake records (each with its decision item) and U undecided ones, on the
embedded endpoint, metered by the benchmark's rules (``turnstile_bench/metering.py``: units from the
items' sizes, never moto's). Four sweep runs, each past the minimum age of the last:

* ``full scan``: the whole intake table, read consistently, and every record's decision,
  as every run did before the index (and as the daily backstop still does): *before*;
* ``index``: the sparse ``undecided`` index only: *after*, every run but one a day;
* ``index, after a burst``: the N decided records still carry the marker (re-emitted, or a
  request on each, decided since the last run; a first put carries none): the one run that
  reads them and removes it;
* ``index, next run``: back to the steady state.

The write units include the index's: a marker removed deletes an index entry, a
re-emission updates one (``turnstile_bench/metering.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from turnstile.base.contract import (
    CONTROL_TABLE,
    INTAKE_TABLE,
    MAIN_TABLE,
    UNDECIDED_INDEX,
    Attr,
    Status,
    undecided_shard,
)
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.store import SignupStore
from turnstile_bench.metering import ItemSizes, Meter, MeteredClient, index_entry, item_size
from turnstile_bench.progress import Progress
from turnstile_bench.strategies import _DecisionWriter
from turnstile_bench.workload import Signup, Workload, generate, intake_item

__all__ = [
    "METHOD",
    "SweepRun",
    "Tables",
    "index_entry_size",
    "load",
    "mark",
    "measure",
    "render_markdown",
    "run_sweeper_scale",
]

METHOD = (
    "sweeper runs against the embedded endpoint (moto server), metered by DynamoDB's "
    "published rules from the items' sizes; decided records written with their decision "
    "items straight into the tables (intake items of 350-900 bytes, the benchmark's "
    "workload), undecided ones submitted an hour before the sweeper's clock"
)
#: Undecided records were submitted this long before the sweeper's clock: all are old.
SUBMITTED_AT = "2026-01-01T00:00:00.000000Z"
#: The sweeper's clock, an hour later; each measured run is ``RUN_GAP_S`` after the last.
SWEEP_AT = 1_767_229_200.0
RUN_GAP_S = 600.0
MIN_AGE_S = 300.0
BATCH = 25
#: Removing 100,000 markers takes moto (one request at a time) half an hour; the burst's
#: units grow linearly with the decided records it unmarks, so 10,000 shows them.
BURST_UP_TO = 10_000


@dataclass(frozen=True)
class Tables:
    intake: str = INTAKE_TABLE.name
    main: str = MAIN_TABLE.name
    control: str = CONTROL_TABLE.name

    def store(self, client: Any) -> SignupStore:
        return SignupStore(
            client, intake_table=self.intake, main_table=self.main, control_table=self.control
        )


@dataclass(frozen=True)
class SweepRun:
    """One measured sweep run."""

    decided: int
    undecided: int
    path: str
    read_units: float
    write_units: float
    requests: int
    found_undecided: int
    re_emitted: int
    unmarked: int
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def index_entry_size(item: dict[str, Any]) -> int:
    """The size of an intake item's entry in the ``undecided`` index (what a read of it is
    charged on): the table's key, the marker and the projected attributes."""
    entry = index_entry(item, UNDECIDED_INDEX, (Attr.EVENT_ID, Attr.SIGNUP_ID))
    return item_size(entry) if entry is not None else 0


def _write_all(client: Any, table: str, items: Iterable[dict[str, Any]]) -> None:
    chunk: list[dict[str, Any]] = []

    def flush() -> None:
        request: dict[str, Any] = {table: [{"PutRequest": {"Item": i}} for i in chunk]}
        while request:
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
        chunk.clear()

    for item in items:
        chunk.append(item)
        if len(chunk) == BATCH:
            flush()
    if chunk:
        flush()


def load(
    client: Any,
    sizes: ItemSizes,
    tables: Tables,
    decided: int,
    undecided: int,
    event_id: str = "bench-ev00",
    first: int = 0,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Write ``decided`` decided records (intake item without the marker, as after their
    marker was removed, and decision item) and ``undecided`` marked ones, numbered from
    ``first``; returns the decided intake items (``mark`` rewrites them marked)."""
    writer_client = MeteredClient(client, Meter("setup"), sizes)
    writer = _DecisionWriter(tables.store(writer_client))
    workload = Workload(events=1, signups=decided, seed=first + 6) if decided else None
    signups = generate(workload) if workload else []
    items: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    for i, s in enumerate(signups):
        signup_id = f"d{first + i:07d}-{s.signup_id}"
        item = intake_item(event_id, signup_id, s.seats, s.attributes, SUBMITTED_AT)
        items.append(item)
        kept = Signup(event_id, signup_id, s.seats, s.attributes)
        decisions.append(writer.item(kept, SUBMITTED_AT, Status.REJECTED, None))
    if progress:
        progress.phase(f"sweeper: load {decided:,} decided + {undecided} undecided", 2)
    _write_all(writer_client, tables.intake, items)
    _write_all(writer_client, tables.main, decisions)
    if progress:
        progress.advance()
    open_items = []
    for i in range(undecided):
        signup_id = f"o{first + i:07d}"
        open_items.append(
            intake_item(
                event_id, signup_id, 1, {"name": "still pending"}, SUBMITTED_AT, marked=True
            )
        )
    _write_all(writer_client, tables.intake, open_items)
    if progress:
        progress.advance()
    return items


def mark(client: Any, sizes: ItemSizes, tables: Tables, items: Sequence[dict[str, Any]]) -> None:
    """Rewrite intake items with the marker: decided records not yet unmarked."""
    writer_client = MeteredClient(client, Meter("setup"), sizes)
    marked = []
    for item in items:
        key = (item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"])
        marked.append({**item, Attr.UNDECIDED: {"S": undecided_shard(*key)}})
    _write_all(writer_client, tables.intake, marked)


def measure(
    client: Any,
    sizes: ItemSizes,
    tables: Tables,
    path: str,
    at: float,
    decided: int,
    undecided: int,
) -> SweepRun:
    """One sweep run at ``at``, reading the whole table (``path == "full scan"``) or the
    index; its read and write units, through a meter of its own."""
    meter = Meter("sweeper")
    store = tables.store(MeteredClient(client, meter, sizes))
    sweeper = Sweeper(
        store,
        owner="bench-sweeper",
        min_age_s=MIN_AGE_S,
        clock=lambda: at,
        full_scan_every_s=0.0 if path == "full scan" else math.inf,
    )
    started = time.perf_counter()
    result = sweeper.sweep(f"bench-{at:.0f}")
    wall = time.perf_counter() - started
    if result.status != "succeeded":
        raise RuntimeError(f"sweep run {path!r} did not succeed: {result.to_dict()}")
    snap = meter.snapshot()
    return SweepRun(
        decided=decided,
        undecided=undecided,
        path=path,
        read_units=snap.total_read_units,
        write_units=snap.total_write_units,
        requests=snap.total_requests,
        found_undecided=result.undecided,
        re_emitted=result.re_emitted,
        unmarked=result.unmarked,
        wall_s=round(wall, 2),
    )


def run_sweeper_scale(
    decided_counts: Sequence[int],
    undecided: int,
    progress: Progress,
    burst_up_to: int = BURST_UP_TO,
) -> dict[str, Any]:
    """Each count of decided records on a fresh endpoint: the four runs, in order (the
    burst's two only up to ``burst_up_to`` decided records)."""
    from turnstile_bench.endpoint import LocalEndpoint

    runs: list[SweepRun] = []
    for decided in decided_counts:
        with LocalEndpoint(f"sweep-{decided}") as endpoint:
            tables = Tables(endpoint.intake_table, endpoint.main_table, endpoint.control_table)
            sizes = ItemSizes()
            items = load(endpoint.client, sizes, tables, decided, undecided, progress=progress)
            at = SWEEP_AT
            paths = ["full scan", "index"]
            if decided <= burst_up_to:
                paths += ["index, after a burst", "index, next run"]
            for path in paths:
                if path == "index, after a burst":
                    progress.phase(f"sweeper: mark {decided:,} decided records", 1)
                    mark(endpoint.client, sizes, tables, items)
                progress.phase(f"sweeper: {path} ({decided:,} decided)", 1)
                runs.append(
                    measure(endpoint.client, sizes, tables, path, at, decided, undecided)
                )
                at += RUN_GAP_S
    progress.finish()
    return {"method": METHOD, "runs": [r.to_dict() for r in runs]}


def render_markdown(doc: dict[str, Any]) -> str:
    """The runs as a markdown table."""
    lines = [
        "| decided | undecided | run | read units | write units | requests | re-emitted "
        "| markers removed | wall s |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in doc["runs"]:
        lines.append(
            f"| {r['decided']:,} | {r['undecided']} | {r['path']} | {r['read_units']:,.1f} "
            f"| {r['write_units']:,.0f} | {r['requests']:,} | {r['re_emitted']} "
            f"| {r['unmarked']:,} | {r['wall_s']} |"
        )
    return "\n".join(lines)
