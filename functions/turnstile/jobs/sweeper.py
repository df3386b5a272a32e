"""The sweeper: nothing is ever left PENDING.

It finds intake records with no decision that are older than a threshold and re-emits them
into the stream (a MODIFY that bumps their re-emissions' counter), so the stream processor,
the only writer of decisions, decides them. It never decides anything itself.

It reads signups through a ``ports.SweeperStore`` (the ``SignupStore``) and keeps its own
items, and makes its writes, through a ``ports.SweeperLedger`` (``turnstile.storage.ledger``).

- One sweeper at a time: a lease that expires, with a fencing token that every
  re-emission checks in the same transaction: a sweeper whose lease lapsed
  cannot write.
- Each run leaves an immutable history (started, succeeded, failed); an atomic counter
  stops a duplicate concurrent start of the same run; only failed runs replay.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from turnstile.base.clock import MAX_CLOCK_SKEW_S, age_s, utc_now
from turnstile.base.contract import Attr, LeaseAttr, RunAttr, RunStatus, WakeReason, is_id
from turnstile.base.errors import LeaseLostError
from turnstile.base.personal_data import outlives
from turnstile.storage.dynamo import Tables
from turnstile.storage.events import EventRecord
from turnstile.storage.ledger import Ledger
from turnstile.storage.ports import FailureNotes, SweeperLedger, SweeperStore

__all__ = [
    "FULL_SCAN_EVERY_S",
    "SweepResult",
    "Sweeper",
    "Undecided",
    "find_undecided",
    "run_id_for",
]

log = logging.getLogger(__name__)

#: A sweep run per five-minute slot: duplicate deliveries of one schedule tick share it.
SLOT_S = 300

#: How often a run reads the whole intake table instead of the index of marked records: the
#: backstop for unmarked records (a first put carries no marker) lost without a note in the
#: on-failure queue (docs/design.md §7).
FULL_SCAN_EVERY_S = 86_400.0
#: Decided records whose marker a run removes between two looks at its time budget.
UNMARK_CHUNK = 1000
#: Notes of the on-failure queue one run reads at most (one scan answers them all; the
#: rest wait for the next run).
MAX_FAILURE_NOTES = 1000


def run_id_for(when: datetime | None = None, slot_s: int = SLOT_S) -> str:
    when = when or datetime.now(UTC)
    start = int(when.timestamp()) // slot_s * slot_s
    return datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Undecided:
    event_id: str
    signup_id: str
    age_s: float | None
    #: False when a producer wrote the re-emissions' counter (``Attr.RE_EMITS``) as
    #: something that is not a number.
    counter_ok: bool = True
    #: True when the record is decided but carries a request (``Attr.REQUEST_COUNT``) its
    #: decision has not answered yet: undecided all the same.
    request_unanswered: bool = False


@dataclass
class SweepResult:
    run_id: str
    status: str = "skipped"
    undecided: int = 0
    re_emitted: int = 0
    #: Parked events found (a failing event's undecided records wait behind its marker),
    #: and those whose release this run set off (docs/arrival-order.md).
    parked_events: int = 0
    releases_triggered: int = 0
    lease_token: int | None = None
    #: True when the run read the whole intake table (the backstop), else only the index.
    full_scan: bool = False
    #: Decided records whose ``undecided`` marker this run removed.
    unmarked: int = 0
    #: Of ``undecided``, the decided records carrying a request not answered yet.
    unanswered: int = 0
    #: Notes of the on-failure queue this run read (each a batch the event source gave up
    #: on: they make the run a full scan that ignores ages), and those it deleted.
    failure_notes: int = 0
    failure_notes_deleted: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _seconds_since(value: Any, now: float) -> float | None:
    """Seconds since a time the sweeper wrote (epoch seconds: a record's last re-emission,
    ``Attr.RE_EMITTED_AT``, or the last full scan); None when that is no such number, or in
    the future, so it guards nothing."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    try:
        since = now - float(value)
    except (ArithmeticError, ValueError):
        return None
    if not math.isfinite(since) or since < -MAX_CLOCK_SKEW_S:
        return None
    return max(0.0, since)


