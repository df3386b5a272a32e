"""``turnstile audit``: check invariants 1-4 of DESIGN.md against the tables.

Counting rows is the audit, never the decision path (Query and Scan are only
read-committed against transactions; a counter item is what keeps decisions safe).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from turnstile.clock import age_s
from turnstile.contract import EVENT_SORT_KEY, Attr, Reason, Status
from turnstile.store import EventRecord, SignupStore

__all__ = ["AuditReport", "EventAudit", "audit"]


@dataclass
class EventAudit:
    event_id: str
    capacity: int | None = None
    taken: int | None = None
    accepted_seats: int = 0
    accepted: int = 0
    rejected: int = 0
    pending: int = 0
    oldest_pending_s: float | None = None
    #: Pending records with no usable ``submitted_at`` (missing, junk, the future):
    #: their age is unknown, so they count as past the grace, never as young.
    pending_undated: int = 0
    unmaterialized: int = 0
    violations: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "capacity": self.capacity,
            "taken": self.taken,
            "accepted_seats": self.accepted_seats,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "pending": self.pending,
            "oldest_pending_s": self.oldest_pending_s,
            "pending_undated": self.pending_undated,
            "unmaterialized": self.unmaterialized,
            "violations": self.violations,
        }


@dataclass
class AuditReport:
    events: list[EventAudit]

    @property
    def ok(self) -> bool:
        return not any(e.violations for e in self.events)

    @property
    def totals(self) -> dict[str, int]:
        return {
            "events": len(self.events),
            "accepted": sum(e.accepted for e in self.events),
            "rejected": sum(e.rejected for e in self.events),
            "pending": sum(e.pending for e in self.events),
            "violations": sum(len(e.violations) for e in self.events),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "totals": self.totals,
            "events": [e.to_dict() for e in self.events],
        }


def audit_event(
    event_id: str,
    event_item: Mapping[str, Any] | None,
    decisions: Iterable[Mapping[str, Any]],
    intake: Iterable[Mapping[str, Any]],
    journal_ids: set[str],
    pending_grace_s: float,
    now: datetime,
) -> EventAudit:
    """Check one event's rows: pure, so tests can feed it broken tables directly."""
    report = EventAudit(event_id=event_id)
    decided = {d[Attr.SIGNUP_ID]: d for d in decisions}
    v = report.violations
    sid = Attr.SIGNUP_ID
    for d in decided.values():
        status = d.get(Attr.STATUS)
        if status == Status.ACCEPTED:
            report.accepted += 1
            report.accepted_seats += int(d.get(Attr.SEATS, 0))
            if d.get(Attr.POSITION) is None:
                v.append(f"{d[Attr.SIGNUP_ID]}: accepted without a position")
        elif status == Status.REJECTED:
            report.rejected += 1
            if d.get(Attr.REASON) not in Reason.ALL:
                v.append(f"{d[sid]}: rejected with unknown reason {d.get(Attr.REASON)!r}")
        else:
            v.append(f"{d[Attr.SIGNUP_ID]}: status {status!r}")
        if not d.get(Attr.SEQUENCE_NUMBER):
            v.append(f"{d[Attr.SIGNUP_ID]}: decision has no sequence number")

    # Invariant 1: never oversold; taken equals the accepted seats.
    if event_item is None:
        if report.accepted:
            v.append(f"{report.accepted} accepted signups but no event item")
    else:
        report.capacity = int(event_item.get(Attr.CAPACITY, 0))
        report.taken = int(event_item.get(Attr.TAKEN, 0))
        report.unmaterialized = len(journal_ids - set(decided))
        if report.accepted_seats > report.capacity:
            v.append(
                f"oversold: {report.accepted_seats} seats accepted, capacity {report.capacity}"
            )
        if report.unmaterialized == 0 and report.accepted_seats != report.taken:
            v.append(
                f"taken is {report.taken} but accepted seats add up to {report.accepted_seats}"
            )

    # Invariant 3: arrival order. Positions grow with sequence numbers, and no request was
    # rejected capacity_full while it fitted into what was left at its turn. Capacity may
    # have changed since: judged against the lowest it has been, a rejection made before
    # a raise is not taken for one that fitted.
    ordered = sorted(decided.values(), key=lambda d: int(d.get(Attr.SEQUENCE_NUMBER) or 0))
    capacity = report.capacity
    if capacity is not None and event_item is not None:
        lowest = event_item.get(Attr.MIN_CAPACITY)
        capacity = min(capacity, int(lowest)) if lowest is not None else capacity
    taken = 0
    last_position = 0
    for d in ordered:
        if d.get(Attr.STATUS) == Status.ACCEPTED:
            position = int(d.get(Attr.POSITION) or 0)
            if position <= last_position:
                v.append(f"{d[Attr.SIGNUP_ID]}: position {position} out of stream order")
            last_position = position
            taken += int(d.get(Attr.SEATS, 0))
        elif (
            d.get(Attr.REASON) == Reason.CAPACITY_FULL
            and capacity is not None
            and int(d.get(Attr.SEATS, 0)) <= capacity - taken
        ):
            v.append(f"{d[Attr.SIGNUP_ID]}: rejected capacity_full although it fitted")

    # Invariants 2 and 4: every intake record gets exactly one decision. A producer's
    # clock cannot hide a lost record: an unknown or future age counts as past the grace.
    overdue = 0
    for record in intake:
        signup_id = record[Attr.SIGNUP_ID]
        if signup_id in decided or signup_id in journal_ids:
            continue
        report.pending += 1
        age = age_s(record.get(Attr.SUBMITTED_AT), now)
        if age is None:
            report.pending_undated += 1
            overdue += 1
            continue
        report.oldest_pending_s = max(report.oldest_pending_s or 0.0, age)
        overdue += age > pending_grace_s
    if overdue:
        oldest = report.oldest_pending_s
        known = f"the oldest known for {oldest:.0f} s" if oldest is not None else "no known age"
        undated = (
            f", {report.pending_undated} with no usable submitted_at (counted as old)"
            if report.pending_undated
            else ""
        )
        v.append(
            f"{overdue} of {report.pending} pending past the {pending_grace_s:.0f} s grace "
            f"({known}{undated})"
        )
    return report


