"""What each part of turnstile needs of the store: one ``Protocol`` per user.

* ``ProcessorStore``: what the stream processor calls. ``SignupStore`` (DynamoDB) is the
  implementation that runs; ``tests/fakes/store.py`` is an in-memory one for fast tests of
  the processor. Both are held to the contract below by the same tests
  (``tests/contract/``), so a test that passes against the fake says something about the
  real store. Every read is strongly consistent: the processor decides from what it reads.
* ``SweeperStore`` and ``SweeperLedger``: what the sweeper reads of the signups
  (``SignupStore``), and its own items and writes (``turnstile.storage.ledger.Ledger``).
* ``FailureNotes``: the on-failure queue as the sweeper reads it
  (``turnstile.storage.failures.FailureQueue``).
* ``AuditStore``: what ``turnstile audit`` reads (``SignupStore``).

Each protocol names exactly the methods its user calls, with the implementation's
signatures (``tests/unit/test_ports.py`` checks both).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from turnstile.engine.escrow import Pool, Share
from turnstile.engine.lifecycle import Event
from turnstile.storage.escrow import Secured
from turnstile.storage.events import EventRecord
from turnstile.storage.failures import FailureNote
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import Decision, Outcome
from turnstile.storage.journal import Journal

__all__ = ["AuditStore", "FailureNotes", "ProcessorStore", "SweeperLedger", "SweeperStore"]


@runtime_checkable
class ProcessorStore(Protocol):
    """The store as the stream processor uses it (docs/design.md, §4 and §6)."""

    # -- the event item and its decisions ------------------------------------------------

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        """The event item (its snapshot, ``created_at``, last journal), or None if there is
        no event item. Read strongly consistent unless ``consistent`` is False."""
        ...

    def load_lineup(self, record: EventRecord) -> EventRecord:
        """``record`` with its lineup whole: a long lineup's pages read (the ones this
        store does not hold at the versions the directory names), as of the event item's
        version; the record itself when its lineup is on the item. Raises
        ``CommitConflictError`` when a page moved past the item read (a later commit): the
        caller reads the event again."""
        ...

    def get_decisions(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The decision items that exist among ``signup_ids`` (plain values, by signup id),
        read strongly consistent; signups without one are simply absent."""
        ...

    def pool(self, event_id: str) -> Pool | None:
        """A sharded event's pool as it is now (None: no such event)."""
        ...

    def secure(
        self, event_id: str, shards: int, shard: int, need: int, sizes: Sequence[int] = ()
    ) -> Secured:
        """What shard ``shard`` of the sharded event ``event_id`` (of ``shards``) holds,
        and may take in its commit, toward ``need`` free seats: draws from the event's pool
        while it has seats, then plans to take other shards' slack
        (``storage.escrow.Escrow.secure``). ``sizes``: the seats of the refused signups
        ``need`` counts (one larger than the event's capacity is left out of it)."""
        ...

    def commit(
        self,
        expected: Event,
        outcome: Outcome,
        decided_at: str,
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]],
        expires_at: int | None = None,
        high_water: int | None = None,
        takes: Sequence[tuple[Share, int]] = (),
        pool: Pool | None = None,
        wake: Sequence[str] = (),
    ) -> Journal:
        """Store ``outcome``'s counters and a journal of its decisions (version
        ``expected.version + 1``) on the event item, in one write, or raise. A shard of a
        sharded event with a waitlist tells its ``pool`` (as read before deciding) of its
        waitlist's change and wakes the shards ``wake`` names, in the same transaction
        (``SignupStore.commit``). With
        ``high_water``, the same write sets the event's high-water mark to it (a string of
        its digits, ``Attr.HIGH_WATER``); without, it leaves the mark as it is.

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
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]] | None = None,
    ) -> list[Decision]:
        """Write the journal's decision items, each exactly as the journal fixes it.
        Idempotent: writing a journal again writes the same items. ``requests`` is read
        only for a journal of format 1 (no copied fields). Returns the journal's first
        decisions whose items hold another first decision (void: they never took effect)."""
        ...

    def reject_without_event(
        self,
        event_id: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, IntakeRecord],
        decided_at: str,
        expires_at: int | None = None,
        event_may_appear: bool = True,
    ) -> None:
        """Write rejections of an event that has no event item, only while it has none (not
        checked without ``event_may_appear``: an id that is no id) and only where no
        decision item exists yet; otherwise raise ``CommitConflictError``.
        Written in transactions of at most 99 items: a conflict in a later one leaves the
        earlier ones written."""
        ...

    # -- parked events: the parking marker and parked records ----------------------------

    def get_event_and_parking(
        self, event_id: str
    ) -> tuple[EventRecord | None, dict[str, Any] | None, bool]:
        """``(get_event(event_id), get_parking(event_id), may_repeat)`` in one consistent
        read; ``may_repeat``: the event's marker item (parked or not) carries
        ``ParkAttr.MAY_REPEAT``."""
        ...

    def note_may_repeat(self, event_id: str) -> None:
        """Set ``ParkAttr.MAY_REPEAT`` on the event's marker item (made if absent, with its
        ``event_id``; whether or not an event item exists), leaving the rest of it as it was:
        a parking stays, a cleared marker stays cleared. Writing it again changes nothing."""
        ...

    def get_parking(self, event_id: str) -> dict[str, Any] | None:
        """The parking marker (plain values: ``version``, ``event_id``, ``parked_since``,
        ``first_sequence_number``, ``error`` if any) while the event is parked; None when it
        was never parked or its marker was cleared."""
        ...

    def park(
        self, event_id: str, requests: Sequence[IntakeRecord], now: str, error: str | None
    ) -> int:
        """Park ``requests`` under their sequence numbers (again: the same item) and mark
        the event parked: the marker's version goes up by one (it never goes down, and
        survives a clear), ``parked_since`` and ``first_sequence_number`` are set unless
        already set, ``error`` (cut to 400 characters) replaces the last one if given, and
        the marker is due at once in the due-holds index (so a wake-up releases the event).
        Returns the marker's new version. Raises ``ValueError`` for a sequence number that
        is not one (digits, at most 40) or for no requests."""
        ...

    def parked_records(self, event_id: str) -> list[IntakeRecord]:
        """The event's parked records, in arrival order: by sequence number as a number
        ("98" before "1000"), each as it was parked."""
        ...

    def unpark(self, event_id: str, sequence_numbers: Iterable[str]) -> None:
        """Delete these parked records; one that is not parked is no error."""
        ...

    def clear_parking(self, event_id: str, version: int) -> bool:
        """Clear the parking marker only if its version is still ``version``; False
        otherwise (records were parked since: the event stays parked) or when there is no
        marker. The marker
        keeps its version."""
        ...

    def keep_decision(self, event_id: str, signup_id: str, until: int | None) -> None:
        """Keep a decision until ``until`` (epoch seconds; None: for good); never shorter
        than it is kept now."""
        ...

    def wake_later(self, event_id: str, due_ms: int) -> None:
        """Have the event's wake-up written again at ``due_ms`` (its step failed)."""
        ...

    def release_due(self, event_id: str, due_ms: int) -> None:
        """Make a parked event's next release due at ``due_ms`` (epoch ms, the due-holds
        index); nothing if the event is not parked."""
        ...


