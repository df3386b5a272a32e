"""``--output json|table|text`` (turnstile_tools.output) and the audit's table and closing line,
read from ``AuditReport.to_dict()`` alone."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from turnstile_tools import cli, output

EVENT = {
    "event_id": "gig",
    "capacity": Decimal(10),
    "taken": 2,
    "state": "OPEN",
    "closed_now": False,
    "max_seats": None,
}
PAGE = {
    "events": [
        {"event_id": "gig", "capacity": 10, "state": "OPEN"},
        {"event_id": "a-much-longer-name", "capacity": 200, "state": "CLOSED"},
    ],
    "next": None,
}


def test_json_is_what_the_command_always_printed():
    assert output.render(EVENT, "json") == json.dumps({**EVENT, "capacity": 10}, indent=2)
    assert json.loads(output.render({"b": b"\x00\xff", "s": {"z", "a"}}, "json")) == {
        "b": "AP8=",
        "s": ["a", "z"],
    }


def test_a_page_is_a_table_of_its_rows_then_its_other_fields():
    assert output.render(PAGE, "table").splitlines() == [
        "event_id            capacity  state",
        "gig                       10  OPEN",
        "a-much-longer-name       200  CLOSED",
        "next: -",
    ]


def test_a_record_is_a_table_of_fields_and_values():
    assert output.render(EVENT, "table").splitlines() == [
        "field       value",
        "event_id    gig",
        "capacity    10",
        "taken       2",
        "state       OPEN",
        "closed_now  false",
        "max_seats   -",
    ]


def test_a_list_of_records_is_a_table():
    runs = [{"run_id": "r1", "status": "succeeded", "re_emitted": 3}, {"run_id": "r2"}]
    assert output.render(runs, "table").splitlines() == [
        "run_id  status     re_emitted",
        "r1      succeeded           3",
        "r2      -                   -",
    ]
    assert output.render([], "table") == "(none)"


def test_text_is_key_value_lines():
    assert output.render(EVENT, "text").splitlines() == [
        "event_id: gig",
        "capacity: 10",
        "taken: 2",
        "state: OPEN",
        "closed_now: false",
        "max_seats: -",
    ]
    nested = {
        "signup_id": "erin",
        "attributes": {"vip": True, "tags": ["a", "b"]},
        "history": [{"to": "HELD", "cause": "promotion"}],
        "detail": {},
    }
    assert output.render(nested, "text").splitlines() == [
        "signup_id: erin",
        "attributes:",
        "  vip: true",
        "  tags:",
        "    - a",
        "    - b",
        "history:",
        "  - to: HELD",
        "    cause: promotion",
        "detail: (none)",
    ]
    assert output.render([{"a": 1}, {"a": 2}], "text") == "a: 1\n\na: 2"


def test_a_long_cell_is_cut_short_in_a_table_only():
    row = {"event_id": "x" * 100, "history": [{"to": "HELD"}], "tags": ["a", "b"]}
    table = output.render([row], "table").splitlines()
    assert table[1].split() == ["x" * 45 + "...", '[{"to":', '"HELD"}]', "a,", "b"]
    assert "x" * 100 in output.render(row, "text")


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="not an output format"):
        output.render({}, "yaml")


# -- the audit ------------------------------------------------------------------------


def report(events: list[dict], totals: dict, denials: list | None = None) -> dict:
    return {
        "ok": True,
        "inconclusive": False,
        "totals": totals,
        "denials": denials or [],
        "events": events,
    }


NEW_EVENTS = [
    {
        "event_id": "concert",
        "capacity": 2,
        "taken": 2,
        "seats_counted": 2,
        "status_counts": {"ACCEPTED": 1, "HELD": 1, "REJECTED": 1},
        "pending": 0,
        "parked": 0,
        "violations": [],
        "notes": [],
        "inconclusive": False,
    },
    {
        "event_id": "gig",
        "capacity": 1,
        "taken": 1,
        "seats_counted": 1,
        "status_counts": {"HELD": 1, "WAITLISTED": 1, "CANCELLED": 1},
        "pending": 0,
        "parked": 0,
        "violations": [],
        "notes": ["a journal being written out"],
        "inconclusive": False,
    },
]
NEW_TOTALS = {
    "events": 2,
    "taken": 3,
    "status_counts": {"ACCEPTED": 1, "HELD": 2, "WAITLISTED": 1, "REJECTED": 1, "CANCELLED": 1},
    "pending": 0,
    "parked": 0,
    "violations": 0,
    "inconclusive": 0,
}


def test_the_audit_table_reads_status_counts():
    lines = cli.audit_table(report(NEW_EVENTS, NEW_TOTALS)).splitlines()
    assert lines[:3] == [
        "event    capacity  taken  held  accepted  waitlisted  rejected  pending  parked",
        "concert         2      2     1         1           0         1        0       0",
        "gig             1      1     1         0           1         0        0       0",
    ]
    assert lines[3] == "  note gig: a journal being written out"
    # seats taken: the totals' taken (the events' taken summed)
    assert lines[-1] == (
        "audit OK: 2 events, 3 seats taken, 1 accepted, 2 held, 1 waitlisted, 1 rejected, "
        "1 cancelled, 0 pending, 0 violations"
    )


def test_the_closing_line_of_the_brief():
    totals = {**NEW_TOTALS, "taken": 3}
    totals["status_counts"] = {"ACCEPTED": 1, "HELD": 2, "REJECTED": 1}
    assert cli.audit_summary(report([], totals)) == (
        "audit OK: 2 events, 3 seats taken, 1 accepted, 2 held, 1 rejected, 0 pending, 0 violations"
    )


def test_the_closing_line_says_broken_inconclusive_and_parked():
    totals = {**NEW_TOTALS, "violations": 2, "parked": 4, "inconclusive": 1}
    line = cli.audit_summary(report(NEW_EVENTS, totals))
    assert line.startswith("audit BROKEN: 2 events")
    assert line.endswith("0 pending, 4 parked, 2 violations, 1 inconclusive")
    totals = {**NEW_TOTALS, "inconclusive": 1}
    assert cli.audit_summary(report(NEW_EVENTS, totals)).startswith("audit INCONCLUSIVE: ")


def test_a_denial_is_a_violation_line():
    denial = {"role": "stream", "denied": "dynamodb:PutItem on turnstile-main"}
    text = cli.audit_table(report([], {**NEW_TOTALS, "violations": 1}, [denial]))
    assert "  VIOLATION access denied to the stream role: dynamodb:PutItem" in text


def test_a_sharded_event_is_one_row_summed_over_its_shards_then_a_row_a_shard():
    def part(event_id: str, capacity: int, taken: int, counts: dict, pending: int = 0) -> dict:
        return {
            **NEW_EVENTS[0],
            "event_id": event_id,
            "capacity": capacity,
            "taken": taken,
            "status_counts": counts,
            "pending": pending,
        }

    events = [
        part("drop", 10, 6, {}),  # the pool: no decision item is under its own key
        part("drop#00", 0, 0, {"REJECTED": 2}, pending=1),
        part("drop#01", 4, 4, {"ACCEPTED": 3, "HELD": 1}),
        part("drop#02", 2, 2, {"ACCEPTED": 2}),
        part("solo", 2, 1, {"ACCEPTED": 1}),
    ]
    lines = cli.audit_table(report(events, NEW_TOTALS)).splitlines()
    assert lines[:6] == [
        "event  capacity  taken  held  accepted  waitlisted  rejected  pending  parked",
        "drop         10      6     1         5           0         2        1       0",
        "  #00         0      0     0         0           0         2        1       0",
        "  #01         4      4     1         3           0         0        0       0",
        "  #02         2      2     0         2           0         0        0       0",
        "solo          2      1     0         1           0         0        0       0",
    ]
