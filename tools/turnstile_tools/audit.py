"""``turnstile audit``: check invariants 1-4 against the tables.

Counting rows is the audit, never the decision path (Query and Scan are only
read-committed against transactions; a counter item is what keeps decisions safe).

The audit reads while the processor may be deciding. Per event it reads the event item,
then the decisions and intake records, then the event item again: every commit moves the
event's ``version``, so an unchanged version means the rows it read belong together
(decision items written from the last commit's journal in between are accounted for by
the journal). If the version moved, it reads again, up to ``attempts`` times; an event
that never holds still is reported *inconclusive*, never as a false violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from turnstile.base.clock import age_s, parse_timestamp
from turnstile.base.contract import (
    Attr,
    EventState,
    HistoryKey,
    ParkAttr,
    Reason,
    Status,
    fits_partition_key,
    is_event_key,
    shard_key,
    shard_position,
    split_shard_key,
)
from turnstile.base.errors import EventNotFoundError
from turnstile.engine.escrow import Pool
from turnstile.engine.lifecycle import ALLOWED_TRANSITIONS, SEATED
from turnstile.jobs.sweeper import request_unanswered, requests_answered
from turnstile.storage.events import EventRecord
from turnstile.storage.items import IN_LINEUP, history_of
from turnstile.storage.ports import AuditStore

__all__ = ["READ_ATTEMPTS", "AuditReport", "EventAudit", "audit", "audit_event", "audit_parking"]

#: Reads of one event before it is called inconclusive.
READ_ATTEMPTS = 3


@dataclass
class EventAudit:
    event_id: str
    capacity: int | None = None
    #: The event item's counter: seats held or accepted.
    taken: int | None = None
    #: The seats of the HELD and ACCEPTED decisions, counted row by row: equals ``taken``.
    seats_counted: int = 0
    #: Signups that moved after their first decision (a lifecycle transition).
    moved: int = 0
    #: Decided signups by status now (``ACCEPTED`` means that status only, never a hold).
    status_counts: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    oldest_pending_s: float | None = None
    #: Pending records with no usable ``submitted_at`` (missing, junk, the future):
    #: their age is unknown, so they count as past the grace, never as young.
    pending_undated: int = 0
    unmaterialized: int = 0
    #: Undecided records parked behind a failing event (not counted in ``pending``).
    parked: int = 0
    parked_for_s: float | None = None
    violations: list[str] = field(default_factory=list)
    #: Worth knowing, not broken (a journal being written out, an inconclusive read).
    notes: list[str] = field(default_factory=list)
    #: The event kept changing while it was read: nothing could be checked.
    inconclusive: bool = False
    #: A shard's fewest seats refused ``capacity_full`` (None: none refused; ``audit_pool``
    #: checks them against the seats left in the whole event).
    refused_full_seats: int | None = None
    #: A shard's fewest seats a waiting signup asks for (None: nobody waits), and whether
    #: it has been still for the grace (``audit_pool`` checks them across the shards).
    waiting_seats: int | None = None
    still: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "capacity": self.capacity,
            "taken": self.taken,
            "seats_counted": self.seats_counted,
            "status_counts": dict(self.status_counts),
            "pending": self.pending,
            "oldest_pending_s": self.oldest_pending_s,
            "pending_undated": self.pending_undated,
            "unmaterialized": self.unmaterialized,
            "inconclusive": self.inconclusive,
            "parked": self.parked,
            "parked_for_s": self.parked_for_s,
            "violations": self.violations,
            "notes": self.notes,
        }


@dataclass
class AuditReport:
    events: list[EventAudit]
    #: Requests the local stack's endpoint refused a function's role during this run
    #: (``turnstile_tools.local.roles.endpoint_denials``): each a grant missing on AWS too.
    denials: list[dict[str, Any]] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        """Some invariant is broken, or some function was denied what it needed."""
        return bool(self.denials) or any(e.violations for e in self.events)

    @property
    def inconclusive(self) -> bool:
        """Some event could not be read still enough to be checked."""
        return any(e.inconclusive for e in self.events)

    @property
    def ok(self) -> bool:
        """Every event was checked and nothing is broken."""
        return not self.broken and not self.inconclusive

    @property
    def totals(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for e in self.events:
            for status, n in e.status_counts.items():
                counts[status] = counts.get(status, 0) + n
        # A sharded event is one event: its shards' rows are its parts (their seats are
        # counted once, on its own row, which audit_pool gives their sum).
        whole = [e for e in self.events if split_shard_key(e.event_id) is None]
        return {
            "events": len(whole),
            "taken": sum(e.taken or 0 for e in whole),
            "status_counts": counts,
            "pending": sum(e.pending for e in self.events),
            "parked": sum(e.parked for e in self.events),
            "violations": sum(len(e.violations) for e in self.events) + len(self.denials),
            "inconclusive": sum(e.inconclusive for e in self.events),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "inconclusive": self.inconclusive,
            "totals": self.totals,
            "denials": self.denials,
            "events": [e.to_dict() for e in self.events],
        }


def _whole(value: Any) -> int | None:
    """A number an item holds as an int; None where it holds anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def audit_event(
    event_id: str,
    event_item: Mapping[str, Any] | None,
    decisions: Iterable[Mapping[str, Any]],
    intake: Iterable[Mapping[str, Any]],
    journal_ids: set[str],
    pending_grace_s: float,
    now: datetime,
    journal_decided_at: str | None = None,
    last_woken_at: str | None = None,
) -> EventAudit:
    """Check one event's rows: pure, so tests can feed it broken tables directly.

    ``event_item`` holds at least ``capacity`` and ``taken`` (and ``min_capacity`` once
    capacity was changed, ``state`` and ``accepted``); ``journal_ids`` are the signups of
    the last commit's journal, ``journal_decided_at`` when that commit was made, and
    ``last_woken_at`` when the event was last woken (an organizer's change, a due hold).
    Never raises on odd values: they are violations.
    """
    report = EventAudit(event_id=event_id)
    decided = {d[Attr.SIGNUP_ID]: d for d in decisions}
    v = report.violations
    sid = Attr.SIGNUP_ID
    for d in decided.values():
        status = d.get(Attr.STATUS)
        seats = _whole(d.get(Attr.SEATS))
        if seats is None or (status == Status.ACCEPTED and seats < 1):
            # (an invalid_request rejection may carry 0 seats: its seats were the problem)
            v.append(f"{d[sid]}: seats {d.get(Attr.SEATS)!r} is not a seat count")
        if status in Status.ALL:
            report.status_counts[str(status)] = report.status_counts.get(str(status), 0) + 1
        if status in SEATED:
            # a hold's seats are taken as an acceptance's are (invariant 1)
            report.seats_counted += seats or 0
            if _whole(d.get(Attr.POSITION)) is None:
                v.append(f"{d[sid]}: {str(status).lower()} without a position")
        elif status == Status.REJECTED:
            if d.get(Attr.REASON) not in Reason.REJECTIONS:
                v.append(f"{d[sid]}: rejected with unknown reason {d.get(Attr.REASON)!r}")
        elif status not in (Status.WAITLISTED, Status.CANCELLED, Status.EXPIRED):
            v.append(f"{d[sid]}: status {status!r}")
        # Invariant 2: only the allowed transitions, each once, ending where it is now.
        history = history_of(d)
        if len(history) > 1:
            report.moved += 1
        status_now = Status.PENDING
        for h in history:
            step = (h.get(HistoryKey.FROM), h.get(HistoryKey.TO))
            if step[0] != status_now or step not in ALLOWED_TRANSITIONS:
                v.append(f"{d[sid]}: history moves {step[0]} -> {step[1]} from {status_now}")
            status_now = str(step[1])
        if history and status_now != status:
            v.append(f"{d[sid]}: history ends at {status_now}, but the status is {status}")
        if _whole(d.get(Attr.SEQUENCE_NUMBER)) is None:
            v.append(f"{d[sid]}: decision has no sequence number")

    # Invariant 1: never oversold; taken equals the seats of the held and accepted signups.
    seated = sum(report.status_counts.get(s, 0) for s in SEATED)
    if event_item is None:
        if seated:
            v.append(f"{seated} held or accepted signups but no event item")
    else:
        report.capacity = _whole(event_item.get(Attr.CAPACITY, 0))
        report.taken = _whole(event_item.get(Attr.TAKEN, 0))
        if report.capacity is None or report.taken is None:
            v.append("the event item's capacity or taken is not a whole number")
        report.unmaterialized = len(journal_ids - set(decided))
        if report.capacity is not None and report.seats_counted > report.capacity:
            v.append(
                f"oversold: {report.seats_counted} seats held or accepted, "
                f"capacity {report.capacity}"
            )
        if report.unmaterialized == 0 and report.seats_counted != report.taken:
            v.append(
                f"taken is {report.taken} but the held and accepted signups' seats add up "
                f"to {report.seats_counted}"
            )
    _check_journal(report, journal_decided_at, pending_grace_s, now)

    # Invariant 3: arrival order. Positions grow with sequence numbers, and no request was
    # rejected capacity_full while it fitted into what was left at its turn. Capacity may
    # have changed since: judged against the lowest it has been, a rejection made before
    # a raise is not taken for one that fitted.
    # Once seats came back (a cancellation, an expiry), an arrival scan no longer knows
    # what was free at each turn, and promotions take positions out of arrival order: only
    # signups granted seats at their first decision are checked for position order, and
    # capacity_full only while nothing ever moved (the engine's property tests cover the
    # rest: docs/lifecycle.md §9).
    ordered = sorted(
        (d for d in decided.values() if _granted_first(d)),
        key=lambda d: _whole(d.get(Attr.SEQUENCE_NUMBER)) or 0,
    )
    capacity = report.capacity
    if capacity is not None and event_item is not None:
        lowest = _whole(event_item.get(Attr.MIN_CAPACITY))
        capacity = min(capacity, lowest) if lowest is not None else capacity
    if split_shard_key(event_id) is not None:
        # A shard's capacity is its quota, which seats given back by another shard can
        # raise after a refusal: a shard refuses when no seat is left in the whole event,
        # which ``audit_pool`` checks across the shards.
        capacity = None
    taken = 0
    last_position = 0
    for d in ordered:
        seats = _whole(d.get(Attr.SEATS)) or 0
        if d.get(Attr.STATUS) in SEATED or len(history_of(d)) > 1:
            position = _whole(d.get(Attr.POSITION)) or 0
            if position <= last_position:
                v.append(f"{d[sid]}: position {position} out of stream order")
            last_position = position
            taken += seats
        elif d.get(Attr.REASON) == Reason.CAPACITY_FULL and capacity is None:
            fewest = report.refused_full_seats
            report.refused_full_seats = seats if fewest is None else min(fewest, seats)
        elif (
            not report.moved
            and d.get(Attr.REASON) == Reason.CAPACITY_FULL
            and capacity is not None
            and seats <= capacity - taken
        ):
            v.append(f"{d[sid]}: rejected capacity_full although it fitted")

    _check_lifecycle(
        report, event_item, decided, intake, pending_grace_s, now, journal_decided_at, last_woken_at
    )

    # Invariants 2 and 4: every intake record gets exactly one decision. A producer's
    # clock cannot hide a lost record: an unknown or future age counts as past the grace.
    overdue = 0
    for record in intake:
        signup_id = record[sid]
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


