"""``audit_event`` is pure: tables are fed to it directly, broken in every way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from turnstile_tools.audit import audit_event

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
EVENT = {"event_id": "e1", "signup_id": "#EVENT", "capacity": 5, "taken": 0}


def pending(signup_id: str, **attrs: Any) -> dict[str, Any]:
    return {"event_id": "e1", "signup_id": signup_id, **attrs}


def check(intake: list[dict[str, Any]], grace: float = 300.0, **kwargs: Any):
    return audit_event(
        event_id="e1",
        event_item=EVENT,
        decisions=[],
        intake=intake,
        journal_ids=set(),
        pending_grace_s=grace,
        now=NOW,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("submitted_at", "broken"),
    [
        ("2026-01-01T11:59:00Z", False),  # pending a minute: within the grace
        ("2026-01-01T11:59:00", False),  # naive: taken as UTC, no traceback
        ("2026-01-01T11:00:00", True),  # naive and an hour old
        ("2026-01-01T11:00:00Z", True),
        (None, True),  # no age at all: counted as old, never invisible
        ("soon", True),
        ("9999-01-01T00:00:00Z", True),  # the future: counted as old
        (12, True),
    ],
)
def test_pending_age_counts_unknown_and_future_as_old(submitted_at: Any, broken: bool):
    record = pending("u1") if submitted_at is None else pending("u1", submitted_at=submitted_at)
    report = check([record])
    assert report.pending == 1
    assert bool(report.violations) is broken, report.violations


@pytest.mark.parametrize(
    ("decided_at", "broken"),
    [
        ("2026-01-01T11:59:30Z", False),  # 30 s old: a processor is on it, just reported
        ("2026-01-01T11:00:00Z", True),  # an hour: left behind
        ("2026-01-01T11:00:00", True),  # naive: UTC, no traceback
        (None, True),  # no age: counted as old
        ("junk", True),
    ],
)
def test_an_unmaterialized_journal_is_a_violation_only_past_the_grace(decided_at, broken):
    # GIVEN the last commit's journal names a decision that has no decision item
    report = audit_event(
        event_id="e1",
        event_item={**EVENT, "taken": 1},
        decisions=[],
        intake=[pending("u1", submitted_at="2026-01-01T11:59:30Z")],
        journal_ids={"u1"},
        pending_grace_s=300.0,
        now=NOW,
        journal_decided_at=decided_at,
    )
    assert report.unmaterialized == 1
    assert report.pending == 0  # decided, in the journal
    unmaterialized = [v for v in report.violations if "unmaterialized journal" in v]
    assert bool(unmaterialized) is broken, report.violations
    if not broken:
        assert any("unmaterialized" in n for n in report.notes)


def test_malformed_decision_items_are_violations_not_tracebacks():
    report = audit_event(
        event_id="e1",
        event_item=EVENT,
        decisions=[
            {"signup_id": "a", "status": "ACCEPTED", "seats": "two", "position": 1,
             "sequence_number": "1"},
            {"signup_id": "b", "status": "REJECTED", "reason": "capacity_full", "seats": 1,
             "sequence_number": "not a number"},
        ],
        intake=[],
        journal_ids=set(),
        pending_grace_s=300.0,
        now=NOW,
    )
    assert any("a:" in v for v in report.violations)
    assert any("b:" in v for v in report.violations)
