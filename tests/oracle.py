"""The decider turnstile had before its lifecycle engine, kept as the tests' oracle.

``decide`` decides signups alone (no holds, no waitlist, no requests): each new signup of
an event, in order, ACCEPTED with the next position while its seats fit, else REJECTED
with a reason. The lifecycle engine (``turnstile.engine.lifecycle.step``), given an event with no
holds and no waitlist and nothing but signups, must decide exactly as this does
(tests/unit/test_lifecycle.py); tests that need a commit's outcome without the engine's
machinery build it here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from turnstile.base.contract import EventState, Reason, Status
from turnstile.engine.lifecycle import Event
from turnstile.engine.rules import bounded
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import Decision, Outcome

__all__ = ["decide"]


def decide(
    event: Event | None,
    requests: Sequence[IntakeRecord],
    already_decided: Iterable[str] = (),
) -> Outcome:
    """Decide each new request of one event, in the order given.

    Rules, in order:
    - a request whose signup is already decided, or repeats an earlier one here, gets no
      new decision (a decision is made once, never changed);
    - invalid input is REJECTED ``invalid_request`` (``detail`` says why, in at most
      MAX_DETAIL_CHARS characters); a request's ``note`` goes into every decision's detail;
    - no event item: REJECTED ``unknown_event``; a CLOSED event: REJECTED ``event_closed``;
    - seats beyond what remains: REJECTED ``capacity_full`` (a later, smaller request may
      still fit: that is not an order violation, it was never rejected while fitting);
    - otherwise ACCEPTED with the next position, and the seats are taken.
    The returned state is ``event`` advanced past every acceptance (version unchanged:
    the store bumps it when it commits).
    """
    seen = set(already_decided)
    decisions: list[Decision] = []
    taken = event.taken if event else 0
    accepted = event.accepted if event else 0
    for request in requests:
        if request.signup_id in seen:
            continue
        seen.add(request.signup_id)
        decision = Decision(
            signup_id=request.signup_id,
            sequence_number=request.sequence_number,
            status=Status.REJECTED,
            seats=request.seats,
        )
        if request.note:
            decision = replace(decision, detail=request.note)
        if request.problem:
            detail = "; ".join(p for p in (request.problem, request.note) if p)
            decision = replace(decision, reason=Reason.INVALID_REQUEST, detail=bounded(detail))
        elif event is None:
            decision = replace(decision, reason=Reason.UNKNOWN_EVENT)
        elif event.state != EventState.OPEN:
            decision = replace(decision, reason=Reason.EVENT_CLOSED)
        elif request.seats > event.capacity - taken:
            decision = replace(decision, reason=Reason.CAPACITY_FULL)
        else:
            taken += request.seats
            accepted += 1
            decision = replace(decision, status=Status.ACCEPTED, position=accepted)
        decisions.append(decision)
    state = replace(event, taken=taken, accepted=accepted) if event else None
    return Outcome(decisions=tuple(decisions), state=state)