@runtime_checkable
class SweeperStore(Protocol):
    """The signups as the sweeper reads them (docs/design.md, section 7): which records
    are undecided, and which events are parked. It writes nothing here but a cleared
    parking marker."""

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        """The event item (its last journal holds decisions not yet written out)."""
        ...

    def get_decisions(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The decision items that exist among ``signup_ids``, read strongly consistent."""
        ...

    def intake_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every intake record (or one event's), read consistently: the daily full scan."""
        ...

    def parking_markers(self, event_id: str | None = None) -> dict[str, dict[str, Any]]:
        """Parking markers of the parked events, by event id."""
        ...

    def parked_records(self, event_id: str) -> list[IntakeRecord]:
        """A parked event's records, in arrival order."""
        ...

    def clear_parking(self, event_id: str, version: int) -> bool:
        """Clear a parking marker with nothing parked under it, only at ``version``."""
        ...

    def wake(self, event_id: str, reason: str, now: str | None = None) -> None:
        """Make the event take a step soon (its wake-up item): a parked event is released."""
        ...


@runtime_checkable
class SweeperLedger(Protocol):
    """The sweeper's own items and writes (``turnstile.storage.ledger``): its lease, its run
    history, its fenced re-emissions, the index of undecided records and its markers."""

    def acquire_lease(self, owner: str, duration_s: float, now: float) -> int | None:
        """Take (or renew) the lease; the new fencing token, or None while another's."""
        ...

    def release_lease(self, owner: str, token: int) -> None:
        """Give the lease up, only if it is still ``owner``'s with ``token``."""
        ...

    def get_lease(self) -> dict[str, Any] | None:
        """The lease item (``contract.LeaseAttr``), read consistently, or None."""
        ...

    def note_full_scan(self, owner: str, token: int, at: float) -> bool:
        """Record on the lease (while it is ours) when a full scan of intake finished."""
        ...

    def start_run(self, run_id: str, now: str, replay: bool = False) -> int | None:
        """Record a run's start; None when it ran already (unless a replay of a failure)."""
        ...

    def finish_run(
        self, run_id: str, seq: int, status: str, now: str, detail: Mapping[str, Any]
    ) -> None:
        """Append the run's outcome."""
        ...

    def run_history(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """History items of one run (or all), oldest first (``contract.RunAttr``)."""
        ...

    def fenced_re_emit_many(
        self,
        owner: str,
        token: int,
        now: float,
        keys: Sequence[tuple[str, str]],
        junk_counters: Collection[tuple[str, str]] = (),
    ) -> int:
        """Re-emit records while the lease holds (``LeaseLostError`` if not); how many."""
        ...

    def undecided_marked(self) -> Iterator[dict[str, Any]]:
        """Every entry of the sparse index of records marked ``undecided``."""
        ...

    def clear_undecided(
        self,
        answered: Mapping[tuple[str, str], Decimal | int],
        workers: int = 8,
        unanswered: list[tuple[str, str]] | None = None,
    ) -> int:
        """Remove the marker from these decided records whose requests are all answered
        (``answered``: each one's decision's ``request_count``); how many carried it. The
        others (a request unanswered, or gone) are appended to ``unanswered``."""
        ...


@runtime_checkable
class FailureNotes(Protocol):
    """The on-failure queue as the sweeper reads it (``turnstile.storage.failures``): notes
    of batches the event source gave up on, each deleted once what it stands for is
    re-emitted."""

    def receive(self, limit: int, hide_s: int) -> list[FailureNote]:
        """Up to ``limit`` notes, hidden from other readers for ``hide_s`` seconds."""
        ...

    def delete(self, notes: Sequence[FailureNote]) -> int:
        """Delete these notes; how many were deleted."""
        ...


@runtime_checkable
class AuditStore(Protocol):
    """What ``turnstile audit`` reads: every event's item, decisions, intake records and
    parking marker, all strongly consistent (``turnstile_tools.audit``)."""

    def shares(self, event_id: str, shards: int) -> tuple[Pool | None, list[Share]]:
        """A sharded event's pool and every shard's share at one instant."""
        ...

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        """The event item, or None."""
        ...

    def scan_events(self) -> Iterator[EventRecord]:
        """Every event item."""
        ...

    def decision_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every decision item (or one event's)."""
        ...

    def intake_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every intake record (or one event's)."""
        ...

    def get_parking(self, event_id: str) -> dict[str, Any] | None:
        """The event's parking marker while it is parked."""
        ...

    def last_woken(self, event_id: str) -> str | None:
        """When the event was last woken (its wake-up item's ``woken_at``), or None."""
        ...

    def parked_records(self, event_id: str) -> list[IntakeRecord]:
        """A parked event's records, in arrival order."""
        ...