def _check_lifecycle(
    report: EventAudit,
    event_item: Mapping[str, Any] | None,
    decided: Mapping[str, Mapping[str, Any]],
    intake: Iterable[Mapping[str, Any]],
    grace_s: float,
    now: datetime,
    decided_at: str | None,
    woken_at: str | None,
) -> None:
    """What every step leaves true (docs/lifecycle.md §4, §6, §10), checked once the event
    has been still for the grace: no hold past its expiry, no waiting signup that fits the
    free seats of an open event, nobody waiting on a closed one, every request answered;
    and, at any time, no position given twice nor beyond the event's counter (a signup
    decided twice). Before the grace, what is not true yet is a note."""
    v, sid = report.violations, Attr.SIGNUP_ID
    ages = [a for a in (age_s(decided_at, now), age_s(woken_at, now)) if a is not None]
    still = min(ages) > grace_s if ages else True

    def judge(problem: str) -> None:
        (v if still else report.notes).append(problem)

    report.still = still

    for d in decided.values():
        if d.get(Attr.STATUS) != Status.HELD:
            continue
        # A hold's expiry is in the future while it runs, by up to the event's hold
        # (hours): not a clock skew, unlike a producer's submitted_at (age_s).
        expires = parse_timestamp(d.get(Attr.HOLD_EXPIRES_AT))
        if expires is None:
            v.append(f"{d[sid]}: held with no hold_expires_at")
            continue
        reference = parse_timestamp(now)
        assert reference is not None  # a datetime always parses
        overdue = (reference - expires).total_seconds()
        if overdue > grace_s:
            v.append(
                f"{d[sid]}: held {overdue:.0f} s past its expiry "
                f"({d.get(Attr.HOLD_EXPIRES_AT)}; more than the {grace_s:.0f} s grace)"
            )
    if event_item is not None:
        capacity, taken = _whole(event_item.get(Attr.CAPACITY)), _whole(event_item.get(Attr.TAKEN))
        closed = event_item.get(Attr.STATE) == EventState.CLOSED
        for d in decided.values():
            if d.get(Attr.STATUS) != Status.WAITLISTED:
                continue
            seats = _whole(d.get(Attr.SEATS)) or 0
            fewest = report.waiting_seats
            report.waiting_seats = seats if fewest is None else min(fewest, seats)
            if closed:
                judge(f"{d[sid]}: waitlisted on a closed event")
            elif capacity is not None and taken is not None and seats <= capacity - taken:
                judge(f"{d[sid]}: waitlisted for {seats} seats while {capacity - taken} are free")
        accepted = _whole(event_item.get(Attr.ACCEPTED))
        # a shard numbers its grants apart from the others (contract.shard_position)
        split = split_shard_key(event_item.get(Attr.EVENT_ID))
        shards = _whole(event_item.get(Attr.SHARDS)) or 1
        shard, step = (split[1], shards) if split is not None and shards > 1 else (0, 1)
        last = shard_position(accepted, shard, step) if accepted else 0
        given: dict[int, str] = {}
        for d in decided.values():
            position = _whole(d.get(Attr.POSITION))
            if position is None:
                continue
            if position in given:
                v.append(f"{d[sid]}: position {position} was given to {given[position]} too")
            given.setdefault(position, str(d[sid]))
            if accepted is not None and position > last:
                v.append(f"{d[sid]}: position {position} beyond the {accepted} handed out")
            elif (position - 1 - shard) % step:
                v.append(f"{d[sid]}: position {position} is not one shard {shard} gives")
    for record in intake:
        decision = decided.get(record.get(sid))
        if decision is None:
            continue
        if request_unanswered(dict(record), requests_answered(dict(decision))):
            judge(
                f"{record.get(sid)}: request {record.get(Attr.REQUEST_COUNT)} recorded, "
                f"{decision.get(Attr.REQUEST_COUNT) or 0} answered"
            )


