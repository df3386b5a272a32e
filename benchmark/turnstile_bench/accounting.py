"""Per first decision, all in: every part of a way, and the floor of its contract.

*All in* is every request a way's functions make for the run's decisions, counted by the
metering's rules (``turnstile_bench/metering.py``): every write and read as DynamoDB bills
it, every global secondary index entry, every failed condition and cancelled transaction.
For turnstile that is four parts, each on a meter of its own: the producers (the intake put
and its ``undecided`` index entry), the stream processor (decision items and commits), the
sweeper (a run of ``turnstile.jobs.sweeper.Sweeper`` over the run's intake: the marker's
removal, an intake update and an index delete per record, and the reads that find them) and
the due-holds releaser (a run of ``turnstile.jobs.due_holds.release_due_holds``). The other
ways have one part, their producers, which do everything.

The *floor* is the fewest write units a way's contract needs for the same decisions, from
the run's own item sizes and write counts: no retries, no failed writes, no index entries,
no bookkeeping. For turnstile: one intake write per signup, one decision write per
decision and one commit (the event item's counters, without the journal) per event per
batch, as many as the run made. An all-in figure far above its floor says how much the way
pays beyond what it must.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnstile.base.contract import Attr, ControlKey
from turnstile_bench.metering import MeterSnapshot, combine, item_size, write_units
from turnstile_bench.prices import Prices

__all__ = [
    "Floor",
    "all_in_figures",
    "commit_floor",
    "decision_floor",
    "event_items",
    "part_figures",
    "scan_items",
]


@dataclass(frozen=True)
class Floor:
    """The fewest write units a contract needs for ``decisions`` decisions.

    ``write_units``: units in all, by what is written; ``writes``: how many writes of each.
    """

    contract: str
    write_units: Mapping[str, float] = field(default_factory=dict)
    writes: Mapping[str, int] = field(default_factory=dict)

    @property
    def total_write_units(self) -> float:
        return float(sum(self.write_units.values()))

    def to_dict(self, decisions: int) -> dict[str, Any]:
        n = max(1, decisions)
        return {
            "contract": self.contract,
            "write_units_per_decision": round(self.total_write_units / n, 4),
            "parts_per_decision": {k: round(v / n, 4) for k, v in self.write_units.items()},
            "write_units": {k: float(v) for k, v in self.write_units.items()},
            "writes": dict(self.writes),
        }


def scan_items(
    client: Any, table: str, attributes: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every item of ``table``, read consistently (unmetered: after the run): whole, or
    with only the named ``attributes``."""
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    if attributes:
        names = {f"#a{i}": a for i, a in enumerate(attributes)}
        kwargs["ProjectionExpression"] = ", ".join(names)
        kwargs["ExpressionAttributeNames"] = names
    items: list[dict[str, Any]] = []
    while True:
        page = client.scan(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def event_items(
    items: Iterable[Mapping[str, Any]], sort_key: str = ControlKey.EVENT_SK
) -> list[Mapping[str, Any]]:
    """Of a control table's items, the event items (``EVENT#<id>``, ``sort_key``); with
    another ``sort_key``, the counter items a lock-target table keeps per event."""
    out = []
    for item in items:
        pk = str(item.get(ControlKey.PK, {}).get("S", ""))
        sk = str(item.get(ControlKey.SK, {}).get("S", ""))
        if pk.startswith(ControlKey.EVENT_PREFIX) and sk == sort_key:
            out.append(item)
    return out


def commit_floor(
    items: Iterable[Mapping[str, Any]], transactional: bool = False
) -> tuple[float, int]:
    """(write units, writes) of the counter commits the items' ``version`` counts (each
    successful commit raises it by one; absent: none yet), each sized on the item as it
    stands without its journal (the counters alone). ``transactional``: each commit was
    part of a transaction, at twice the units."""
    units = 0.0
    writes = 0
    for item in items:
        version = int(item.get(Attr.VERSION, {"N": "0"})["N"])
        counters = {k: v for k, v in item.items() if k != Attr.JOURNAL}
        units += version * write_units(item_size(counters), transactional=transactional)
        writes += version
    return units, writes


def decision_floor(
    sizes_by_status: Mapping[str, Sequence[int]], transactional_statuses: Iterable[str] = ()
) -> tuple[float, int]:
    """(write units, writes) of writing each decision item once, at its size; those of the
    ``transactional_statuses`` inside a transaction (twice the units)."""
    doubled = set(transactional_statuses)
    units = 0.0
    writes = 0
    for status, sizes in sizes_by_status.items():
        for size in sizes:
            units += write_units(size, transactional=status in doubled)
            writes += 1
    return units, writes


def _rounded(value: float) -> float:
    return round(value, 4)


def part_figures(snapshot: MeterSnapshot, decisions: int) -> dict[str, Any]:
    """One part's units and requests per decision (index entries and failed writes in the
    write units, and also apart)."""
    n = max(1, decisions)
    return {
        "write_units_per_decision": _rounded(snapshot.total_write_units / n),
        "index_write_units_per_decision": _rounded(snapshot.total_index_write_units / n),
        "failed_write_units_per_decision": _rounded(snapshot.failed_write_units / n),
        "read_units_per_decision": _rounded(snapshot.total_read_units / n),
        "requests_per_decision": _rounded(snapshot.total_requests / n),
        "write_units": snapshot.total_write_units,
        "read_units": snapshot.total_read_units,
        "requests": snapshot.total_requests,
        "requests_by_operation": dict(sorted(snapshot.requests.items())),
    }


def all_in_figures(
    meters: Mapping[str, MeterSnapshot],
    roles: Sequence[str],
    decisions: int,
    prices: Prices,
    floor: Floor | None = None,
) -> dict[str, Any]:
    """Per first decision, everything ``roles`` did: the sum, each part, and the floor."""
    n = max(1, decisions)
    total = combine(meters[role] for role in roles)
    writes = total.total_write_units / n
    reads = total.total_read_units / n
    out: dict[str, Any] = {
        "note": (
            "per first decision, every write and read of every part of the way, as DynamoDB "
            "bills them: index entries, failed conditions and cancelled transactions included"
        ),
        "decisions": decisions,
        "parts": {role: part_figures(meters[role], decisions) for role in roles},
        "write_units_per_decision": _rounded(writes),
        "read_units_per_decision": _rounded(reads),
        "requests_per_decision": _rounded(total.total_requests / n),
        "failed_write_units_per_decision": _rounded(total.failed_write_units / n),
        "cost_per_million_usd": round(prices.per_million_decisions_usd(writes, reads), 4),
    }
    if floor is not None:
        floor_units = floor.total_write_units / n
        out["floor_write_units_per_decision"] = _rounded(floor_units)
        out["above_floor_write_units_per_decision"] = _rounded(writes - floor_units)
    return out
