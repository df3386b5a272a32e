"""The processor's store contract (``turnstile.storage.ports.ProcessorStore``), run against both
implementations: ``FakeStore`` (in memory) and ``SignupStore`` over moto.

Every case runs on both, with the same expectations; what each store wrote is compared
item by item (typed, to the byte), so the fake cannot drift from the real store without a
case here failing. The unit tests of the processor (tests/unit/test_processor_fake.py) run
on the fake and lean on this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import pytest

import turnstile.storage.store as store_module
from tests.fakes import FakeStore
from tests.helpers import table_items
from tests.oracle import decide
from turnstile.base.clock import ms_of
from turnstile.base.contract import (
    CONTROL_TABLE,
    DUE_HOLDS_SHARD,
    INTAKE_TABLE,
    MAIN_TABLE,
    Attr,
    ControlKey,
    EventState,
    ParkAttr,
    Reason,
    Status,
)
from turnstile.base.errors import (
    CapacityBelowTakenError,
    CommitConflictError,
    EventExistsError,
    JournalTooLargeError,
)
from turnstile.engine.lifecycle import Event
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key, to_item
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import Outcome
from turnstile.storage.journal import Journal
from turnstile.storage.parking import MAX_PARKING_ERROR_CHARS
from turnstile.storage.ports import ProcessorStore
from turnstile.storage.store import SignupStore

NOW = "2026-01-01T00:00:00.000000Z"
LATER = "2026-01-01T00:05:00.000000Z"
TABLES = (INTAKE_TABLE.name, MAIN_TABLE.name, CONTROL_TABLE.name)


@dataclass
class Backend:
    """One store under test, with what a test needs around it: every table's typed items,
    and a way to write an event item's attributes by hand (as an operator could)."""

    name: str
    store: Any  # SignupStore | FakeStore: a ProcessorStore with create/close/update
    items: Callable[[str], dict[tuple[str, str], dict[str, Any]]]
    set_by_hand: Callable[[str, Mapping[str, Any]], None]

    def state(self) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
        """Every item; a wake-up's time is the clock's, so it is left out."""
        state = {table: self.items(table) for table in TABLES}
        for key, item in state.get(CONTROL_TABLE.name, {}).items():
            if key[0].startswith("WAKE#"):
                item.pop("woken_at", None)
        return state

    def snapshot(self, event_id: str) -> Event:
        record = self.store.get_event(event_id)
        assert record is not None
        return record.event


def fake_backend() -> Backend:
    fake = FakeStore()

    def set_by_hand(event_id: str, values: Mapping[str, Any]) -> None:
        fake.control[ControlKey.event(event_id)].update(to_item(values))

    return Backend("fake", fake, fake.items, set_by_hand)


def moto_backend(session: Any) -> Backend:
    client = session.client("dynamodb")
    real = SignupStore(client, sleep=lambda _: None)

    def set_by_hand(event_id: str, values: Mapping[str, Any]) -> None:
        names = {f"#a{i}": name for i, name in enumerate(values)}
        typed = to_item({f":v{i}": value for i, value in enumerate(values.values())})
        client.update_item(
            TableName=CONTROL_TABLE.name,
            Key=event_key(event_id),
            UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(values))),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=typed,
        )

    return Backend("moto", real, lambda table: table_items(client, table), set_by_hand)


