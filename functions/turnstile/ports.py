"""What the stream processor needs of a store: ``ProcessorStore``.

``SignupStore`` (DynamoDB) is the implementation that runs; ``tests/fakes/store.py`` is an
in-memory one for fast tests of the processor. Both are held to the contract below by the
same tests (``tests/contract/``), so a test that passes against the fake says something
about the real store.

The methods are exactly the ones ``StreamProcessor`` calls, with ``SignupStore``'s
signatures. Every read is strongly consistent: the processor decides from what it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from turnstile.domain import Decision, EventSnapshot, Outcome, SignupRequest
from turnstile.store import EventRecord, Journal

__all__ = ["ProcessorStore"]


@runtime_checkable
class ProcessorStore(Protocol):
    """The store as the stream processor uses it (docs/design.md, §4 and §6)."""

    # -- the event item and its decisions ------------------------------------------------

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        """The event item (its snapshot, ``created_at``, last journal), or None if there is
        no event item. Read strongly consistent unless ``consistent`` is False."""
        ...

    def get_decisions(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The decision items that exist among ``signup_ids`` (plain values, by signup id),
        read strongly consistent; signups without one are simply absent."""
        ...

    def commit(
        self,
        expected: EventSnapshot,
        outcome: Outcome,
        decided_at: str,
        requests: Mapping[str, SignupRequest | Mapping[str, Any]],
        expires_at: int | None = None,
    ) -> Journal:
        """Store ``outcome``'s counters and a journal of its decisions (version
        ``expected.version + 1``) on the event item, in one write, or raise.

        The write is conditioned on the event item existing and still having the
        ``version``, ``capacity`` and ``state`` of ``expected`` (an absent version reads 0,
        an absent state OPEN); when the outcome takes seats, also on
        ``capacity >= outcome.state.taken``. A commit that only rejects goes through even
        if capacity is below taken. It sets ``capacity_floor`` to the new taken.

        Raises ``CommitConflictError`` (nothing written) when a condition fails;
        ``JournalTooLargeError`` (nothing written) when the encoded journal would exceed
        ``store.MAX_JOURNAL_BYTES``, with ``fits``: how many leading decisions would fit.
        The journal fixes every byte of the decision items ``materialize`` writes.
        """
        ...

    def materialize(
        self,
        event_id: str,
        journal: Journal,
        requests: Mapping[str, SignupRequest | Mapping[str, Any]] | None = None,
    ) -> None:
        """Write the journal's decision items, each exactly as the journal fixes it.
        Idempotent: writing a journal again writes the same items. ``requests`` is read
        only for a journal of format 1 (no copied fields)."""
        ...

    def reject_without_event(
        self,
        event_id: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, SignupRequest],
        decided_at: str,
        expires_at: int | None = None,
    ) -> None:
        """Write rejections of an event that has no event item, only while it has none and
        only where no decision item exists yet; otherwise raise ``CommitConflictError``.
        Written in transactions of at most 99 items: a conflict in a later one leaves the
        earlier ones written."""
        ...

    # -- held events: the hold marker and parked records ---------------------------------

    def get_event_and_hold(self, event_id: str) -> tuple[EventRecord | None, dict[str, Any] | None]:
        """``(get_event(event_id), get_hold(event_id))`` in one consistent read."""
        ...

    def get_hold(self, event_id: str) -> dict[str, Any] | None:
        """The hold marker (plain values: ``version``, ``event_id``, ``held_since``,
        ``first_sequence_number``, ``error`` if any) while the event is held; None when it
        was never held or its hold was lifted."""
        ...

    def park(
        self, event_id: str, requests: Sequence[SignupRequest], now: str, error: str | None
    ) -> int:
        """Park ``requests`` under their sequence numbers (again: the same item) and hold
        the event: the marker's version goes up by one (it never goes down, and survives a
        lift), ``held_since`` and ``first_sequence_number`` are set unless already set,
        ``error`` (cut to 200 characters) replaces the last one if given.
        Returns the hold's new version. Raises ``ValueError`` for a sequence number that
        is not one (digits, at most 40) or for no requests."""
        ...

    def parked_requests(self, event_id: str) -> list[SignupRequest]:
        """The event's parked records, in arrival order: by sequence number as a number
        ("98" before "1000"), each as it was parked."""
        ...

    def unpark(self, event_id: str, sequence_numbers: Iterable[str]) -> None:
        """Delete these parked records; one that is not parked is no error."""
        ...

    def lift_hold(self, event_id: str, version: int) -> bool:
        """Clear the hold only if its version is still ``version``; False otherwise (records
        were parked since: the event stays held) or when there is no marker. The marker
        keeps its version."""
        ...
