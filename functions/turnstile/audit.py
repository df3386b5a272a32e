"""``turnstile audit``: check invariants 1-4 of DESIGN.md against the tables.

Counting rows is the audit, never the decision path (Query and Scan are only
read-committed against transactions; a counter item is what keeps decisions safe).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from turnstile.contract import Attr, HoldAttr, Reason, Status
from turnstile.store import EventRecord, SignupStore

__all__ = ["AuditReport", "EventAudit", "audit", "audit_hold"]


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
    unmaterialized: int = 0
    #: Undecided records parked behind the event's hold (not counted in ``pending``).
    held: int = 0
    held_for_s: float | None = None
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
            "unmaterialized": self.unmaterialized,
            "held": self.held,
            "held_for_s": self.held_for_s,
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
            "held": sum(e.held for e in self.events),
            "violations": sum(len(e.violations) for e in self.events),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "totals": self.totals,
            "events": [e.to_dict() for e in self.events],
        }


def _age_s(timestamp: Any, now: datetime) -> float | None:
    if not isinstance(timestamp, str):
        return None
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (now - then).total_seconds())


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
    # rejected capacity_full while it fitted into what was left at its turn.
    ordered = sorted(decided.values(), key=lambda d: int(d.get(Attr.SEQUENCE_NUMBER) or 0))
    capacity = report.capacity
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

    # Invariants 2 and 4: every intake record gets exactly one decision.
    for record in intake:
        signup_id = record[Attr.SIGNUP_ID]
        if signup_id in decided or signup_id in journal_ids:
            continue
        report.pending += 1
        age = _age_s(record.get(Attr.SUBMITTED_AT), now)
        if age is not None:
            report.oldest_pending_s = max(report.oldest_pending_s or 0.0, age)
    if report.pending and (report.oldest_pending_s or 0.0) > pending_grace_s:
        v.append(
            f"{report.pending} pending, the oldest for {report.oldest_pending_s:.0f} s "
            f"(more than {pending_grace_s:.0f} s)"
        )
    return report


def audit_hold(
    report: EventAudit,
    hold: Mapping[str, Any],
    held_ids: set[str],
    pending_grace_s: float,
    now: datetime,
) -> None:
    """Account for a held event: ``held_ids`` are its parked, undecided signups.

    They are waiting in arrival order, not lost; but a hold is a failure being ridden out,
    so one older than the pending grace period is a violation (invariants 3 and 4 wait on
    it). Their order, once released, is checked like any decision's.
    """
    report.held = len(held_ids)
    report.held_for_s = _age_s(hold.get(HoldAttr.HELD_SINCE), now)
    if report.held_for_s is not None and report.held_for_s > pending_grace_s:
        report.violations.append(
            f"held for {report.held_for_s:.0f} s (more than {pending_grace_s:.0f} s): "
            f"{report.held} records parked since sequence number "
            f"{hold.get(HoldAttr.FIRST_SEQUENCE_NUMBER)}, last error "
            f"{hold.get(HoldAttr.ERROR, 'unknown')}"
        )


def audit(
    store: SignupStore,
    event_id: str | None = None,
    pending_grace_s: float = 300.0,
    now: datetime | None = None,
) -> AuditReport:
    """Read the tables (or one event's partitions) and check every event."""
    now = now or datetime.now(UTC)
    event_items = {item[Attr.EVENT_ID]: item for item in store.event_items(event_id)}
    main: dict[str, list[dict[str, Any]]] = {}
    for item in store.scan(store.main_table, event_id):
        main.setdefault(item[Attr.EVENT_ID], []).append(item)
    intake: dict[str, list[dict[str, Any]]] = {}
    for item in store.scan(store.intake_table, event_id):
        intake.setdefault(item[Attr.EVENT_ID], []).append(item)
    holds = store.holds(event_id)
    reports = []
    event_ids = set(event_items) | set(main) | set(intake) | ({event_id} if event_id else set())
    for eid in sorted(event_ids | set(holds)):
        # The main table holds only decisions (events live in the control table).
        decisions = main.get(eid, [])
        event_item = event_items.get(eid)
        journal_ids: set[str] = set()
        if event_item is not None and event_item.get(Attr.JOURNAL) is not None:
            record = EventRecord.from_values(event_item)
            if record.journal:
                journal_ids = {d.signup_id for d in record.journal.decisions}
        held_ids: set[str] = set()
        if eid in holds:
            decided = {d[Attr.SIGNUP_ID] for d in decisions} | journal_ids
            parked = {r.signup_id for r in store.parked_requests(eid)}
            held_ids = parked - decided
        rows = [r for r in intake.get(eid, []) if r[Attr.SIGNUP_ID] not in held_ids]
        report = audit_event(eid, event_item, decisions, rows, journal_ids, pending_grace_s, now)
        if eid in holds:
            audit_hold(report, holds[eid], held_ids, pending_grace_s, now)
        reports.append(report)
    return AuditReport(events=reports)