def _granted_first(item: Mapping[str, Any]) -> bool:
    """Whether the signup's first decision granted it seats (a hold or an acceptance), or
    it is a rejection (which takes part in the capacity_full check)."""
    history = history_of(item)
    return bool(history) and history[0].get(HistoryKey.TO) in (*SEATED, Status.REJECTED)


def _check_journal(
    report: EventAudit, decided_at: str | None, pending_grace_s: float, now: datetime
) -> None:
    """Decisions that live only in the last commit's journal are decided, but nobody can
    read them yet: fine while a processor is writing them out, a violation past the grace
    (a journal with no usable time counts as old)."""
    if not report.unmaterialized:
        return
    age = age_s(decided_at, now)
    what = f"{report.unmaterialized} decisions of the last commit have no decision item"
    if age is None or age > pending_grace_s:
        since = "for an unknown time" if age is None else f"for {age:.0f} s"
        report.violations.append(
            f"unmaterialized journal: {what} {since} (more than {pending_grace_s:.0f} s)"
        )
    else:
        report.notes.append(f"unmaterialized journal: {what} yet ({age:.0f} s old)")


def _event_values(record: EventRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    s = record.event
    return {
        Attr.EVENT_ID: s.event_id,
        Attr.CAPACITY: s.capacity,
        Attr.TAKEN: s.taken,
        Attr.ACCEPTED: s.accepted,
        Attr.STATE: s.state,
        Attr.VERSION: s.version,
        Attr.MIN_CAPACITY: record.min_capacity,
        Attr.SHARDS: s.shards,
    }


def audit_stable(
    store: AuditStore,
    event_id: str,
    pending_grace_s: float,
    now: datetime,
    attempts: int = READ_ATTEMPTS,
) -> tuple[EventAudit, bool]:
    """Audit one event from a view that held still (see the module's docstring).

    Returns the report and whether the event has any row at all.

    An event id that is neither an id nor a shard key (``contract.is_event_key``: a
    producer's, read from intake) has no event item, parking marker or parked record, as
    nothing turnstile keeps is keyed by one: their keys are never built (prefixed, such an
    id may be a key DynamoDB refuses). Its intake records and decisions are audited all
    the same.
    """
    keeps_items = is_event_key(event_id)

    def event_item() -> EventRecord | None:
        return store.get_event(event_id) if keeps_items else None

    for _ in range(attempts):
        before = event_item()
        # The main table holds only decisions: an item without a status is a violation.
        decisions = list(store.decision_items(event_id))
        intake = list(store.intake_items(event_id))
        after = event_item()
        moved = (before is None) != (after is None) or (
            before is not None and after is not None and before.event != after.event
        )
        if moved:
            continue  # a commit landed while we read: read it all again
        journal = before.journal if before is not None else None
        journal_ids = {d.signup_id for d in journal.decisions} if journal else set()
        expired = journal is not None and journal.expires_at is not None
        if expired and now.timestamp() >= journal.expires_at:
            # Past the commit's retention TTL may have deleted what it decided outside the
            # lineup (items.retained): a missing item of those is no lost write.
            journal_ids = {d.signup_id for d in journal.decisions if d.status in IN_LINEUP}
        if journal is not None and journal.updates:
            # a change of the last commit not written yet counts as unmaterialized
            # (only those: a first decision of the same commit that is written counts as
            # written, wherever it stands in the journal)
            status_of = {d.get(Attr.SIGNUP_ID): d.get(Attr.STATUS) for d in decisions}
            unwritten = {
                u.signup_id
                for u in journal.updates
                if status_of.get(u.signup_id) == u.from_status and Attr.STATUS in u.set
            }
            journal_ids |= unwritten
            decisions = [d for d in decisions if d.get(Attr.SIGNUP_ID) not in unwritten]
        marker = store.get_parking(event_id) if keeps_items else None
        parked_ids: set[str] = set()
        if marker is not None:
            decided = {d.get(Attr.SIGNUP_ID) for d in decisions} | journal_ids
            parked_ids = {r.signup_id for r in store.parked_records(event_id)} - decided
        report = audit_event(
            event_id=event_id,
            event_item=_event_values(before),
            decisions=decisions,
            intake=[r for r in intake if r.get(Attr.SIGNUP_ID) not in parked_ids],
            journal_ids=journal_ids,
            pending_grace_s=pending_grace_s,
            now=now,
            journal_decided_at=journal.decided_at if journal else None,
            last_woken_at=store.last_woken(event_id) if keeps_items else None,
        )
        if marker is not None and parked_ids:
            audit_parking(report, marker, parked_ids, pending_grace_s, now)
        return report, bool(before is not None or decisions or intake)
    report = EventAudit(event_id=event_id, inconclusive=True)
    report.notes.append(
        f"the event changed while it was read, {attempts} times in a row; audit it again "
        "when it is quieter"
    )
    return report, True


def _event_ids(store: AuditStore) -> list[str]:
    """Every event with an event item, a decision or an intake record."""
    ids = {record.event.event_id for record in store.scan_events()}
    ids |= {item[Attr.EVENT_ID] for item in store.decision_items()}
    ids |= {item[Attr.EVENT_ID] for item in store.intake_items()}
    return sorted(ids)


def audit_parking(
    report: EventAudit,
    marker: Mapping[str, Any],
    parked_ids: set[str],
    pending_grace_s: float,
    now: datetime,
) -> None:
    """Account for a failing event: ``parked_ids`` are its parked, undecided signups.

    They are waiting in arrival order, not lost; but a parked event is a failure being
    ridden out, so one parked for longer than the pending grace period is a violation
    (invariants 3 and 4 wait on it), and one whose error is IAM's refusal is a violation
    at once. Their order, once
    released, is checked like any decision's.
    """
    report.parked = len(parked_ids)
    report.parked_for_s = age_s(marker.get(ParkAttr.PARKED_SINCE), now)
    error = str(marker.get(ParkAttr.ERROR, ""))
    if error.startswith("AccessDenied"):
        # A missing grant, not a failure that passes: a violation from the first second.
        report.violations.append(
            f"parked: {report.parked} records since sequence number "
            f"{marker.get(ParkAttr.FIRST_SEQUENCE_NUMBER)} because {error}"
        )
    elif report.parked_for_s is not None and report.parked_for_s > pending_grace_s:
        report.violations.append(
            f"parked for {report.parked_for_s:.0f} s (more than {pending_grace_s:.0f} s): "
            f"{report.parked} records since sequence number "
            f"{marker.get(ParkAttr.FIRST_SEQUENCE_NUMBER)}, last error "
            f"{marker.get(ParkAttr.ERROR, 'unknown')}"
        )


def audit(
    store: AuditStore,
    event_id: str | None = None,
    pending_grace_s: float = 300.0,
    now: datetime | None = None,
    attempts: int = READ_ATTEMPTS,
) -> AuditReport:
    """Check every event (or one); ``EventNotFoundError`` for an event with no row at all
    (as for an event id no table's key can hold: it is not even read)."""
    now = now or datetime.now(UTC)
    if event_id is not None and not fits_partition_key(event_id):
        raise EventNotFoundError(f"no such event {event_id[:60]!r}")
    reports = []
    ids = [event_id] if event_id is not None else _event_ids(store)
    pools: dict[str, int] = {}
    if event_id is not None and split_shard_key(event_id) is None and is_event_key(event_id):
        record = store.get_event(event_id)
        if record is not None and record.shards > 1:  # a sharded event: its shards too
            ids += [shard_key(event_id, k) for k in range(record.shards)]
    for eid in ids:
        report, exists = audit_stable(store, eid, pending_grace_s, now, attempts)
        if not exists:
            raise EventNotFoundError(f"no such event {eid!r}")
        reports.append(report)
        record = (
            store.get_event(eid) if split_shard_key(eid) is None and is_event_key(eid) else None
        )
        if record is not None and record.shards > 1:
            pools[eid] = record.shards
    by_id = {r.event_id: r for r in reports}
    for pool_id, shards in pools.items():
        shard_reports = [by_id.get(shard_key(pool_id, k)) for k in range(shards)]
        audit_pool(by_id[pool_id], store, shards, [r for r in shard_reports if r is not None])
    return AuditReport(events=reports)


def audit_pool(
    report: EventAudit, store: AuditStore, shards: int, shard_reports: list[EventAudit]
) -> None:
    """A sharded event's escrow, from one snapshot of its pool and every shard's item: no
    seat is in two places (the shards' quotas add up to what the pool dealt, at most its
    capacity; no shard gave more than its quota), none oversold; and none undersold: no
    signup was refused ``capacity_full`` while its seats were still left in the event, as
    far as the rows can tell (nothing moved and the capacity never changed)."""
    pool, shares = store.shares(report.event_id, shards)
    v = report.violations
    if pool is None:  # pragma: no cover - the pool was just read
        return
    given = sum(s.taken for s in shares)
    dealt = sum(s.quota for s in shares)
    report.capacity, report.taken = pool.capacity, given
    if given > pool.capacity:
        v.append(f"oversold: its {shards} shards gave {given} seats, capacity {pool.capacity}")
    if dealt != pool.dealt or pool.dealt > pool.capacity:
        v.append(f"the shards hold {dealt} seats, the pool dealt {pool.dealt} of {pool.capacity}")
    for share in shares:
        if share.taken > share.quota:
            v.append(f"shard {share.shard} gave {share.taken} seats of its {share.quota}")
    if pool.waitlist > 0:
        _audit_waitlist(report, pool, given, shard_reports)
    refused = [r for r in shard_reports if r.refused_full_seats is not None]
    still = not any(r.moved for r in shard_reports)
    record = store.get_event(report.event_id)
    if refused and still and record is not None and record.min_capacity is None:
        fewest = min(r.refused_full_seats or 0 for r in refused)
        if fewest <= pool.capacity - given:
            v.append(
                f"undersold: a signup of {fewest} seats refused capacity_full, "
                f"{pool.capacity - given} seats never given"
            )


def _audit_waitlist(
    report: EventAudit, pool: Pool, given: int, shard_reports: list[EventAudit]
) -> None:
    """A sharded event's waitlist across its shards: the pool counts exactly the signups
    waiting in all of them, never more than the event's waitlist, and names the shards
    where someone waits; and, once every shard has been still for the grace, nobody waits
    for seats the event has free (a seat given back in one shard reaches another's line)."""
    v = report.violations
    waiting = {
        int(r.event_id.rpartition("#")[2]): r.status_counts.get(Status.WAITLISTED, 0)
        for r in shard_reports
    }
    total = sum(waiting.values())
    if total > pool.waitlist:
        v.append(f"{total} signups wait in its shards, its waitlist is {pool.waitlist}")
    if total != pool.waiting:
        v.append(f"{total} signups wait in its shards, its pool counts {pool.waiting}")
    waiters = frozenset(k for k, n in waiting.items() if n)
    if waiters != pool.waiters:
        v.append(
            f"someone waits in shards {sorted(waiters)}, its pool names {sorted(pool.waiters)}"
        )
    fewest = min((r.waiting_seats for r in shard_reports if r.waiting_seats), default=None)
    if fewest is not None and fewest <= pool.capacity - given:
        problem = (
            f"undersold: a signup of {fewest} seats waits while {pool.capacity - given} "
            "seats of the event are free"
        )
        still = all(r.still for r in shard_reports)
        (v if still else report.notes).append(problem)