def audit(
    store: SignupStore,
    event_id: str | None = None,
    pending_grace_s: float = 300.0,
    now: datetime | None = None,
) -> AuditReport:
    """Read both tables (or one event's partition) and check every event."""
    now = now or datetime.now(UTC)
    main: dict[str, list[dict[str, Any]]] = {}
    for item in store.scan(store.main_table, event_id):
        main.setdefault(item[Attr.EVENT_ID], []).append(item)
    intake: dict[str, list[dict[str, Any]]] = {}
    for item in store.scan(store.intake_table, event_id):
        intake.setdefault(item[Attr.EVENT_ID], []).append(item)
    reports = []
    event_ids = set(main) | set(intake) | ({event_id} if event_id else set())
    # Partitions starting with '#' hold system items (the sweeper's), never events.
    for eid in sorted(e for e in event_ids if not e.startswith("#")):
        items = main.get(eid, [])
        event_item = next((i for i in items if i[Attr.SIGNUP_ID] == EVENT_SORT_KEY), None)
        decisions = [i for i in items if i[Attr.SIGNUP_ID] != EVENT_SORT_KEY and Attr.STATUS in i]
        journal_ids: set[str] = set()
        if event_item is not None and event_item.get(Attr.JOURNAL) is not None:
            record = EventRecord.from_values(event_item)
            if record.journal:
                journal_ids = {d.signup_id for d in record.journal.decisions}
        reports.append(
            audit_event(
                eid, event_item, decisions, intake.get(eid, []), journal_ids, pending_grace_s, now
            )
        )
    return AuditReport(events=reports)
