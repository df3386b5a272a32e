"""The stream processor's logic: group a batch by event, decide each group in order, commit.

It receives its store (``SignupStore`` or anything with the same methods) and a clock, so
tests run it against moto, a stubbed client or a fake.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from turnstile.base.clock import ms_of, utc_now
from turnstile.base.contract import (
    Attr,
    ControlKey,
    EventState,
    Reason,
    Status,
    is_event_key,
    shard_key,
    shard_of,
    split_shard_key,
)
from turnstile.base.errors import CommitConflictError, JournalTooLargeError
from turnstile.base.personal_data import TTL_LAG_S, decision_expires_at, outlives, signup_ref
from turnstile.engine import lifecycle
from turnstile.engine.escrow import Pool, Share
from turnstile.engine.lifecycle import Event, Transition
from turnstile.storage.dynamo import AccessDenied, error_text, refused_as_invalid
from turnstile.storage.events import EventRecord
from turnstile.storage.intake import IntakeRecord, engine_commands, parse_intake
from turnstile.storage.items import (
    Answered,
    Decision,
    Outcome,
    decisions_without_event,
    outcome_of,
    refusals_without_event,
    signup_state,
    touched_without_state,
    without_void,
)
from turnstile.storage.journal import Journal, journal_digest
from turnstile.storage.ports import ProcessorStore

__all__ = [
    "BatchResult",
    "DecidedSignup",
    "MovedSignup",
    "StreamProcessor",
    "StreamRecord",
    "utc_now",
]

log = logging.getLogger(__name__)

NEW_RECORD_EVENTS = frozenset({"INSERT", "MODIFY"})
#: A deletion of an intake item (TTL's, or anyone's): it decides nothing, and only notes that
#: the event's records may be put again (``ParkAttr.MAY_REPEAT``).
REMOVED = "REMOVE"
#: A parked event whose release failed is tried again this much later (the due-holds index).
RELEASE_RETRY_MS = 5_000


@dataclass(frozen=True)
class StreamRecord:
    """One stream record, reduced to what the processor needs (plain Python values)."""

    sequence_number: str
    event_name: str
    keys: Mapping[str, Any]
    new_image: Mapping[str, Any] | None = None

    @property
    def event_id(self) -> str:
        return str(self.keys.get("event_id", ""))

    @property
    def woken_event(self) -> str | None:
        """The event a wake-up record (the control table's stream) wakes; None for an
        intake record."""
        pk = self.keys.get(ControlKey.PK)
        if isinstance(pk, str) and pk.startswith(ControlKey.WAKE_PREFIX):
            return pk.removeprefix(ControlKey.WAKE_PREFIX)
        return None


@dataclass(frozen=True)
class DecidedSignup:
    event_id: str
    decision: Decision
    decided_at: str
    submitted_at: str | None


@dataclass(frozen=True)
class MovedSignup:
    """A signup's later move (a confirmation, cancellation, expiry, promotion, close) or
    a refused request, as a report of what a batch did."""

    event_id: str
    transition: Transition


@dataclass
class BatchResult:
    """What one batch came to: failed sequence numbers (one per failed event group)."""

    failures: list[str] = field(default_factory=list)
    decided: list[DecidedSignup] = field(default_factory=list)
    ignored: int = 0
    conflicts: int = 0
    #: (event_id, error class) of each event whose deciding failed and that is now parked.
    parked_events: list[tuple[str, str]] = field(default_factory=list)
    parked: int = 0
    released: int = 0
    #: (event_id, transition) of every move and refusal the lifecycle made, in order
    #: (first decisions included: ``decided`` has them as decisions).
    transitions: list[tuple[str, Transition]] = field(default_factory=list)


class StreamProcessor:
    """Decides a batch of intake stream records, event by event, in stream order."""

    def __init__(
        self,
        store: ProcessorStore,
        clock: Callable[[], str] = utc_now,
        chunk_size: int = 100,
        max_conflicts: int = 20,
        journal_cache_size: int = 10_000,
        max_release: int = 5_000,
        decision_retention_days: int | None = None,
        max_lapses: int = 1_000,
    ) -> None:
        self.store = store
        #: The most holds one step lapses (the engine's ``max_lapses``), so that the commit
        #: of a step after many lapsed at once still fits a journal; halved while it does
        #: not. The rest lapse in the steps that follow, before anything else.
        self.max_lapses = max_lapses
        self._lapses = max_lapses
        #: Whether the last ``_step`` lapsed holds only, more being due (``Step.partial``).
        self._partial = False
        #: The record after which the last ``_step`` stopped (``Step.stopped_at``), if any.
        self._stopped_at: str | None = None
        #: Decisions carry ``expires_at`` this many days after they are decided (TTL); None:
        #: they are kept.
        self.decision_retention_days = decision_retention_days
        self.clock = clock
        self.chunk_size = chunk_size
        self.max_conflicts = max_conflicts
        # Journals this process has materialized, so it does not write them twice. Losing
        # this (a cold start) only costs one re-materialization; it never affects safety.
        self._materialized: OrderedDict[tuple[str, str | None], bytes] = OrderedDict()
        self._cache_size = journal_cache_size
        #: Records one release decides at most; the rest stay parked for the next one.
        self.max_release = max_release
        # The event item read together with the parking marker, for the group's first chunk.
        self._prefetched: dict[str, EventRecord | None] = {}
        # Shards whose step failed while a short shard stepped them (``_decide_chunk``).
        self._unsteppable: set[str] = set()
        # Events whose marker item is known to say their INSERTs may repeat a signup decided
        # already (``ParkAttr.MAY_REPEAT``, never removed): every decision is read, and a
        # removal needs no write. Losing this (a cold start) costs one read of the marker.
        self._may_repeat: OrderedDict[str, None] = OrderedDict()

    def process(self, records: Iterable[StreamRecord]) -> BatchResult:
        """Decide every new intake record; report the first record of each failed group.

        A group (one event's records) that fails stops there: its later records are not
        decided before the failed one. They are parked, and with them the event, until a release
        decides them in arrival order; only if parking fails too does the failure's sequence
        number go back to the event source, which redelivers from it. Other events carry on.
        """
        result = BatchResult()
        groups: dict[str, list[IntakeRecord]] = {}
        # Per event, the first deletion of one of its intake items (it decides nothing).
        removals: dict[str, str] = {}
        wakes: dict[str, str] = {}
        for record in records:
            if record.event_name not in NEW_RECORD_EVENTS:
                result.ignored += 1  # a REMOVE (TTL's clean-up, or a delete) decides nothing
                if record.event_name == REMOVED and record.woken_event is None:
                    event_id = record.event_id
                    if is_event_key(event_id):  # no event can have another id
                        groups.setdefault(event_id, [])
                        removals.setdefault(event_id, record.sequence_number)
                continue
            woken = record.woken_event
            if woken is not None:
                wakes[woken] = record.sequence_number  # one step per event is enough
                continue
            intake = parse_intake(
                record.new_image,
                record.sequence_number,
                record.keys,
                inserted=record.event_name == "INSERT",
            )
            if record.new_image is None:
                intake = _with_problem(intake, "record has no new image")
            groups.setdefault(intake.event_id, []).append(intake)
        for event_id, group in groups.items():
            self._process_group(event_id, group, result, removals.get(event_id))
        for event_id, sequence_number in wakes.items():
            self._wake(event_id, sequence_number, result)
        return result

    def _wake(self, event_id: str, sequence_number: str, result: BatchResult) -> None:
        """A wake-up: the event takes one step with no record of a signup (a tick: lapsed
        holds end, seats given back or added reach the waitlist, a close is acted on); a
        parked event's records are released first (the tick follows: a release with
        nothing left parked takes no step). A failure goes back to the event source (the
        wake-up is retried); nothing is parked, as a wake-up is no arrival."""
        self._prefetched.clear()
        if not is_event_key(event_id):
            result.ignored += 1
            return
        try:
            event, parking, may_repeat = self.store.get_event_and_parking(event_id)
            if may_repeat:
                self._remember_repeat(event_id)
            if parking is not None:
                if not self.release(event_id, result):
                    return  # still parked: its release is due again (release_due)
                event = self.store.get_event(event_id)
            if event is None:
                result.ignored += 1
                return
            self._prefetched[event_id] = event
            tick = IntakeRecord(event_id, "", sequence_number, seats=0, tick=True)
            consumed = 0
            while not consumed:  # more steps while holds lapse in steps of a bounded size
                decided, consumed = self._decide_chunk(event_id, [tick], result)
                result.decided.extend(decided)
        except Exception:
            log.exception("wake-up failed", extra={"event_id": event_id})
            result.failures.append(sequence_number)
            try:  # written again later, whatever becomes of this record's retries
                self.store.wake_later(event_id, ms_of(self.clock()) + RELEASE_RETRY_MS)
            except Exception:
                log.exception("could not put off the wake-up", extra={"event_id": event_id})
        finally:
            self._prefetched.pop(event_id, None)

    def _process_group(
        self,
        event_id: str,
        records: Sequence[IntakeRecord],
        result: BatchResult,
        removal: str | None = None,
    ) -> None:
        """Decide one event's records (none: only deletions of its intake items, whose
        first is ``removal``) in order, or park them."""
        if self._parked_group(event_id, records, result, removal):
            return
        # A record after a deletion may put its intake item again: every decision is read.
        read_all = removal is not None
        self._stopped_at = None
        start = 0
        while start < len(records):
            chunk = records[start : start + self.chunk_size]
            try:
                decided, consumed = self._decide_chunk(event_id, chunk, result, read_all)
            except Exception as exc:
                log.exception("event group failed", extra={"event_id": event_id})
                if not self._park(event_id, records[start:], exc, result):
                    result.failures.append(chunk[0].sequence_number)
                return
            result.decided.extend(decided)
            start += consumed
        try:
            self._finish_stopped(event_id, records[-1].sequence_number, result)
        except Exception:  # its records are decided: the moves left wait for a wake-up
            log.exception("moves left by a cancel or a close failed", extra={"event_id": event_id})
            with contextlib.suppress(Exception):
                self.store.wake_later(event_id, ms_of(self.clock()) + RELEASE_RETRY_MS)

    def _finish_stopped(self, event_id: str, sequence_number: str, result: BatchResult) -> None:
        """After a group whose last step stopped (``Step.stopped_at``: a cancel freed more
        seats, or a close more waiting signups, than a step moves): steps of no record
        (ticks, as a wake-up takes) make the moves left, so the waitlist does not wait for
        the event's next record."""
        consumed = 1
        while self._stopped_at is not None or not consumed:
            tick = IntakeRecord(event_id, "", sequence_number, seats=0, tick=True)
            decided, consumed = self._decide_chunk(event_id, [tick], result)
            result.decided.extend(decided)

    def _decide_chunk(
        self,
        event_id: str,
        chunk: Sequence[IntakeRecord],
        result: BatchResult,
        read_all: bool = False,
    ) -> tuple[list[DecidedSignup], int]:
        # Shards whose step failed, and every shard stepped further up this call's stack
        # (this one included): two shards short of seats, each with a lapsed hold, would
        # otherwise step each other without end.
        unsteppable: set[str] = {event_id, *self._unsteppable}
        for _ in range(self.max_conflicts):
            outer, self._unsteppable = self._unsteppable, unsteppable
            try:
                decided, consumed, moves = self._try_chunk(event_id, chunk, read_all)
            except _LapsedElsewhere as lapsed:
                # Seats held past their time in other shards: freed by a step of each
                # (a tick, as its wake-up would take), then this chunk is decided again. A
                # shard whose step fails is left to its own wake-up (due again shortly):
                # this one is not held up by it, and decides without those seats.
                for shard in lapsed.shards:
                    tick = IntakeRecord(shard, "", chunk[0].sequence_number, seats=0, tick=True)
                    try:
                        # Every hold due there, however many steps of bounded lapses that
                        # takes (each lapses one at least): one step a round would spend
                        # this chunk's conflicts on another shard's lapses.
                        stepped = 0
                        while not stepped:
                            _, stepped = self._decide_chunk(shard, [tick], result)
                    except Exception:
                        log.exception("a lapsed shard's step failed", extra={"event_id": shard})
                        unsteppable.add(shard)
                        with contextlib.suppress(Exception):
                            self.store.wake_later(shard, ms_of(self.clock()) + RELEASE_RETRY_MS)
                result.conflicts += 1
                continue
            except CommitConflictError:
                result.conflicts += 1
                continue
            finally:
                self._unsteppable = outer
            result.transitions.extend(moves)
            return decided, consumed
        raise CommitConflictError(f"event {event_id!r}: {self.max_conflicts} conflicts in a row")

    def _try_chunk(
        self, event_id: str, chunk: Sequence[IntakeRecord], read_all: bool = False
    ) -> tuple[list[DecidedSignup], int, list[tuple[str, Transition]]]:
        """Decide and commit ``chunk``, or the longest prefix of it whose journal fits.

        Returns what was decided and how many records of ``chunk`` that covers; the
        caller hands the rest to the next round, which decides them from the new state.
        ``read_all``: read the decision of every signup the chunk names, whatever the
        event's high-water mark says (the group deleted an intake item).
        """
        by_id: dict[str, IntakeRecord] = {}
        for record in chunk:
            if not record.tick:
                by_id.setdefault(record.signup_id, record)
        # An id that is no id names no event (none can be created), and a key built from it
        # may be one DynamoDB refuses (an event id of up to 2,048 bytes from intake, plus a
        # prefix): the event item is never read, its records are rejected invalid.
        valid = is_event_key(event_id)
        record = self._load_event(event_id) if valid else None
        # A sharded event's records are decided under their shards' keys: each record is
        # checked to be under its own (on its event's item, none is ever decided).
        pool = False
        if record is not None and record.shards > 1:
            pool = split_shard_key(event_id) is None
            chunk = _placed(event_id, record.shards, chunk)
            by_id = {}
            for r in chunk:
                if not r.tick:
                    by_id.setdefault(r.signup_id, r)
        now = self.clock()
        # Never before an intake record of the chunk could bring its signup back.
        expires_at = decision_expires_at(
            now, self.decision_retention_days, (r.expires_at for r in chunk if not r.tick)
        )
        if record is None or pool:
            # No event item (unknown_event), or a sharded event's own (each invalid_request,
            # naming its shard's key): rejected, the event item never written.
            existing = self.store.get_decisions(event_id, by_id)
            decisions = decisions_without_event(chunk, existing, ms_of(now))
            if decisions and valid and not pool and event_id not in self._may_repeat:
                # A signup decided with no event item is under no high-water mark: noted
                # first, so that the event, if it is created, reads every INSERT of its own.
                self.store.note_may_repeat(event_id)
                self._remember_repeat(event_id)
            if decisions:
                self.store.reject_without_event(
                    event_id,
                    decisions,
                    by_id,
                    now,
                    expires_at=expires_at,
                    event_may_appear=valid and not pool,
                )
            # Requests on signups rejected before (no event: nothing to lock, nothing to
            # move) are answered all the same, refused, so none stays unanswered.
            answers = refusals_without_event(chunk, existing, ms_of(now))
            if answers:
                self.store.materialize(
                    event_id, Journal(0, now, (), (), expires_at=expires_at, updates=answers)
                )
            return self._decided(event_id, decisions, now, by_id), len(chunk), []

        cache_key = (event_id, record.created_at)
        # The last journal is decoded only to be written out, when this process has not
        # written out those very bytes itself (a digest: an event item written again can
        # start its versions again).
        blob = record.journal_blob
        if blob is not None and self._materialized.get(cache_key) != journal_digest(blob):
            # The last commit may not have reached its items (a crash, another processor):
            # write them before anything new is decided.
            last = record.journal
            assert last is not None
            voids = self.store.materialize(event_id, last, by_id)
            if voids:
                self._take_back(event_id, last, voids, now, expires_at)
                raise CommitConflictError(f"event {event_id!r}: void decisions taken back")
            self._remember(cache_key, journal_digest(blob))
        # A long lineup's pages (those this container does not hold at their versions).
        record = self.store.load_lineup(record)
        if record.lineup_error is not None:
            # Deciding without the holds and the waitlist could oversell: the event is
            # parked until its lineup reads again.
            raise ValueError(f"event {event_id!r}: {record.lineup_error}")
        # Every signup the chunk names that can be decided already, as its item says now
        # (the last journal is written): a fresh INSERT above the high-water mark cannot.
        reads = _to_read(record, chunk, read_all or event_id in self._may_repeat)
        decided = (
            {
                sid: signup_state(item)
                for sid, item in self.store.get_decisions(event_id, reads).items()
            }
            if reads
            else {}
        )
        self._keep_while_intake_lives(event_id, chunk, decided)
        self._lapses = self.max_lapses
        stored = record.event
        # A shard of a sharded event with a waitlist decides from its pool as well: the
        # places left on the event's waitlist, and the event's capacity (what a signup of
        # its could ever be given).
        pool = self._pool_of(event_id, record)
        if pool is not None:
            record = replace(
                record,
                event=replace(
                    stored, waitlist=len(stored.waiting) + pool.places, ceiling=pool.capacity
                ),
            )
        outcome, moves = self._step(record, chunk, decided, now)
        if self._stopped_at is not None:
            # A cancel or a close moved as many as a step may and stopped after its
            # record: the chunk is decided to there, the rest after the moves left.
            stop = max(i for i, r in enumerate(chunk) if r.sequence_number == self._stopped_at)
            chunk = chunk[: stop + 1]
            outcome, moves = self._step(record, chunk, decided, now)
        deciding, takes = record, ()
        if record.shards > 1 and (short := _wanted(record.event, outcome, pool is not None)):
            deciding, takes = self._secure(event_id, record, short, now)
            if takes:
                outcome, moves = self._step(deciding, chunk, decided, now)
        if outcome is None:
            return [], len(chunk), []
        assert outcome.state is not None
        # Seats this commit gives back that it leaves free go to the shards where someone
        # waited as the pool was read: each is woken in the commit itself.
        wake = _to_wake(event_id, pool, stored, outcome, deciding.event.capacity)
        while True:
            try:
                journal = self.store.commit(
                    stored,
                    outcome,
                    now,
                    by_id,
                    expires_at=expires_at,
                    # a step that only lapsed holds decided none of the chunk's records
                    high_water=None if self._partial else _high_water(record, chunk),
                    takes=takes,
                    pool=pool,
                    wake=wake,
                )
                break
            except JournalTooLargeError as too_big:
                # Big copied fields: commit what a prefix of the chunk decides (deciding a
                # prefix gives a prefix): up to the last first decision that fits, else
                # half. The next round decides the rest from the new state. Too many holds
                # lapsing at once (or a step that lapsed only): half as many lapse. The
                # bound is each kind's (lapses, rejections, promotions): halved from the
                # most of one kind, so a step of as many lapses as promotions makes fewer
                # of both, not as many again.
                most = max(
                    Counter(t.cause for _, t in moves if t.cause in _BOUNDED_MOVES).values(),
                    default=0,
                )
                if most > 1 and most // 2 < self._lapses and (len(chunk) == 1 or self._partial):
                    self._lapses = most // 2  # always fewer: this ends
                elif len(chunk) == 1:
                    raise
                else:
                    chunk = chunk[: _prefix(chunk, outcome, too_big.fits)]
                outcome, moves = self._step(deciding, chunk, dict(decided), now)
                if outcome is None:
                    return [], len(chunk), []
        # A step that only lapsed holds (more were due) consumed none of its records: the
        # next round decides them, from an event with fewer due holds.
        consumed = 0 if self._partial else len(chunk)
        voids = self.store.materialize(event_id, journal, by_id)
        if not voids:
            self._remember(cache_key, journal_digest(journal.encoded))
            return self._decided(event_id, journal.decisions, now, by_id), consumed, moves
        moves += self._take_back(event_id, journal, voids, now, expires_at)
        void = {d.signup_id for d in voids}
        decisions = [d for d in journal.decisions if d.signup_id not in void]
        return self._decided(event_id, decisions, now, by_id), consumed, moves

    def _pool_of(self, event_id: str, record: EventRecord) -> Pool | None:
        """The pool of the sharded event whose shard ``event_id`` is, read now, when the
        event has a waitlist (None otherwise: a shard without one decides from its own item
        alone, and an event of one shard from its item, as ever)."""
        split = split_shard_key(event_id)
        if split is None or record.shards <= 1 or record.event.waitlist <= 0:
            return None
        pool = self.store.pool(split[0])
        # No pool (never: event items are not deleted): no places, nothing dealt.
        return pool if pool is not None else Pool(capacity=0, dealt=0)

    def _secure(
        self, shard: str, record: EventRecord, short: Sequence[int], now: str
    ) -> tuple[EventRecord, tuple[tuple[Share, int], ...]]:
        """A shard whose step refused signups of ``short`` seats each ``capacity_full``
        secures them
        before it commits (docs/hot-events.md): it draws from its event's pool, then
        raises ``CommitConflictError``, so the chunk is decided again from its item with
        the seats drawn; once the pool has none, it plans to take other shards' slack in
        its commit, and returns the shard as decided from (its quota with what it takes)
        and the takes. No takes: no seat is left anywhere, and the refusals stand."""
        split = split_shard_key(shard)
        assert split is not None
        event_id, number = split
        event = record.event
        need = max(0, event.capacity - event.taken) + sum(short)
        secured = self.store.secure(event_id, record.shards, number, need, short)
        mine = secured.share
        if (mine.version, mine.quota, mine.taken) != (event.version, event.capacity, event.taken):
            # seats drawn, or the shard moved since it was read: decided again from it
            raise CommitConflictError(f"shard {shard!r}: seats drawn, deciding again")
        lapsed = [
            k
            for k, due in secured.holding
            if due <= ms_of(now) and shard_key(event_id, k) not in self._unsteppable
        ]
        if lapsed:
            # Not enough seats anywhere, but holds in other shards have lapsed: their seats
            # are free once those shards step, which an unsharded event's step would have
            # done before refusing anyone.
            raise _LapsedElsewhere([shard_key(event_id, k) for k in lapsed])
        took = sum(seats for _, seats in secured.takes)
        if not took:
            return record, ()
        wider = replace(record, event=replace(event, capacity=event.capacity + took))
        return wider, secured.takes

    def _take_back(
        self,
        event_id: str,
        journal: Journal,
        voids: Sequence[Decision],
        now: str,
        expires_at: int | None,
    ) -> list[tuple[str, Transition]]:
        """Take out of the event what ``journal``'s commit counted for ``voids``: first
        decisions that never took effect, because their signups' items hold another first
        decision (``SignupStore.materialize``). That happens only to an INSERT decided
        unread above the event's high-water mark whose key was decided before and deleted,
        when the deletion never reached the processor (its batch was given up on), so
        nothing said the key may come again (docs/design.md, section 4).

        One more commit, conditioned on the event being as ``journal`` left it: the void
        decisions' seats come back and go down the waitlist at once, their places in the
        lineup and their counts go (``without_void``). It writes no high-water mark, so
        every later signup of the event is read (``_to_read``): this cannot happen to it
        again. When the event has moved on, whoever moved it took them back: any processor
        writes the last journal out, and so finds them, before it decides anything new."""
        log.warning(
            "first decisions that never took effect taken back out of the event",
            extra={
                "event_id": event_id,
                "signup_refs": [signup_ref(event_id, d.signup_id) for d in voids],
            },
        )
        for _ in range(self.max_conflicts):
            record = self.store.get_event(event_id)
            if record is None or record.event.version != journal.version:
                return []
            record = self.store.load_lineup(record)
            if record.lineup_error is not None:
                # Taken back from an empty lineup, the holds and the waitlist would be lost:
                # the event is parked, as for any step, until its lineup reads again.
                raise ValueError(f"event {event_id!r}: {record.lineup_error}")
            event, counts = without_void(record.event, record.status_counts, voids)
            tick = lifecycle.Command.tick(voids[-1].sequence_number)
            step = lifecycle.step(event, {}, [tick], ms_of(now))
            missing = touched_without_state(step, {})
            decided = (
                {s: signup_state(i) for s, i in self.store.get_decisions(event_id, missing).items()}
                if missing
                else {}
            )
            outcome = outcome_of(event, counts, step, decided, {}, {})
            # A shard's seats taken back go to the lines, as any seats given back.
            pool = self._pool_of(event_id, record)
            wake = _to_wake(event_id, pool, record.event, outcome, record.event.capacity)
            try:
                taken_back = self.store.commit(
                    record.event, outcome, now, {}, expires_at, pool=pool, wake=wake
                )
            except CommitConflictError:
                continue  # an organizer's change, or another processor: read again
            self.store.materialize(event_id, taken_back, {})
            self._remember((event_id, record.created_at), journal_digest(taken_back.encoded))
            return [(event_id, t) for t in step.transitions]
        raise CommitConflictError(f"event {event_id!r}: {self.max_conflicts} conflicts in a row")

    def _keep_while_intake_lives(
        self, event_id: str, chunk: Sequence[IntakeRecord], decided: Mapping[str, Answered]
    ) -> None:
        """A decision that would expire before its intake record (a producer wrote or
        changed the record's ``expires_at`` after the decision) is kept longer, or for
        good: TTL must never leave a record whose decision is gone, which the sweeper
        would have decided again. Never shortens a decision's life."""
        for record in chunk:
            answered = decided.get(record.signup_id)
            if record.tick or answered is None:
                continue
            kept = answered.item.get(Attr.EXPIRES_AT)
            if outlives(record.expires_at, kept):
                until = None if record.expires_at is None else record.expires_at + TTL_LAG_S
                self.store.keep_decision(event_id, record.signup_id, until)

    def _step(
        self,
        record: EventRecord,
        chunk: Sequence[IntakeRecord],
        decided: dict[str, Answered],
        now: str,
    ) -> tuple[Outcome | None, list[tuple[str, Transition]]]:
        """The lifecycle engine's step over ``chunk`` (docs/lifecycle.md), as a commit
        (None when it changes nothing), and its transitions. Reads the items of the
        signups it moved by itself (an expiry, a promotion) that ``decided`` lacks."""
        commands, counts = engine_commands(
            chunk, {sid: a.request_count for sid, a in decided.items()}
        )
        before = record.event
        result = lifecycle.step(
            before,
            {sid: a.state for sid, a in decided.items()},
            commands,
            ms_of(now),
            max_lapses=self._lapses,
        )
        self._partial = result.partial
        self._stopped_at = result.stopped_at
        moves = [(before.event_id, t) for t in result.transitions]
        if not result.transitions:
            return None, moves
        missing = touched_without_state(result, decided)
        if missing:
            for sid, item in self.store.get_decisions(before.event_id, missing).items():
                decided[sid] = signup_state(item)
        requested = {r.sequence_number: r.request for r in chunk if r.request is not None}
        outcome = outcome_of(before, record.status_counts, result, decided, counts, requested)
        return outcome, moves

    def _remember(self, key: tuple[str, str | None], digest: bytes) -> None:
        self._materialized[key] = digest
        self._materialized.move_to_end(key)
        while len(self._materialized) > self._cache_size:
            self._materialized.popitem(last=False)

    def _remember_repeat(self, event_id: str) -> None:
        self._may_repeat[event_id] = None
        self._may_repeat.move_to_end(event_id)
        while len(self._may_repeat) > self._cache_size:
            self._may_repeat.popitem(last=False)

    def _note_removal(
        self,
        event_id: str,
        sequence_number: str,
        result: BatchResult,
        may_repeat: bool | None = None,
    ) -> None:
        """An intake item of the event was deleted (``sequence_number``: the REMOVE's): it
        may be put again, a new INSERT of a signup decided already, so the event's marker
        item notes that its INSERTs may repeat (once: no write once it says so;
        ``may_repeat`` is what the group's read of it said, None: not read). Deciding goes
        on either way (the group reads every decision); if the note cannot be written, the
        REMOVE goes back to the event source (retried from there), so no later batch decides
        a put again unread."""
        if event_id in self._may_repeat:
            return
        try:
            if may_repeat is None:
                _, _, may_repeat = self.store.get_event_and_parking(event_id)
            if not may_repeat:
                self.store.note_may_repeat(event_id)
            self._remember_repeat(event_id)
        except Exception:
            log.exception("could not note a removal", extra={"event_id": event_id})
            result.failures.append(sequence_number)

    @staticmethod
    def _decided(
        event_id: str,
        decisions: Sequence[Decision],
        decided_at: str,
        by_id: Mapping[str, IntakeRecord],
    ) -> list[DecidedSignup]:
        # A signup moved by the engine whose item had to be written again (it was gone)
        # has no record in the chunk: it is no first decision (its move is reported).
        return [
            DecidedSignup(event_id, d, decided_at, by_id[d.signup_id].submitted_at)
            for d in decisions
            if d.signup_id in by_id
        ]

    # -- parked events: park, then release in arrival order (docs/arrival-order.md) ------

    def _load_event(self, event_id: str) -> EventRecord | None:
        """The event item: the one read with the parking marker if not used yet, else a fresh
        consistent read (after a conflict, or for the next chunk)."""
        if event_id in self._prefetched:
            return self._prefetched.pop(event_id)
        return self.store.get_event(event_id)

    def _parked_group(
        self,
        event_id: str,
        records: Sequence[IntakeRecord],
        result: BatchResult,
        removal: str | None = None,
    ) -> bool:
        """Whether the group was dealt with as a parked event's: parked behind the records
        parked before it, then a release tried (or, if it could not be parked, failed); or
        as deletions alone (``records`` empty), noted.

        Otherwise the event item read alongside the parking marker serves the first chunk.
        A deletion (``removal``) is noted first, whatever becomes of the records.
        """
        self._prefetched.clear()
        if not is_event_key(event_id):
            return False  # no event has this id: each record is rejected invalid_request
        if not records:
            if removal is not None:
                self._note_removal(event_id, removal, result)
            return True
        try:
            event, parking, may_repeat = self.store.get_event_and_parking(event_id)
        except Exception as exc:
            log.exception("event group failed", extra={"event_id": event_id})
            if removal is not None:
                self._note_removal(event_id, removal, result)
            if not self._park(event_id, records, exc, result):
                result.failures.append(records[0].sequence_number)
            return True
        if may_repeat:
            self._remember_repeat(event_id)
        if removal is not None:
            self._note_removal(event_id, removal, result, may_repeat)
        self._prefetched[event_id] = event
        if parking is None:
            return False
        if not self._park(event_id, records, None, result):
            self._prefetched.clear()
            result.failures.append(records[0].sequence_number)
            return True
        self.release(event_id, result)
        return True

    def _park(
        self,
        event_id: str,
        records: Sequence[IntakeRecord],
        error: BaseException | None,
        result: BatchResult,
    ) -> bool:
        """Park ``records`` and mark the event parked; False if that failed too (the
        event source then retries the group: the last resort), or if DynamoDB refused the
        records themselves (parking would block the event behind records that can never
        be decided: they take the event source's retries, bisect and on-failure queue)."""
        if not is_event_key(event_id) or refused_as_invalid(error):
            return False
        error_class = error_text(error) if error is not None else None
        if isinstance(error, AccessDenied):
            # Not a failure to ride out: a grant is missing. Say so at once, loudly.
            log.error("event parked: %s", error_class, extra={"event_id": event_id})
        try:
            self.store.park(event_id, records, self.clock(), error_class)
        except Exception:
            log.exception("parking failed", extra={"event_id": event_id})
            return False
        result.parked += len(records)
        if error_class is not None:
            result.parked_events.append((event_id, error_class))
        return True

    def release(self, event_id: str, result: BatchResult | None = None) -> bool:
        """Decide a parked event's records in arrival order, then clear its marker.

        Parked records are decided by the same path as stream records, under their own
        (arrival) sequence numbers; the decided ones are unparked chunk by chunk, and the
        parking marker is cleared only if nothing was parked since it was read. Returns
        whether the event is no longer parked. Never raises: a failed release leaves the
        rest parked.
        """
        result = result if result is not None else BatchResult()
        try:
            marker = self.store.get_parking(event_id)
            if marker is None:
                return True
            version = int(marker["version"])
            parked = self.store.parked_records(event_id)
            limit = min(len(parked), self.max_release)
            self._stopped_at = None
            start = 0
            while start < limit:
                chunk = parked[start : min(start + self.chunk_size, limit)]
                decided, consumed = self._decide_chunk(event_id, chunk, result)
                result.decided.extend(decided)
                self.store.unpark(event_id, [r.sequence_number for r in chunk[:consumed]])
                result.released += consumed
                start += consumed
            if limit:
                self._finish_stopped(event_id, parked[limit - 1].sequence_number, result)
            if len(parked) > self.max_release:
                return False
            return self.store.clear_parking(event_id, version)
        except Exception as exc:
            log.exception("release failed", extra={"event_id": event_id})
            result.parked_events.append((event_id, error_text(exc)))
            try:  # tried again after a pause, however the event is woken meanwhile
                self.store.release_due(event_id, ms_of(self.clock()) + RELEASE_RETRY_MS)
            except Exception:
                log.exception("could not put off the release", extra={"event_id": event_id})
            return False
        finally:
            self._prefetched.pop(event_id, None)


