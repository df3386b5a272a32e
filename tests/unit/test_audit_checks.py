"""The audit is the oracle of the drills, the end-to-end tests and the benchmark.

``audit_event`` is pure, so each check it claims is tested the only way that shows it
works: a clean table passes, and a table broken in exactly that way is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from turnstile.base.contract import ParkAttr, Reason, Status
from turnstile_tools.audit import EventAudit, audit_event, audit_parking

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
Table = dict[str, Any]


def iso(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def accepted(signup_id: str, seq: int, seats: int, position: int) -> dict[str, Any]:
    return {
        "signup_id": signup_id,
        "status": Status.ACCEPTED,
        "seats": seats,
        "position": position,
        "sequence_number": str(seq),
    }


def rejected(signup_id: str, seq: int, seats: int, reason: str) -> dict[str, Any]:
    return {
        "signup_id": signup_id,
        "status": Status.REJECTED,
        "seats": seats,
        "reason": reason,
        "sequence_number": str(seq),
    }


def clean_table() -> Table:
    """Capacity 5, decided in stream order. Sequence numbers cross a digit boundary (98 ...
    102), so sorting them as text instead of numbers would put them out of order."""
    decisions = [
        accepted("a", 98, 2, 1),
        rejected("b", 99, 4, Reason.CAPACITY_FULL),  # 3 left: 4 does not fit
        accepted("c", 100, 3, 2),  # a later, smaller request fits: no order violation
        rejected("d", 101, 1, Reason.CAPACITY_FULL),  # nothing left
        rejected("e", 102, 0, Reason.INVALID_REQUEST),
    ]
    intake = [{"signup_id": d["signup_id"], "submitted_at": iso(60)} for d in decisions]
    intake.append({"signup_id": "f", "submitted_at": iso(10)})  # pending, within grace
    return {
        "event_item": {"capacity": 5, "taken": 5},
        "decisions": decisions,
        "intake": intake,
        "journal_ids": set(),
    }


def run(table: Table, grace_s: float = 300.0, journal_decided_at: str | None = None) -> EventAudit:
    return audit_event(
        event_id="e1",
        event_item=table["event_item"],
        decisions=table["decisions"],
        intake=table["intake"],
        journal_ids=table["journal_ids"],
        pending_grace_s=grace_s,
        now=NOW,
        journal_decided_at=journal_decided_at,
    )


def decision(table: Table, signup_id: str) -> dict[str, Any]:
    return next(d for d in table["decisions"] if d["signup_id"] == signup_id)


def test_a_clean_table_passes_and_is_counted():
    report = run(clean_table())
    assert report.violations == []
    assert (report.capacity, report.taken, report.seats_counted) == (5, 5, 5)
    assert (report.status_counts, report.pending) == ({"ACCEPTED": 2, "REJECTED": 3}, 1)
    assert report.oldest_pending_s == pytest.approx(10.0)
    assert report.unmaterialized == 0


def swap_positions(t: Table) -> None:
    decision(t, "a")["position"], decision(t, "c")["position"] = 2, 1


def reject_one_that_fitted(t: Table) -> None:
    # b asks for exactly the 3 seats left at its turn, and is refused as full.
    decision(t, "b")["seats"] = 3


def miscount_taken(t: Table) -> None:
    t["event_item"]["taken"] = 4


def oversell(t: Table) -> None:
    t["event_item"].update(capacity=4, taken=5)


def drop_position(t: Table) -> None:
    del decision(t, "c")["position"]


def unknown_reason(t: Table) -> None:
    decision(t, "e")["reason"] = "because"


def unknown_status(t: Table) -> None:
    decision(t, "e")["status"] = "MAYBE"


def no_sequence_number(t: Table) -> None:
    del decision(t, "e")["sequence_number"]


def no_event_item(t: Table) -> None:
    t["event_item"] = None


def pending_too_long(t: Table) -> None:
    t["intake"][-1]["submitted_at"] = iso(3600)


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (swap_positions, "c: position 1 out of stream order"),
        (reject_one_that_fitted, "b: rejected capacity_full although it fitted"),
        (miscount_taken, "taken is 4 but the held and accepted signups' seats add up to 5"),
        (oversell, "oversold: 5 seats held or accepted, capacity 4"),
        (drop_position, "c: accepted without a position"),
        (unknown_reason, "e: rejected with unknown reason 'because'"),
        (unknown_status, "e: status 'MAYBE'"),
        (no_sequence_number, "e: decision has no sequence number"),
        (no_event_item, "2 held or accepted signups but no event item"),
        (pending_too_long, "1 of 1 pending past the 300 s grace (the oldest known for 3600 s)"),
    ],
    ids=lambda v: v.__name__ if callable(v) else "",
)
def test_each_broken_table_is_reported(break_it: Callable[[Table], None], expected: str):
    # GIVEN a table that is clean but for one thing
    table = clean_table()
    break_it(table)
    # WHEN it is audited THEN exactly that is reported
    assert expected in run(table).violations


def test_a_later_request_that_fitted_is_only_a_violation_if_rejected_as_full():
    # GIVEN b (4 seats) rejected with 3 left, then c (3 seats) accepted: both correct
    table = clean_table()
    # WHEN c had been rejected as full instead, although 3 were left for it
    c = decision(table, "c")
    c.update(status=Status.REJECTED, reason=Reason.CAPACITY_FULL)
    del c["position"]
    table["event_item"]["taken"] = 2
    decision(table, "d")["seats"] = 4  # d still did not fit
    violations = run(table).violations
    # THEN c is the violation, and b and d are not
    assert violations == ["c: rejected capacity_full although it fitted"]


def test_pending_past_grace_counts_its_oldest_and_grace_is_a_bound():
    table = clean_table()
    table["intake"].append({"signup_id": "g", "submitted_at": iso(400)})
    report = run(table, grace_s=400.0)  # exactly at the grace: not yet a violation
    assert (report.pending, report.oldest_pending_s, report.violations) == (2, 400.0, [])
    # one second less: g is past it, f (10 s) is not
    assert run(table, grace_s=399.0).violations == [
        "1 of 2 pending past the 399 s grace (the oldest known for 400 s)"
    ]


def test_records_without_a_usable_timestamp_are_pending_and_counted_as_old():
    table = clean_table()
    table["intake"][-1] = {"signup_id": "f"}
    table["intake"].append({"signup_id": "g", "submitted_at": "not a time"})
    report = run(table, grace_s=3600.0)
    assert (report.pending, report.pending_undated, report.oldest_pending_s) == (2, 2, None)
    assert report.violations == [
        "2 of 2 pending past the 3600 s grace (no known age, 2 with no usable "
        "submitted_at (counted as old))"
    ]


def test_a_journal_not_yet_written_out_is_decided_not_pending():
    # GIVEN a accepted and written, and f accepted in the event's last journal (taken 3),
    # its item not written yet: the commit was 10 s ago
    table = {
        "event_item": {"capacity": 10, "taken": 3},
        "decisions": [accepted("a", 98, 2, 1)],
        "intake": [{"signup_id": "a"}, {"signup_id": "f", "submitted_at": iso(3600)}],
        "journal_ids": {"f"},
    }
    report = run(table, grace_s=300.0, journal_decided_at=iso(10))
    # THEN f is not pending, and taken is not compared with the items until it is written
    assert (report.pending, report.unmaterialized, report.violations) == (0, 1, [])
    assert report.notes == [
        "unmaterialized journal: 1 decisions of the last commit have no decision item yet "
        "(10 s old)"
    ]
    # but once the journal is written out (only a in it), taken is checked again
    table["journal_ids"] = {"a"}
    assert run(table, grace_s=7200.0).violations == [
        "taken is 3 but the held and accepted signups' seats add up to 2"
    ]


def test_positions_must_grow_strictly():
    table = clean_table()
    decision(table, "c")["position"] = 1  # a and c share position 1
    assert "c: position 1 out of stream order" in run(table).violations


def test_an_unknown_event_with_only_rejections_is_clean():
    table = clean_table()
    table["event_item"] = None
    table["decisions"] = [rejected("a", 98, 1, Reason.UNKNOWN_EVENT)]
    table["intake"] = [{"signup_id": "a"}]
    report = run(table)
    assert (report.violations, report.capacity, report.taken, report.status_counts) == (
        [],
        None,
        None,
        {"REJECTED": 1},
    )


def test_decisions_are_checked_in_sequence_order_however_they_are_read():
    table = clean_table()
    table["decisions"].reverse()  # a scan returns items in key order, not stream order
    assert run(table).violations == []


def test_missing_seats_are_a_violation_and_count_as_none():
    # GIVEN a's item lost its seats (2), and b asked for all 5
    table = clean_table()
    del decision(table, "a")["seats"]
    decision(table, "b")["seats"] = 5
    # THEN a counts no seats: 3 accepted, so b (5 of the 5 left at its turn) and d (1 of 2)
    # fitted
    assert run(table).violations == [
        "a: seats None is not a seat count",
        "taken is 5 but the held and accepted signups' seats add up to 3",
        "b: rejected capacity_full although it fitted",
        "d: rejected capacity_full although it fitted",
    ]


def test_a_full_rejection_without_seats_always_fitted():
    table = clean_table()
    del decision(table, "d")["seats"]  # nothing left at its turn, and it asked for nothing
    assert run(table).violations == [
        "d: seats None is not a seat count",
        "d: rejected capacity_full although it fitted",
    ]


def test_an_event_item_without_counters_has_capacity_and_taken_zero():
    table = clean_table()
    table["event_item"] = {}
    report = run(table)
    assert (report.capacity, report.taken) == (0, 0)
    assert report.violations[:2] == [
        "oversold: 5 seats held or accepted, capacity 0",
        "taken is 0 but the held and accepted signups' seats add up to 5",
    ]


def test_the_first_acceptance_without_a_position_is_out_of_order():
    table = clean_table()
    del decision(table, "a")["position"]
    assert run(table).violations == [
        "a: accepted without a position",
        "a: position 0 out of stream order",
    ]


def test_the_oldest_pending_age_may_be_under_a_second():
    table = clean_table()
    table["intake"][-1]["submitted_at"] = iso(0.5)
    assert run(table).oldest_pending_s == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("event_item", "expected"),
    [
        (
            {"capacity": "lots", "taken": 5},
            ["the event item's capacity or taken is not a whole number"],
        ),
        (
            {"capacity": 5, "taken": Decimal("4.5")},
            [
                "the event item's capacity or taken is not a whole number",
                "taken is None but the held and accepted signups' seats add up to 5",
            ],
        ),
        # capacity unreadable but a lowest capacity recorded: no traceback, no order verdict
        (
            {"capacity": "lots", "taken": 5, "min_capacity": 5},
            ["the event item's capacity or taken is not a whole number"],
        ),
    ],
    ids=["capacity", "taken", "capacity-with-min_capacity"],
)
def test_an_event_item_with_either_counter_unreadable_is_a_violation(event_item, expected):
    table = clean_table()
    table["event_item"] = event_item
    assert run(table).violations == expected


def test_a_rejection_made_before_a_capacity_raise_is_judged_by_the_lowest_capacity():
    # GIVEN the clean table's event (b and d refused as full at capacity 5), raised to 8 since
    table = clean_table()
    table["event_item"] = {"capacity": 8, "taken": 5, "min_capacity": 5}
    # THEN b (4 of the 3 left then) and d (1 of 0) were rightly refused
    assert run(table).violations == []
    # while against the capacity of today both would have fitted
    del table["event_item"]["min_capacity"]
    assert run(table).violations == [
        "b: rejected capacity_full although it fitted",
        "d: rejected capacity_full although it fitted",
    ]


def test_a_malformed_seat_count_is_named_in_its_violation():
    table = clean_table()
    decision(table, "e")["seats"] = "two"
    assert run(table).violations == ["e: seats 'two' is not a seat count"]


def test_an_unmaterialized_journal_is_a_violation_only_past_the_grace_a_bound():
    table = {
        "event_item": {"capacity": 10, "taken": 1},
        "decisions": [],
        "intake": [{"signup_id": "f", "submitted_at": iso(400)}],
        "journal_ids": {"f"},
    }
    # exactly as old as the grace: still being written out, a note
    at_grace = run(table, grace_s=400.0, journal_decided_at=iso(400))
    assert (at_grace.violations, len(at_grace.notes)) == ([], 1)
    # one second past it, or of no known age: left behind
    assert run(table, grace_s=399.0, journal_decided_at=iso(400)).violations == [
        "unmaterialized journal: 1 decisions of the last commit have no decision item for "
        "400 s (more than 399 s)"
    ]
    assert run(table, grace_s=399.0, journal_decided_at=None).violations == [
        "unmaterialized journal: 1 decisions of the last commit have no decision item for "
        "an unknown time (more than 399 s)"
    ]


def marker(parked_s_ago: float, **attrs: Any) -> dict[str, Any]:
    return {ParkAttr.PARKED_SINCE: iso(parked_s_ago), ParkAttr.FIRST_SEQUENCE_NUMBER: "98", **attrs}


def test_a_parking_is_a_violation_only_past_the_grace_a_bound():
    report = EventAudit(event_id="e1")
    audit_parking(report, marker(400, error="StoreUnavailableError"), {"a", "b"}, 400.0, NOW)
    assert (report.parked, report.parked_for_s, report.violations) == (2, 400.0, [])
    report = EventAudit(event_id="e1")
    audit_parking(report, marker(400, error="StoreUnavailableError"), {"a", "b"}, 399.0, NOW)
    assert report.violations == [
        "parked for 400 s (more than 399 s): 2 records since sequence number 98, "
        "last error StoreUnavailableError"
    ]


def test_a_parking_marker_that_recorded_no_error_says_so():
    # (a record parked behind a marker cleared in between parks the event again, with no error)
    report = EventAudit(event_id="e1")
    audit_parking(report, marker(3600), {"a"}, 300.0, NOW)
    assert report.violations == [
        "parked for 3600 s (more than 300 s): 1 records since sequence number 98, "
        "last error unknown"
    ]


# -- the lifecycle's promises (docs/lifecycle.md §4, §6, §10) ----------------------------

GRACE = 300.0


def lifecycle_table(**event: Any) -> Table:
    """Capacity 2, one seat held (due in a minute), one accepted, nobody waiting: clean."""
    decisions = [
        {
            "signup_id": "h",
            "status": Status.HELD,
            "seats": 1,
            "position": 1,
            "sequence_number": "10",
            "hold_expires_at": iso(-60),
        },
        accepted("a", 11, 1, 2),
    ]
    intake = [{"signup_id": d["signup_id"], "submitted_at": iso(60)} for d in decisions]
    return {
        "event_item": {"capacity": 2, "taken": 2, "accepted": 2, "state": "OPEN", **event},
        "decisions": decisions,
        "intake": intake,
    }


def lifecycle_audit(table: Table, last_step_s: float = 3600) -> EventAudit:
    return audit_event(
        event_id="gig",
        event_item=table["event_item"],
        decisions=table["decisions"],
        intake=table["intake"],
        journal_ids=set(),
        pending_grace_s=GRACE,
        now=NOW,
        journal_decided_at=iso(last_step_s),
    )


def waiting(signup_id: str, seats: int = 1) -> dict[str, Any]:
    return {
        "signup_id": signup_id,
        "status": Status.WAITLISTED,
        "seats": seats,
        "waitlist_position": 1,
        "sequence_number": "20",
    }


def test_a_clean_lifecycle_passes():
    report = lifecycle_audit(lifecycle_table())
    assert (report.violations, report.notes) == ([], [])


def test_a_hold_past_its_expiry_by_more_than_the_grace_is_a_violation():
    table = lifecycle_table()
    table["decisions"][0]["hold_expires_at"] = iso(GRACE + 1)
    (violation,) = lifecycle_audit(table).violations
    assert violation.startswith("h: held 301 s past its expiry")
    # ... and within the grace it is nothing yet
    table["decisions"][0]["hold_expires_at"] = iso(GRACE - 1)
    assert lifecycle_audit(table).violations == []


@pytest.mark.parametrize("hold_s", [120, 600, 3 * 3600])
def test_a_hold_running_for_longer_than_the_clock_skew_is_no_violation(hold_s: int):
    """A hold's expiry lies ahead while it runs (10-minute holds, hours): not a timestamp
    from a skewed clock, which age_s would not trust."""
    table = lifecycle_table()
    table["decisions"][0]["hold_expires_at"] = iso(-hold_s)
    assert lifecycle_audit(table).violations == []
    table["decisions"][0]["hold_expires_at"] = "soon"
    assert lifecycle_audit(table).violations == ["h: held with no hold_expires_at"]


def test_a_waiting_signup_that_fits_the_free_seats_is_a_violation_once_still():
    table = lifecycle_table(capacity=3)  # one seat free
    table["decisions"].append(waiting("w"))
    table["intake"].append({"signup_id": "w", "submitted_at": iso(60)})
    (violation,) = lifecycle_audit(table).violations
    assert violation == "w: waitlisted for 1 seats while 1 are free"
    # a signup too big for the free seats waits rightly
    table["decisions"][-1]["seats"] = 2
    assert lifecycle_audit(table).violations == []
    # right after the event's last step (a capacity raise being acted on), a note
    table["decisions"][-1]["seats"] = 1
    report = lifecycle_audit(table, last_step_s=1)
    assert report.violations == [] and report.notes == [violation]


def test_a_waiting_signup_of_a_closed_event_is_a_violation():
    table = lifecycle_table(state="CLOSED")
    table["decisions"].append(waiting("w"))
    table["intake"].append({"signup_id": "w", "submitted_at": iso(60)})
    assert lifecycle_audit(table).violations == ["w: waitlisted on a closed event"]


def test_a_request_recorded_and_never_answered_is_a_violation():
    table = lifecycle_table()
    table["intake"][1].update(request="cancel", request_count=Decimal(2))
    table["decisions"][1]["request_count"] = Decimal(1)
    assert lifecycle_audit(table).violations == ["a: request 2 recorded, 1 answered"]
    table["decisions"][1]["request_count"] = Decimal(2)
    assert lifecycle_audit(table).violations == []


def test_a_signup_decided_twice_is_a_violation():
    # A signup decided again (its first decision lost) takes a position given before, or
    # one the event never handed out.
    table = lifecycle_table()
    table["decisions"][1]["position"] = 1
    assert "a: position 1 was given to h too" in lifecycle_audit(table).violations
    table["decisions"][1]["position"] = 3
    assert lifecycle_audit(table).violations == ["a: position 3 beyond the 2 handed out"]