def _count(value: Any) -> Decimal | None:
    """A ``request_count`` as a number, or None when it is none (a string, a map, ...)."""
    if isinstance(value, Decimal) and value.is_finite():
        return value
    return None


def requests_answered(decision: dict[str, Any] | None) -> Decimal:
    """How many requests a decision item answered (``Attr.REQUEST_COUNT``; absent: 0)."""
    answered = _count((decision or {}).get(Attr.REQUEST_COUNT))
    return answered if answered is not None else Decimal(0)


def request_unanswered(intake: dict[str, Any], answered: Decimal) -> bool:
    """Whether an intake record carries a request its decision has not answered: its
    ``request_count`` is a number above ``answered``. A count that is no number, or one at
    or below it (a negative one too), is nothing the processor could answer: not a request.
    """
    made = _count(intake.get(Attr.REQUEST_COUNT))
    return made is not None and made > answered


def _ledger_beside(store: SweeperStore) -> SweeperLedger:
    """The ledger on a ``SignupStore``'s connection: the default of a sweeper's."""
    if not isinstance(store, Tables):
        raise TypeError(f"pass the ledger of a {type(store).__name__}: ledger=...")
    return Ledger.beside(store)


def find_undecided(
    store: SweeperStore,
    min_age_s: float,
    now: float | None = None,
    *,
    from_index: bool = False,
    ledger: SweeperLedger | None = None,
    decided_marked: dict[tuple[str, str], Decimal] | None = None,
    answering_notes: bool = False,
    out_of_time: Callable[[], bool] | None = None,
    left: list[int] | None = None,
) -> Iterator[Undecided]:
    """Intake records with no decision, submitted (or last re-emitted) over ``min_age_s`` ago.

    A record whose ``submitted_at`` is missing, no time, or in the future counts as old: a
    producer's clock must not hide a record, and re-emitting one that is merely pending
    costs one extra delivery and never changes a decision. Only the sweeper's own
    re-emission time (a re-emission under ``min_age_s`` ago) makes a record wait.
    ``answering_notes`` (a run answering the on-failure queue's notes): ages do not count,
    and a re-emission time only on a record that carries the marker every re-emission
    sets (a producer may write that time on its own first put).

    It reads the whole intake table (consistently), or with ``from_index`` only the sparse
    index of records marked ``undecided`` (``ledger.undecided_marked``; by default the
    ledger beside ``store``): work in proportion to what is undecided, but
    blind to records whose producer left the marker out (the full read finds those). Ages
    are judged first, so only old enough records cost a read of their decision.

    A decided record is undecided all the same while it carries a request its decision
    item has not answered (``request_unanswered``): the full read sees the record's
    ``request_count``; the index does not project it, so a record found there is judged
    when its marker is removed (``ledger.clear_undecided``, conditioned on it). Its age is
    the record's (``submitted_at``, or the last re-emission): a request has no time of its
    own. Records found decided that still carry the marker are put in ``decided_marked``
    with the requests their decision answered.

    Events are judged one after the other (in a random order when reading the whole
    table); once ``out_of_time()`` says so, the rest are not read: how many records that
    leaves is appended to ``left``.
    """
    now = time.time() if now is None else now
    now_at = datetime.fromtimestamp(now, UTC)
    if from_index:
        ledger = ledger if ledger is not None else _ledger_beside(store)
        source = ledger.undecided_marked()
    else:
        source = store.intake_items()
    by_event: dict[str, list[tuple[dict[str, Any], float | None]]] = {}
    for item in source:
        age = age_s(item.get(Attr.SUBMITTED_AT), now_at)
        since_re_emit = _seconds_since(item.get(Attr.RE_EMITTED_AT), now)
        if not answering_notes and age is not None and age < min_age_s:
            continue  # known to be young
        # Every re-emission marks its record: answering a note, a re-emission time on an
        # unmarked record is a producer's, and hides nothing (else the note would be
        # deleted with the record neither re-emitted nor in the index).
        trusted = not answering_notes or Attr.UNDECIDED in item
        if trusted and since_re_emit is not None and since_re_emit < min_age_s:
            continue  # re-emitted recently: give the stream time to deliver it
        by_event.setdefault(item[Attr.EVENT_ID], []).append((item, age))
    events = list(by_event.items())
    if not from_index:
        # A run out of time leaves the events after it for the next run: in a new order
        # each run, so runs that never get through a whole scan still reach every event.
        random.shuffle(events)
    for n, (eid, found) in enumerate(events):
        if out_of_time is not None and out_of_time():
            # Their decisions are not read: counted as left for a later run.
            skipped = sum(len(f) for _, f in events[n:])
            if left is not None:
                left.append(skipped)
            return
        items = store.get_decisions(eid, [i[Attr.SIGNUP_ID] for i, _ in found])
        decided = set(items)
        # An event id that is not an id has no event item (nor journal) to read: its key is
        # never built (``EVENT#`` and an id from intake may be a key DynamoDB refuses).
        event: EventRecord | None = store.get_event(eid) if is_id(eid) else None
        if event is not None and event.journal is not None:
            decided |= {d.signup_id for d in event.journal.decisions}
        for item, age in found:
            signup_id = item[Attr.SIGNUP_ID]
            unanswered = False
            if signup_id in decided:
                decision = items.get(signup_id)
                answered = requests_answered(decision)
                unanswered = decision is not None and request_unanswered(item, answered)
                # The full read sees the record's expires_at (the index does not): a
                # record a producer made outlive its decision is re-emitted, and the
                # processor keeps the decision as long as the record (never re-decided).
                outlived = (
                    not from_index
                    and decision is not None
                    and outlives(item.get(Attr.EXPIRES_AT), decision.get(Attr.EXPIRES_AT))
                )
                unanswered = unanswered or outlived
                if not unanswered:
                    # Only a decision item (not a journal row yet to be written) unmarks it.
                    if decided_marked is not None and Attr.UNDECIDED in item and decision:
                        decided_marked[(eid, signup_id)] = answered
                    continue
            counter = item.get(Attr.RE_EMITS)
            ok = counter is None or (isinstance(counter, Decimal) and counter.is_finite())
            yield Undecided(eid, signup_id, age, counter_ok=ok, request_unanswered=unanswered)