class _LapsedElsewhere(CommitConflictError):
    """A shard short of seats found holds lapsed in other shards (``shards``: their keys):
    they step first, then the shard decides again."""

    def __init__(self, shards: list[str]) -> None:
        super().__init__(f"holds lapsed in {', '.join(shards)}")
        self.shards = shards


def _placed(event_id: str, shards: int, chunk: Sequence[IntakeRecord]) -> list[IntakeRecord]:
    """``chunk`` of a sharded event, each record not under its shard's key with a problem
    naming the key it belongs under (so it is rejected ``invalid_request``, never decided
    by a shard that does not own it). ``event_id``: the key the records came under (the
    event's own id, or one of its shards' keys)."""
    split = split_shard_key(event_id)
    event = split[0] if split is not None else event_id
    placed = []
    for r in chunk:
        if not r.tick:
            owner = shard_of(r.signup_id, shards)
            if split is None or split[1] != owner:
                r = _with_problem(
                    r,
                    f"event {event} has {shards} shards: signup {r.signup_id!r} belongs "
                    f"under event_id {event}#{owner:02d}",
                )
        placed.append(r)
    return placed


def _to_wake(
    event_id: str, pool: Pool | None, stored: Event, outcome: Outcome, quota: int
) -> list[str]:
    """The shards a shard's commit wakes (in its transaction): when it gives seats back and
    leaves some free (``quota``: its quota with what it takes), the other shards the pool
    (as read before deciding) names as having someone waiting; and itself when someone
    still waits in its own line, since the seats it secured for the line were counted from
    its share before this step gave seats back (its next step counts from the share this
    commit leaves)."""
    after = outcome.state
    if pool is None or after is None or after.taken >= stored.taken:
        return []
    owner = event_id.rpartition("#")[0]  # a shard's key: <event>#<kk>
    wake = []
    if quota > after.taken:
        # (a shard number past the event's, in a pool an operator edited, names no shard)
        others = pool.waiters - {stored.shard}
        wake = [shard_key(owner, k) for k in sorted(others) if 0 <= k < stored.shards]
    if after.waiting and after.state == EventState.OPEN:
        wake.append(event_id)
    return wake