@pytest.fixture(params=["fake", "moto"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fake":
        yield fake_backend()
    else:
        yield moto_backend(request.getfixturevalue("aws"))


def req(signup_id: str, seq: str | int, seats: int = 1, **fields: Any) -> IntakeRecord:
    return IntakeRecord("gig", signup_id, str(seq), seats=seats, **fields)


def outcome_of(snapshot: Event | None, *requests: IntakeRecord) -> Outcome:
    return decide(snapshot, requests)


def by_id(*requests: IntakeRecord) -> dict[str, IntakeRecord]:
    return {r.signup_id: r for r in requests}


# -- both satisfy the protocol ---------------------------------------------------------------


def test_each_store_is_a_processor_store(backend):
    assert isinstance(backend.store, ProcessorStore)


# -- commit ------------------------------------------------------------------------------


def test_a_commit_stores_counters_version_floor_and_journal(backend):
    backend.store.create_event("gig", 3, NOW)
    before = backend.snapshot("gig")
    a, b = req("a", 100, 2, attributes={"team": "A", "n": Decimal(2)}), req("b", 101)
    outcome = outcome_of(before, a, b)
    journal = backend.store.commit(before, outcome, NOW, by_id(a, b), expires_at=1_800_000_000)
    assert (journal.version, journal.decided_at, journal.decisions) == (1, NOW, outcome.decisions)
    assert journal.expires_at == 1_800_000_000
    record = backend.store.get_event("gig")
    assert record.event == Event("gig", 3, taken=3, accepted=2, version=1)
    # stored as it encodes: copied fields as their digests
    assert record.journal == Journal.decode(journal.encode())
    event_item = backend.items(CONTROL_TABLE.name)[ControlKey.event("gig")]
    assert event_item[Attr.CAPACITY_FLOOR] == {"N": "3"}
    assert bytes(event_item[Attr.JOURNAL]["B"]) == journal.encode()
    # nothing is materialized by a commit
    assert backend.items(MAIN_TABLE.name) == {}


def test_a_commit_keeps_the_mark_it_is_given_with_its_version_and_a_commit_without_voids_it(
    backend,
):
    backend.store.create_event("gig", 5, NOW)
    before = backend.snapshot("gig")
    assert backend.store.get_event("gig").high_water is None
    forty = 10**39 + 7  # sequence numbers have up to 40 digits: no N could hold them all
    backend.store.commit(before, outcome_of(before, req("a", forty)), NOW, {}, high_water=forty)
    event_item = backend.items(CONTROL_TABLE.name)[ControlKey.event("gig")]
    assert event_item[Attr.HIGH_WATER] == {"S": f"{forty}@1"}  # the version it was written at
    assert backend.store.get_event("gig").high_water == forty
    # a commit without one (a processor from before the mark: a mixed deployment, a
    # rollback) leaves it behind its version: it is never trusted again
    after = backend.snapshot("gig")
    backend.store.commit(after, outcome_of(after, req("b", 5)), LATER, {})
    assert backend.items(CONTROL_TABLE.name)[ControlKey.event("gig")][Attr.HIGH_WATER] == {
        "S": f"{forty}@1"
    }
    assert backend.store.get_event("gig").high_water is None
    assert backend.snapshot("gig").version == 2


def test_a_commit_on_a_stale_version_conflicts_and_changes_nothing(backend):
    backend.store.create_event("gig", 5, NOW)
    stale = backend.snapshot("gig")
    backend.store.commit(stale, outcome_of(stale, req("a", 100)), NOW, {})
    state = backend.state()
    with pytest.raises(CommitConflictError, match="'gig' moved past version 0"):
        backend.store.commit(stale, outcome_of(stale, req("b", 101)), LATER, {})
    assert backend.state() == state
    # a version ahead of the item's conflicts too
    ahead = replace(backend.snapshot("gig"), version=7)
    with pytest.raises(CommitConflictError):
        backend.store.commit(ahead, outcome_of(ahead, req("b", 101)), LATER, {})
    assert backend.state() == state


def test_a_commit_that_would_oversell_is_refused_and_exactly_full_passes(backend):
    backend.store.create_event("gig", 3, NOW)
    before = backend.snapshot("gig")
    state = backend.state()
    # an outcome the engine would never make: 4 seats of 3, on the right version
    oversold = Outcome(
        outcome_of(before, req("a", 100, 3)).decisions,
        replace(before, taken=4, accepted=1),
    )
    with pytest.raises(CommitConflictError):
        backend.store.commit(before, oversold, NOW, {})
    assert backend.state() == state
    backend.store.commit(before, outcome_of(before, req("a", 100, 3)), NOW, {})
    assert (backend.snapshot("gig").taken, backend.snapshot("gig").version) == (3, 1)


def test_a_commit_that_only_rejects_passes_with_capacity_below_taken(backend):
    # GIVEN an event with 3 of 4 seats taken, whose capacity an operator set to 2 by hand
    backend.store.create_event("gig", 4, NOW)
    before = backend.snapshot("gig")
    backend.store.commit(before, outcome_of(before, req("a", 100, 3)), NOW, {})
    backend.set_by_hand("gig", {Attr.CAPACITY: 2})
    low = backend.snapshot("gig")
    assert (low.capacity, low.taken) == (2, 3)
    # WHEN a commit takes a seat THEN it is refused
    taking = Outcome(
        (req_decision := decide(replace(low, capacity=9), [req("b", 101)]).decisions),
        replace(low, taken=4, accepted=2),
    )
    assert req_decision[0].status == Status.ACCEPTED
    with pytest.raises(CommitConflictError):
        backend.store.commit(low, taking, LATER, {})
    # WHEN a commit only rejects THEN it goes through, taking nothing
    rejecting = outcome_of(low, req("c", 102))
    assert [d.reason for d in rejecting.decisions] == [Reason.CAPACITY_FULL]
    journal = backend.store.commit(low, rejecting, LATER, {})
    assert journal.version == 2
    assert backend.snapshot("gig") == replace(low, version=2)


def test_a_commit_decided_before_a_close_conflicts_and_one_decided_after_passes(backend):
    backend.store.create_event("gig", 5, NOW)
    open_ = backend.snapshot("gig")
    _, closed = backend.store.close_event("gig")
    assert closed is True
    state = backend.state()
    with pytest.raises(CommitConflictError):
        backend.store.commit(open_, outcome_of(open_, req("a", 100)), NOW, {})
    assert backend.state() == state
    after = backend.snapshot("gig")
    assert after.state == EventState.CLOSED
    outcome = outcome_of(after, req("a", 100))
    assert [d.reason for d in outcome.decisions] == [Reason.EVENT_CLOSED]
    assert backend.store.commit(after, outcome, NOW, {}).version == 1
    # and closing again says it was not this call that closed it
    assert backend.store.close_event("gig")[1] is False
    assert backend.store.close_event("nobody") == (None, False)


def test_a_commit_decided_before_a_capacity_change_conflicts(backend):
    backend.store.create_event("gig", 5, NOW)
    before = backend.snapshot("gig")
    raised = backend.store.update_capacity("gig", 9)
    assert (raised.event.capacity, raised.min_capacity) == (9, 5)
    with pytest.raises(CommitConflictError):
        backend.store.commit(before, outcome_of(before, req("a", 100)), NOW, {})
    now = backend.snapshot("gig")
    backend.store.commit(now, outcome_of(now, req("a", 100, 4)), NOW, {})
    # capacity goes down to the seats taken and no lower
    with pytest.raises(CapacityBelowTakenError):
        backend.store.update_capacity("gig", 3)
    assert backend.store.update_capacity("gig", 4).min_capacity == 4


def test_a_commit_on_an_event_item_that_does_not_exist_conflicts(backend):
    ghost = Event("gig", 5)
    with pytest.raises(CommitConflictError):
        backend.store.commit(ghost, outcome_of(ghost, req("a", 100)), NOW, {})
    assert backend.state() == {table: {} for table in TABLES}


def test_a_hand_written_event_item_without_version_or_state_commits_at_version_0(backend):
    backend.store.create_event("gig", 5, NOW)
    # ``create_event`` writes no counters or version: they read as 0
    item = backend.items(CONTROL_TABLE.name)[ControlKey.event("gig")]
    assert Attr.VERSION not in item and Attr.TAKEN not in item
    before = backend.snapshot("gig")
    assert before == Event("gig", 5)
    assert backend.store.commit(before, outcome_of(before, req("a", 100)), NOW, {}).version == 1


def test_a_journal_too_large_writes_nothing_and_says_how_many_fit(backend, monkeypatch):
    backend.store.create_event("gig", 5, NOW)
    before = backend.snapshot("gig")
    outcome = outcome_of(before, req("a", 100), req("b", 101), req("c", 102))
    two = Journal.build("gig", 1, NOW, outcome.decisions[:2], {}).encode()
    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", len(two))
    state = backend.state()
    with pytest.raises(JournalTooLargeError) as too_big:
        backend.store.commit(before, outcome, NOW, {})
    assert too_big.value.fits == 2
    assert backend.state() == state
    # a journal one byte over the bound is refused; exactly at it, it commits
    three = Journal.build("gig", 1, NOW, outcome.decisions, {}).encode()
    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", len(three) - 1)
    with pytest.raises(JournalTooLargeError):
        backend.store.commit(before, outcome, NOW, {})
    assert backend.state() == state
    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", len(three))
    assert backend.store.commit(before, outcome, NOW, {}).version == 1


def test_creating_an_event_twice_is_refused(backend):
    backend.store.create_event("gig", 5, NOW, created_by="x" * 3000)
    with pytest.raises(EventExistsError):
        backend.store.create_event("gig", 9, LATER)
    record = backend.store.get_event("gig")
    assert (record.event.capacity, record.created_at) == (5, NOW)
    # kept to the longest identity recorded (the API records a longer one as its hash)
    assert record.created_by == "x" * 2048


# -- materialize and the decisions it writes ------------------------------------------------


def test_a_first_decision_that_finds_an_item_never_replaces_it(backend):
    """What a signup decided twice comes to (the processor reads every signup that can
    be decided already, so only a REMOVE lost before the processor saw it, docs/design.md
    section 4, leads here): the first decision stands, to the byte; the second commit's
    counters count a decision that is no item, which materialize returns as void (the
    processor takes it back out of the event)."""
    backend.store.create_event("gig", 0, NOW)
    before = backend.snapshot("gig")
    first = backend.store.commit(before, outcome_of(before, req("a", 100)), NOW, {})
    assert not backend.store.materialize("gig", first)
    items = backend.items(MAIN_TABLE.name)
    assert items[("gig", "a")][Attr.REASON] == {"S": Reason.CAPACITY_FULL}
    # WHEN a commit that did not know a decides it again (the capacity raised meanwhile)
    backend.set_by_hand("gig", {Attr.CAPACITY: 1})
    again = backend.snapshot("gig")
    second = backend.store.commit(again, outcome_of(again, req("a", 200)), LATER, {})
    assert [d.status for d in second.decisions] == [Status.ACCEPTED]
    voids = backend.store.materialize("gig", second)
    # THEN the item is the first decision's; the event counts the second, which is void
    assert backend.items(MAIN_TABLE.name) == items
    assert backend.snapshot("gig").taken == 1
    assert list(voids) == list(second.decisions)
    # and writing either journal out again finds nothing new: the first is its own item
    assert not backend.store.materialize("gig", first)


def test_materialized_items_read_back_as_written_and_again_change_nothing(backend):
    backend.store.create_event("gig", 2, NOW)
    before = backend.snapshot("gig")
    requests = (
        req("a", 100, attributes={"team": "A", "raw": b"\x00\xff", "tags": {"x", "y"}}),
        req("b", 101, submitted_at="2026-01-01T00:00:00Z"),
        req("c", 102, 5),
        req("d", 103, problem="seats must be at least 1", seats=0),
    )
    journal = backend.store.commit(
        before, outcome_of(before, *requests), NOW, by_id(*requests), 1_800_000_000
    )
    backend.store.materialize("gig", journal, by_id(*requests))
    items = backend.items(MAIN_TABLE.name)
    # exactly the items the journal fixes, to the byte
    expected = SignupStore(client=object()).journal_items("gig", journal)
    assert items == {("gig", i[Attr.SIGNUP_ID]["S"]): i for i in expected}
    got = backend.store.get_decisions("gig", ["a", "b", "c", "d", "nobody", "a"])
    assert sorted(got) == ["a", "b", "c", "d"]
    assert got["a"]["attributes"]["raw"] == b"\x00\xff"
    assert got["a"]["attributes"]["tags"] == {"x", "y"}
    assert (got["a"][Attr.STATUS], got["a"][Attr.POSITION]) == (Status.ACCEPTED, 1)
    assert got["b"][Attr.SUBMITTED_AT] == "2026-01-01T00:00:00Z"
    assert (got["c"][Attr.REASON], got["d"][Attr.REASON]) == (
        Reason.CAPACITY_FULL,
        Reason.INVALID_REQUEST,
    )
    assert {g[Attr.EXPIRES_AT] for g in got.values()} == {1_800_000_000}
    assert backend.store.get_decisions("other", ["a"]) == {}
    # WHEN materialized again (another processor, a retry) THEN the same items, and no
    # decision is void (each item is the decision itself)
    assert not backend.store.materialize("gig", journal)
    assert backend.items(MAIN_TABLE.name) == items


# -- reject_without_event -------------------------------------------------------------------


def test_rejections_of_an_event_without_item_are_written_until_it_exists(backend):
    a, b = req("a", 100, attributes={"team": "A"}), req("b", 101)
    outcome = outcome_of(None, a, b)
    assert [d.reason for d in outcome.decisions] == [Reason.UNKNOWN_EVENT] * 2
    backend.store.reject_without_event("gig", outcome.decisions, by_id(a, b), NOW, 1_800_000_000)
    items = backend.items(MAIN_TABLE.name)
    helper = SignupStore(client=object())
    assert items == {
        ("gig", d.signup_id): helper.decision_item(
            "gig", d, NOW, by_id(a, b)[d.signup_id], 1_800_000_000
        )
        for d in outcome.decisions
    }
    # WHEN a signup already decided is rejected again THEN refused, nothing written
    c = req("c", 102)
    with pytest.raises(CommitConflictError):
        backend.store.reject_without_event(
            "gig", outcome_of(None, a, c).decisions, by_id(a, c), LATER
        )
    assert backend.items(MAIN_TABLE.name) == items
    # WHEN the event exists THEN refused, nothing written
    backend.store.create_event("gig", 5, NOW)
    with pytest.raises(CommitConflictError, match="appeared"):
        backend.store.reject_without_event("gig", outcome_of(None, c).decisions, by_id(c), LATER)
    assert backend.items(MAIN_TABLE.name) == items


# -- parked events ---------------------------------------------------------------------------


def test_parked_records_come_back_whole_in_arrival_order_by_number(backend):
    first = backend.store.park(
        "gig",
        [
            req("late", 1000, 3, attributes={"team": "L", "n": 2}),
            req("bad", 99, 0, problem="seats must be a whole number"),
        ],
        NOW,
        "StoreUnavailableError",
    )
    second = backend.store.park(
        "gig", [req("first", 98, submitted_at="2026-01-01T00:00:00Z")], LATER, None
    )
    backend.store.park("other", [IntakeRecord("other", "x", "97")], NOW, None)
    assert (first, second) == (1, 2)
    assert backend.store.parked_records("gig") == [
        req("first", 98, submitted_at="2026-01-01T00:00:00Z"),
        req("bad", 99, 0, problem="seats must be a whole number"),
        req("late", 1000, 3, attributes={"team": "L", "n": 2}),
    ]
    assert backend.store.parked_records("nobody") == []
    marker = backend.store.get_parking("gig")
    assert marker == {
        "pk": "PARK#gig",
        "sk": "PARKED",
        "event_id": "gig",
        "version": 2,
        "parked_since": NOW,
        "first_sequence_number": "99",
        "error": "StoreUnavailableError",
        # due at once in the due-holds index (the last park's time): a wake-up releases it
        "hold_due_at": ms_of(LATER),
        "hold_due_shard": DUE_HOLDS_SHARD,
    }
    # parking the same record again writes the same item
    state = backend.items(CONTROL_TABLE.name)
    backend.store.park("gig", [req("first", 98, submitted_at="2026-01-01T00:00:00Z")], NOW, None)
    after = backend.items(CONTROL_TABLE.name)
    assert after.pop(ControlKey.parking("gig"))["version"] == {"N": "3"}
    state.pop(ControlKey.parking("gig"))
    assert after == state


def test_parking_refuses_what_is_not_a_sequence_number_and_writes_nothing(backend):
    with pytest.raises(ValueError, match="not a stream sequence number"):
        backend.store.park("gig", [req("a", 100), req("b", "12x")], NOW, None)
    with pytest.raises(ValueError):
        backend.store.park("gig", [], NOW, None)
    assert backend.state() == {table: {} for table in TABLES}


def test_unparking_deletes_exactly_those_records_and_keeps_the_marker(backend):
    backend.store.park("gig", [req(f"s{n}", n) for n in (98, 99, 1000, 1001)], NOW, None)
    backend.store.unpark("gig", ["99", "1000", "99", "5"])
    assert [r.sequence_number for r in backend.store.parked_records("gig")] == ["98", "1001"]
    assert backend.store.get_parking("gig") is not None
    with pytest.raises(ValueError):
        backend.store.unpark("gig", ["nine"])


def test_a_marker_is_cleared_only_at_its_version_and_keeps_it(backend):
    version = backend.store.park("gig", [req("a", 100)], NOW, "X" * 500)
    assert backend.store.get_parking("gig")["error"] == "X" * MAX_PARKING_ERROR_CHARS
    assert backend.store.clear_parking("gig", version + 1) is False
    assert backend.store.clear_parking("gig", version - 1) is False
    assert backend.store.get_parking("gig") is not None
    assert backend.store.clear_parking("gig", version) is True
    assert backend.store.get_parking("gig") is None
    item = backend.items(CONTROL_TABLE.name)[ControlKey.parking("gig")]
    assert item == {
        "pk": {"S": "PARK#gig"},
        "sk": {"S": "PARKED"},
        "event_id": {"S": "gig"},
        "version": {"N": str(version)},
    }
    # the parked record is not touched by clearing; parked again, since then and from then
    assert [r.signup_id for r in backend.store.parked_records("gig")] == ["a"]
    assert backend.store.park("gig", [req("b", 200)], LATER, None) == version + 1
    marker = backend.store.get_parking("gig")
    assert (marker["parked_since"], marker["first_sequence_number"]) == (LATER, "200")
    assert "error" not in marker
    # no marker at all: nothing to clear
    assert backend.store.clear_parking("nobody", 0) is False
    assert backend.store.clear_parking("nobody", 1) is False


def test_the_event_and_its_marker_are_read_together(backend):
    assert backend.store.get_event_and_parking("gig") == (None, None, False)
    backend.store.create_event("gig", 5, NOW)
    assert backend.store.get_event_and_parking("gig") == (
        backend.store.get_event("gig"),
        None,
        False,
    )
    version = backend.store.park("gig", [req("a", 100)], NOW, None)
    event, marker, may_repeat = backend.store.get_event_and_parking("gig")
    assert event == backend.store.get_event("gig") and may_repeat is False
    assert marker == backend.store.get_parking("gig") and marker["version"] == version
    backend.store.clear_parking("gig", version)
    assert backend.store.get_event_and_parking("gig") == (event, None, False)
    # a marker without an event item
    backend.store.park("solo", [IntakeRecord("solo", "a", "1")], NOW, None)
    solo = backend.store.get_event_and_parking("solo")
    assert solo[0] is None and solo[1]["version"] == 1 and solo[2] is False


def test_may_repeat_is_noted_on_the_marker_item_and_changes_nothing_else(backend):
    # GIVEN no marker and no event item: noting makes the marker item, parked or not
    backend.store.note_may_repeat("early")
    assert backend.store.get_event_and_parking("early") == (None, None, True)
    assert backend.items(CONTROL_TABLE.name)[ControlKey.parking("early")] == {
        "pk": {"S": "PARK#early"},
        "sk": {"S": "PARKED"},
        "event_id": {"S": "early"},
        ParkAttr.MAY_REPEAT: {"BOOL": True},
    }
    # a parked event stays parked, at its version; noting twice writes the same item
    backend.store.create_event("gig", 5, NOW)
    version = backend.store.park("gig", [req("a", 100)], NOW, "StoreUnavailableError")
    parked = backend.store.get_parking("gig")
    backend.store.note_may_repeat("gig")
    state = backend.state()
    backend.store.note_may_repeat("gig")
    assert backend.state() == state
    event, marker, may_repeat = backend.store.get_event_and_parking("gig")
    assert may_repeat is True and event == backend.store.get_event("gig")
    assert marker == {**parked, ParkAttr.MAY_REPEAT: True}
    # and a release clears the parking, never the note; parking again keeps it too
    assert backend.store.clear_parking("gig", version) is True
    assert backend.store.get_event_and_parking("gig")[1:] == (None, True)
    backend.store.park("gig", [req("b", 200)], LATER, None)
    assert backend.store.get_event_and_parking("gig")[2] is True
    assert backend.store.get_parking("gig")["version"] == version + 1


# -- the two stores side by side -------------------------------------------------------------


def _scenario(store: Any) -> None:
    """A bit of everything the processor does, through the processor."""

    def insert(event_id: str, signup_id: str, seq: int, seats: int = 1, **image: Any):
        keys = {"event_id": event_id, "signup_id": signup_id}
        full = {**keys, "seats": Decimal(seats), "submitted_at": "2026-01-01T00:00:00Z", **image}
        return StreamRecord(str(seq), "INSERT", keys, full)

    store.create_event("gig", 3, NOW)
    store.create_event("shut", 3, NOW)
    store.close_event("shut")
    processor = StreamProcessor(store, clock=lambda: NOW, chunk_size=2)
    processor.process(
        [
            insert("gig", "a", 100, 2, attributes={"team": "A", "blob": b"\x01"}),
            insert("nope", "x", 101),
            insert("gig", "b", 102, 2),
            insert("gig", "c", 103, 1),
            insert("shut", "s", 104),
            insert("gig", "-bad", 105),
            insert("gig", "a", 106, 2),
        ]
    )
    store.park("gig", [IntakeRecord("gig", "late", "1000", attributes={"k": "v"})], NOW, "E")
    StreamProcessor(store, clock=lambda: LATER).release("gig")


def test_the_fake_and_the_real_store_end_with_the_same_items(aws):
    fake, moto = fake_backend(), moto_backend(aws)
    _scenario(fake.store)
    _scenario(moto.store)
    assert fake.state() == moto.state()
    assert len(fake.items(MAIN_TABLE.name)) == 7


def _lifecycle_scenario(store: Any) -> None:
    """Holds, a waitlist, requests, an expiry and promotions, through the processor."""
    from turnstile.storage.dynamo import event_key

    def record(signup_id: str, seq: int, kind: str | None = None, count: int = 0):
        keys = {"event_id": "life", "signup_id": signup_id}
        image: dict[str, Any] = {**keys, "seats": Decimal(1)}
        if kind is not None:
            image.update(request=kind, request_count=Decimal(count), undecided="0")
        return StreamRecord(str(seq), "MODIFY" if kind else "INSERT", keys, image)

    store.create_event("life", 2, NOW)
    item = store.control[store._event_key("life")] if hasattr(store, "control") else None
    if item is not None:  # the fake: the organizer's options, written on its item
        item.update({"waitlist": {"N": "2"}, "hold_seconds": {"N": "5"}})
    else:
        store.dynamo.call(
            "update_item",
            TableName=store.control_table,
            Key=event_key("life"),
            UpdateExpression="SET waitlist = :w, hold_seconds = :h",
            ExpressionAttributeValues={":w": {"N": "2"}, ":h": {"N": "5"}},
        )
    at = {"now": NOW}
    processor = StreamProcessor(store, clock=lambda: at["now"], chunk_size=3)
    processor.process([record(s, 200 + i) for i, s in enumerate("abcde")])
    processor.process([record("a", 210, "confirm", 1), record("b", 211, "cancel", 1)])
    processor.process([record("e", 212, "confirm", 1), record("c", 213, "confirm", 1)])
    at["now"] = LATER  # a cancels: d, waiting, is promoted to a hold of 5 s ...
    processor.process([record("a", 214, "cancel", 2)])
    at["now"] = "2026-01-01T00:06:00.000000Z"  # ... which lapses at the next record
    processor.process([record("e", 215, "confirm", 1)])  # a re-emission: a tick


def test_the_fake_and_the_real_store_agree_on_the_lifecycle(aws):
    fake, moto = fake_backend(), moto_backend(aws)
    _lifecycle_scenario(fake.store)
    _lifecycle_scenario(moto.store)
    assert fake.state() == moto.state()
    statuses = sorted(
        (i["signup_id"]["S"], i["status"]["S"]) for i in moto.items(MAIN_TABLE.name).values()
    )
    assert statuses == [
        ("a", "CANCELLED"),
        ("b", "CANCELLED"),
        ("c", "ACCEPTED"),
        ("d", "EXPIRED"),
        ("e", "REJECTED"),
    ]