class Sweeper:
    """One sweep: lease, history entry, find, fenced re-emission, history outcome.

    A run finds undecided records through the sparse index of marked records (re-emitted
    records, requests, and records a producer chose to mark), except when a full scan is
    due (none recorded on the lease item, or the last one finished over
    ``full_scan_every_s`` ago): then it reads the whole intake table, and records the scan
    only if it re-emitted everything it found. ``0`` scans every run; ``math.inf`` never.

    A first put carries no marker: its record is found by the full scan, or sooner when
    the event source gives up on its batch and notes it in the on-failure queue
    (``failures``): a run that reads a note scans the whole table at once, re-emits every
    undecided record whatever its age (the event source has moved past the noted batch, so
    nothing of it is still on its way), and deletes the notes once nothing was left for a
    later run. A note stays hidden from other readers while the run lasts.
    """

    def __init__(
        self,
        store: SweeperStore,
        owner: str | None = None,
        lease_s: float = 120.0,
        min_age_s: float = 300.0,
        max_re_emits: int = 100_000,
        max_run_s: float = 180.0,
        clock: Callable[[], float] = time.time,
        full_scan_every_s: float | None = None,
        ledger: SweeperLedger | None = None,
        failures: FailureNotes | None = None,
    ) -> None:
        self.store = store
        #: The on-failure queue's notes (``turnstile.storage.failures``); None: not read.
        self.failures = failures
        #: The lease, run history, fenced re-emissions and the index: by default on the
        #: store's connection (``Ledger.beside``).
        self.ledger = ledger if ledger is not None else _ledger_beside(store)
        self.full_scan_every_s = (
            FULL_SCAN_EVERY_S if full_scan_every_s is None else full_scan_every_s
        )
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self.min_age_s = min_age_s
        self.max_re_emits = max_re_emits
        #: A run stops re-emitting after this long (the Lambda timeout is 4 minutes); the
        #: rest is counted as undecided and left to the next run.
        self.max_run_s = max_run_s
        #: Records re-emitted per fenced transaction (DynamoDB allows 100 actions).
        self.chunk = 99
        self.clock = clock

    def sweep(self, run_id: str | None = None, replay: bool = False) -> SweepResult:
        """Run one sweep under the lease. Never raises for a lost lease: it stops writing."""
        run_id = run_id or run_id_for()
        result = SweepResult(run_id=run_id)
        token = self.ledger.acquire_lease(self.owner, self.lease_s, self.clock())
        if token is None:
            result.status = "lease_busy"
            return result
        result.lease_token = token
        try:
            seq = self.ledger.start_run(run_id, utc_now(), replay=replay)
            if seq is None:
                result.status = "already_ran"
                return result
            try:
                self._work(result)
                result.status = RunStatus.SUCCEEDED
            except LeaseLostError as exc:
                result.status = RunStatus.FAILED
                result.errors.append(str(exc))
            except Exception as exc:
                result.status = RunStatus.FAILED
                result.errors.append(repr(exc))
                log.exception("sweep run failed", extra={"run_id": run_id})
            self.ledger.finish_run(run_id, seq, result.status, utc_now(), result.to_dict())
            return result
        finally:
            self.ledger.release_lease(self.owner, result.lease_token or token)

    def full_scan_due(self, now: float) -> bool:
        """Whether this run reads the whole intake table: no full scan recorded, or the
        last one over ``full_scan_every_s`` ago (or in the future: no guard)."""
        if math.isinf(self.full_scan_every_s):
            return False
        lease = self.ledger.get_lease() or {}
        since = _seconds_since(lease.get(LeaseAttr.FULL_SCAN_AT), now)
        return since is None or since >= self.full_scan_every_s

    def _work(self, result: SweepResult) -> None:
        assert result.lease_token is not None
        started = renewed = self.clock()
        batch: list[tuple[str, str]] = []
        junk: set[tuple[str, str]] = set()  # records whose re-emissions' counter is no number
        left = 0  # undecided records counted but left for the next run
        decided_marked: dict[tuple[str, str], Decimal] = {}
        cut: list[int] = []  # records of events a run out of time did not read
        # Hidden for as long as this run may take: no other reader acts on them meanwhile.
        notes = (
            self.failures.receive(MAX_FAILURE_NOTES, int(self.max_run_s + self.lease_s))
            if self.failures is not None
            else []
        )
        result.failure_notes = len(notes)
        result.full_scan = bool(notes) or self.full_scan_due(started)

        def flush() -> None:
            nonlocal renewed
            now = self.clock()
            if now - renewed > self.lease_s / 3:
                # Renew well before expiry; the new token fences every later write.
                token = self.ledger.acquire_lease(self.owner, self.lease_s, now)
                if token is None:
                    raise LeaseLostError(f"sweeper lease of {self.owner!r} was taken over")
                result.lease_token, renewed = token, now
            assert result.lease_token is not None
            extra = {"junk_counters": set(junk)} if junk else {}
            result.re_emitted += self.ledger.fenced_re_emit_many(
                self.owner, result.lease_token, now, batch, **extra
            )
            batch.clear()
            junk.clear()

        parked = self._trigger_releases(result)
        found = find_undecided(
            self.store,
            self.min_age_s,
            self.clock(),
            from_index=not result.full_scan,
            ledger=self.ledger,
            decided_marked=decided_marked,
            # A noted batch's records may be young by their own clocks: none is pending.
            answering_notes=bool(notes),
            out_of_time=lambda: self.clock() - started > self.max_run_s,
            left=cut,
        )

        def re_emit(key: tuple[str, str], counter_ok: bool, unanswered: bool) -> None:
            nonlocal left
            if key in parked:
                return  # waits in order behind its event's marker: released, not re-emitted
            result.undecided += 1
            result.unanswered += unanswered
            out_of_budget = self.clock() - started > self.max_run_s
            if out_of_budget or result.re_emitted + len(batch) >= self.max_re_emits:
                left += 1
                return  # counted, left for the next run
            batch.append(key)
            if not counter_ok:
                junk.add(key)
            if len(batch) == self.chunk:
                flush()

        for undecided in found:
            key = (undecided.event_id, undecided.signup_id)
            re_emit(key, undecided.counter_ok, undecided.request_unanswered)
        left += sum(cut)
        result.undecided += sum(cut)  # not known to be: their decisions were not read
        if batch:
            flush()
        # Decided records lose their marker, those whose request is unanswered excepted:
        # those are undecided, and re-emitted (the full read knew them already).
        unanswered: list[tuple[str, str]] = []
        marked = list(decided_marked.items())
        for start in range(0, len(marked), UNMARK_CHUNK):
            if self.clock() - started > self.max_run_s:
                break  # still in the index: a later run removes the rest
            chunk = dict(marked[start : start + UNMARK_CHUNK])
            result.unmarked += self.ledger.clear_undecided(chunk, unanswered=unanswered)
        for key in unanswered:
            re_emit(key, True, True)
        if batch:
            flush()
        if result.full_scan and not left:
            # Every unmarked record it found is re-emitted, and so marked: the index sees
            # it from now on. Records written since ``started`` are the next scan's.
            self.ledger.note_full_scan(self.owner, result.lease_token, started)
            if notes:
                # Each note was sent after its batch's records were written, and read before
                # the scan began: the scan re-emitted every one of them still undecided.
                assert self.failures is not None
                result.failure_notes_deleted = self.failures.delete(notes)

    def _trigger_releases(self, result: SweepResult) -> set[tuple[str, str]]:
        """Set off the release of every parked event; the keys of all parked records.

        The sweeper decides nothing: it wakes a parked event (its wake-up item, turnstile's
        own: no producer's record is needed, nor can one stop it), and the stream
        processor, woken, releases the event's parked records in arrival order. A parking
        marker with nothing parked under it is cleared here (conditioned on its version, so
        a record parked meanwhile keeps it).
        """
        assert result.lease_token is not None
        parked_keys: set[tuple[str, str]] = set()
        for event_id, marker in self.store.parking_markers().items():
            result.parked_events += 1
            parked = self.store.parked_records(event_id)
            parked_keys |= {(event_id, r.signup_id) for r in parked}
            if not parked:
                if self.store.clear_parking(event_id, int(marker[Attr.VERSION])):
                    result.releases_triggered += 1
                continue
            self.store.wake(event_id, WakeReason.SWEEP)
            result.releases_triggered += 1
        return parked_keys

    def replay_failed(self) -> list[SweepResult]:
        """Rerun every run whose latest history entry is ``failed``, and only those."""
        latest: dict[str, dict[str, Any]] = {}
        for item in self.ledger.run_history():
            latest[item[RunAttr.RUN_ID]] = item  # oldest first: the last one wins
        failed = [run for run, item in latest.items() if item[RunAttr.STATUS] == RunStatus.FAILED]
        return [self.sweep(run, replay=True) for run in failed]