def _wanted(event: Event, outcome: Outcome | None, waits: bool) -> list[int]:
    """The seats a shard secures before it commits: each signup ``outcome`` refused
    ``capacity_full`` (``_short``), and with a waitlist (``waits``), each waiting in the
    shard after the step, in order: seats given back in another shard, or dealt to it, are
    theirs before anyone's who comes later (docs/hot-events.md)."""
    wanted = _short(outcome) if outcome is not None else []
    if waits:
        after = outcome.state if outcome is not None else event
        if after is not None and after.state == EventState.OPEN:
            wanted += [w.seats for w in after.waiting]
    return wanted


def _short(outcome: Outcome) -> list[int]:
    """The seats of each signup ``outcome`` refused ``capacity_full``: what a shard secures
    before it commits."""
    return [
        d.seats
        for d in outcome.decisions
        if d.status == Status.REJECTED and d.reason == Reason.CAPACITY_FULL
    ]


def _sequence(record: IntakeRecord) -> int | None:
    """A record's stream sequence number as a number (None: it is none: a test's, a
    broken record's; such a record is always read and never raises the mark)."""
    number = record.sequence_number
    return int(number) if number.isdigit() and number.isascii() else None


def _to_read(record: EventRecord, chunk: Sequence[IntakeRecord], read_all: bool) -> list[str]:
    """The signups of ``chunk`` whose decision items must be read: all of them if
    ``read_all`` or if the event was committed before it kept a high-water mark; else
    those of every record that is not a fresh INSERT (a MODIFY, a parked record) and of
    every INSERT at or below the mark, which may have been committed (a redelivery), or of
    a signup the event's lineup holds. An INSERT above it was never committed: the mark is
    the greatest sequence number of any intake record a commit of the event decided from,
    on any shard."""
    mark = record.high_water
    if mark is None and record.event.version > 0:
        read_all = True
    # A signup in the lineup was decided, whatever its record's number: read (free to tell).
    lined_up = {h.signup_id for h in record.event.holds}
    lined_up.update(w.signup_id for w in record.event.waiting)
    reads: dict[str, None] = {}
    for r in chunk:
        if r.tick or r.signup_id in reads:
            continue
        if read_all or not r.inserted or r.signup_id in lined_up:
            reads[r.signup_id] = None
            continue
        number = _sequence(r)
        if number is None or (mark is not None and number <= mark):
            reads[r.signup_id] = None
    return list(reads)


