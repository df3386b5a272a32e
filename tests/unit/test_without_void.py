"""``items.without_void``: what a commit counted for first decisions that never took effect,
taken back out of the event, and nothing else."""

from __future__ import annotations

from turnstile.base.contract import Status
from turnstile.engine.lifecycle import Event, Hold, Waiting
from turnstile.storage.items import Decision, without_void


def test_only_the_void_decisions_own_places_go_never_the_real_ones() -> None:
    # a's real hold (position 1) and its void one (position 3); b's real place in line and
    # its void one (another record)
    event = Event(
        "gig",
        4,
        taken=3,
        accepted=3,
        holds=(Hold("a", 1, 1, 10), Hold("c", 1, 2, 20), Hold("a", 1, 3, 30)),
        waiting=(Waiting("b", 1, "5"), Waiting("b", 2, "9")),
    )
    counts = {Status.HELD: 3, Status.WAITLISTED: 2}
    voids = [
        Decision("a", "8", Status.HELD, 1, position=3),
        Decision("b", "9", Status.WAITLISTED, 2),
    ]
    after, left = without_void(event, counts, voids)
    assert after.holds == (Hold("a", 1, 1, 10), Hold("c", 1, 2, 20))
    assert after.waiting == (Waiting("b", 1, "5"),)
    assert (after.taken, after.accepted) == (2, 3)  # the position stays used: a gap
    assert left == {Status.HELD: 2, Status.WAITLISTED: 1}


def test_an_accepted_or_rejected_void_gives_back_only_seats_and_counts() -> None:
    event = Event("gig", 3, taken=3, accepted=3)
    voids = [
        Decision("a", "7", Status.ACCEPTED, 2, position=3),
        Decision("z", "8", Status.REJECTED, 1, reason="capacity_full"),
    ]
    after, left = without_void(event, {Status.ACCEPTED: 3, Status.REJECTED: 1}, voids)
    assert after.taken == 1
    assert left == {Status.ACCEPTED: 2, Status.REJECTED: 0}
    assert without_void(event, None, voids)[1] is None  # an event without counts keeps none