def _high_water(record: EventRecord, chunk: Sequence[IntakeRecord]) -> int | None:
    """The event's high-water mark once ``chunk`` is committed: the greater of the one it
    has (none before its first commit) and the sequence numbers of the chunk's intake
    records. Wake-ups are left out (their numbers are the control table's stream's), and so
    is an event committed before it kept a mark: a mark begun later would leave out its
    earlier commits, so it never gets one (None: the commit writes none)."""
    if record.high_water is None and record.event.version > 0:
        return None
    numbers = [n for r in chunk if not r.tick and (n := _sequence(r)) is not None]
    return max([record.high_water or 0, *numbers])


#: The moves a step makes by itself in bounded numbers (``max_lapses``): lapses, a closed
#: event's rejections of its waitlist, and promotions.
_BOUNDED_MOVES = (lifecycle.Cause.EXPIRY, lifecycle.Cause.CLOSE, lifecycle.Cause.PROMOTION)


def _prefix(chunk: Sequence[IntakeRecord], outcome: Outcome, fits: int) -> int:
    """How many records of ``chunk`` to decide again when only ``fits`` of ``outcome``'s
    first decisions fit a journal: those up to the last of them (fewer than all), else
    half the chunk."""
    if 0 < fits < len(outcome.decisions):
        last = outcome.decisions[fits - 1].signup_id
        cut = next(i for i, r in enumerate(chunk) if r.signup_id == last) + 1
        if cut < len(chunk):
            return cut
    return max(1, len(chunk) // 2)


def _with_problem(record: IntakeRecord, problem: str) -> IntakeRecord:
    joined = f"{record.problem}; {problem}" if record.problem else problem
    return replace(record, problem=joined)
